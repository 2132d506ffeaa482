"""Rollouts: the policy writes programs for G samples of each task prompt over K turns, each turn's
outcome (real or predicted) becomes the next observation, and the result is one RolloutBatch.

`Rollout` is plain Python (used for training and for evaluation); `RolloutDataModule` streams its
batches to Lightning, one per training step, generated with the policy's current weights.
"""
from __future__ import annotations

import dataclasses
import math
import random
import time
from dataclasses import dataclass, field

import lightning as L
import torch
from torch.utils.data import DataLoader, IterableDataset

from wmrl.batch import SOURCE_REAL, SOURCE_WM, RolloutBatch
from wmrl.env import EnvTimes, Judgement
from wmrl.outcome import Status
from wmrl.sandbox.program import extract_program
from wmrl.seeding import stream_seed


@dataclass
class Trajectory:
    task: str
    group: int
    ids: list[int]
    loss_mask: list[float]
    logprobs: list[float]
    programs: list[str] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)  # action class of each turn's program
    judgements: list[Judgement] = field(default_factory=list)
    history: str = ""
    executed: bool = False
    scored: bool = False
    deferred: bool = False  # an anchor whose real execution runs in the background, consumed next step

    def best_turn(self) -> int:
        rewards = [j.real.reward if self.executed and j.real is not None else j.wm_reward for j in self.judgements]
        rewards = [-math.inf if (r is None or math.isnan(r)) else r for r in rewards]
        return max(range(len(rewards)), key=lambda t: rewards[t])

    def record(self) -> dict:
        """A plain, JSON-able record (for sample artifacts and world-model training)."""
        turns = []
        for prog, cls, j in zip(self.programs, self.classes, self.judgements):
            turns.append({"program": prog, "observation": j.observation, "action_class": cls,
                          "real": j.real.to_dict() if j.real is not None else None,
                          "wm_reward": None if math.isnan(j.wm_reward) else j.wm_reward,
                          "wm_var": None if math.isnan(j.wm_var) else j.wm_var, "wm_status": j.wm_status})
        return {"task": self.task, "group": self.group, "executed": self.executed, "anchor": self.executed and self.scored,
                "turns": turns}


class Rollout:
    def __init__(self, tokenizer, chat, generator, env, suite, rollout_cfg, gen_cfg, max_length: int, seed: int):
        self.tok, self.chat, self.generator, self.env, self.suite = tokenizer, chat, generator, env, suite
        self.cfg, self.gen_cfg, self.max_length, self.seed = rollout_cfg, gen_cfg, max_length, seed
        self.pending: dict | None = None  # deferred anchors of the last step: trajectories + their future

    def collect(self, step: int, tasks: list, group_size: int, split: str = "val", route: bool = True,
                temperature: float | None = None, purpose: str = "train", defer: bool = False,
                sample_step: int | None = None) -> RolloutBatch:
        """One batch of `len(tasks)` groups. `defer`: anchor groups execute in the background and
        join the next step's batch (their old log-probs make the update importance-weighted).
        `sample_step` fixes the sampling stream (evaluation reuses one, so evaluations compare)."""
        seed_step = step if sample_step is None else sample_step
        rng = random.Random(stream_seed(self.seed, seed_step, purpose))
        times = EnvTimes()
        t_gen = 0.0
        carried = self._resolve_pending(times) if purpose == "train" else []
        n_groups = len(tasks)
        executed, scored = (self.env.routing(n_groups, step, rng) if route else ([True] * n_groups, [False] * n_groups))
        defer = defer and any(e and s_ for e, s_ in zip(executed, scored))
        trajs: list[Trajectory] = []
        for g, task in enumerate(tasks):
            prompt = self.chat.prompt_ids(task.prompt())
            deferred = defer and executed[g] and scored[g]
            for _ in range(group_size):
                trajs.append(Trajectory(task.name, g, list(prompt), [0.0] * len(prompt), [0.0] * len(prompt),
                                        executed=executed[g] and not deferred, scored=scored[g], deferred=deferred))
        for turn in range(self.cfg.turns):
            t0 = time.perf_counter()
            room = max(8, min(self.gen_cfg.max_new_tokens, self.max_length - max(len(t.ids) for t in trajs)))
            completions = self.generator.generate(
                [t.ids for t in trajs], temperature=self.gen_cfg.temperature if temperature is None else temperature,
                top_p=self.gen_cfg.top_p, max_new_tokens=room, seed=stream_seed(self.seed, seed_step, f"{purpose}/gen/{turn}"))
            t_gen += time.perf_counter() - t0
            items = []
            for k, (t, c) in enumerate(zip(trajs, completions)):
                t.ids += c.token_ids
                t.loss_mask += [1.0] * len(c.token_ids)
                t.logprobs += c.logprobs
                text = self.tok.decode(c.token_ids, skip_special_tokens=True)
                program = extract_program(text)
                t.programs.append(program)
                t.classes.append(self.suite.get(t.task).action_class(program))
                items.append({"task": t.task, "program": program, "history": t.history, "action_class": t.classes[-1],
                              "meta": {"step": step, "purpose": purpose, "group": t.group, "trajectory": k, "turn": turn}})
            judgements = self.env.judge(items, [t.executed for t in trajs], [t.scored for t in trajs], split, times)
            for t, j in zip(trajs, judgements):
                t.judgements.append(j)
                t.history = (t.history + "\n" + j.observation).strip()
                if turn < self.cfg.turns - 1:
                    obs = self.chat.observation_ids(self.chat.observation_text(j.observation))
                    t.ids += obs
                    t.loss_mask += [0.0] * len(obs)
                    t.logprobs += [0.0] * len(obs)
        later = [t for t in trajs if t.deferred]
        if later:
            self.pending = {"step": step, "split": split, "trajectories": later, "future": None}
            self._submit_pending()
        for t in carried:
            t.group += n_groups  # keep last step's anchor groups apart from this step's groups
        batch = self._batch([t for t in trajs if not t.deferred] + carried)
        batch.stats.update({"time/generation_s": t_gen, "time/env_real_s": times.real_s, "time/env_wm_s": times.wm_s,
                            "cost/real_executions": times.executions, "cost/sandbox_slot_s": times.slot_s,
                            "rollout/infra_errors": times.infra_errors, "rollout/deferred_anchors": len(carried)})
        return batch

    # ---- anchors executed in the background -------------------------------------------------
    def _submit_pending(self) -> None:
        p = self.pending
        items = [{"task": t.task, "program": prog,
                  "meta": {"step": p["step"], "consumed": p["step"] + 1, "purpose": "train", "group": t.group,
                           "turn": turn, "deferred": True}}
                 for t in p["trajectories"] for turn, prog in enumerate(t.programs)]
        p["future"] = self.env.execute(items, p["split"])

    def _resolve_pending(self, times: EnvTimes) -> list[Trajectory]:
        """Last step's deferred anchors with their real outcomes (waits for any still running)."""
        p, self.pending = self.pending, None
        if p is None:
            return []
        outcomes = iter(self.env.collect(p["future"], times))
        for t in p["trajectories"]:
            for j in t.judgements:
                j.real = next(outcomes)
            t.executed, t.deferred = True, False
        return p["trajectories"]

    def pending_state(self) -> dict | None:
        """Deferred anchors as plain data for a checkpoint; a resumed run executes them again
        (executions are seeded, so it gets the same outcomes)."""
        if self.pending is None:
            return None
        trajs = [dataclasses.asdict(t) for t in self.pending["trajectories"]]
        for t in trajs:
            for j in t["judgements"]:
                j["real"] = None
        return {"step": self.pending["step"], "split": self.pending["split"], "trajectories": trajs}

    def load_pending_state(self, state: dict | None) -> None:
        self.pending = None
        if state:
            trajs = []
            for d in state["trajectories"]:
                d = dict(d)
                d["judgements"] = [Judgement(**j) for j in d["judgements"]]
                trajs.append(Trajectory(**d))
            self.pending = {"step": state["step"], "split": state["split"], "trajectories": trajs, "future": None}
            self._submit_pending()

    def _batch(self, trajs: list[Trajectory]) -> RolloutBatch:
        n, width = len(trajs), min(self.max_length, max(len(t.ids) for t in trajs))
        ids = torch.full((n, width), self.tok.pad_token_id, dtype=torch.long)
        attn = torch.zeros((n, width), dtype=torch.long)
        mask = torch.zeros((n, width))
        old = torch.zeros((n, width))
        real, wm, var = torch.full((n,), math.nan), torch.full((n,), math.nan), torch.full((n,), math.nan)
        strata = {"task": [], "action_class": [], "status": []}
        bad_groups = set()
        for i, t in enumerate(trajs):
            L_ = min(width, len(t.ids))
            ids[i, :L_] = torch.tensor(t.ids[:L_])
            attn[i, :L_] = 1
            mask[i, :L_] = torch.tensor(t.loss_mask[:L_])
            old[i, :L_] = torch.tensor(t.logprobs[:L_])
            if t.executed:
                outs = [j.real for j in t.judgements]
                if any(o.status is Status.INFRA_ERROR for o in outs):
                    bad_groups.add(t.group)
                else:
                    real[i] = max(o.reward for o in outs)
            if t.scored:
                wms = [j.wm_reward for j in t.judgements]
                b = max(range(len(wms)), key=lambda k: wms[k])
                wm[i], var[i] = wms[b], t.judgements[b].wm_var
                # strata from the world model's side only: anchors must be filed where the WM-only
                # rows that their fit later corrects can be found
                strata["action_class"].append(t.classes[b])
                strata["status"].append(t.judgements[b].wm_status)
            else:
                best = t.best_turn() if t.group not in bad_groups else 0
                real_best = t.judgements[best].real
                strata["action_class"].append(t.classes[best])
                strata["status"].append(real_best.status.value if real_best is not None else "")
            strata["task"].append(t.task)
        executed = torch.tensor([t.executed for t in trajs])
        scored = torch.tensor([t.scored for t in trajs])
        valid = torch.tensor([t.group not in bad_groups for t in trajs])
        reward = torch.where(executed, real, wm)
        reward = torch.where(valid, reward, torch.zeros_like(reward))
        return RolloutBatch(
            input_ids=ids, attention_mask=attn, loss_mask=mask, old_logprobs=old,
            group_ids=torch.tensor([t.group for t in trajs]), reward=reward, real_reward=real, wm_reward=wm, wm_var=var,
            source=torch.where(executed, SOURCE_REAL, SOURCE_WM), is_anchor=executed & scored, valid=valid,
            weight=torch.ones(n), strata=strata, records=[t.record() for t in trajs],
            stats={"rollout/dropped_groups": len(bad_groups)},
        )


class _Stream(IterableDataset):
    """One rollout batch per remaining training step; sized, so Lightning does not prefetch
    (a prefetched rollout would be sampled from weights one update old)."""

    def __init__(self, dm: "RolloutDataModule"):
        self.dm = dm

    def __len__(self) -> int:
        return self.dm.steps

    def __iter__(self):
        while self.dm.module.rl_step < self.dm.steps:
            step = self.dm.module.rl_step
            batch = self.dm.rollout.collect(step, self.dm.sample_tasks(step), self.dm.group_size,
                                            defer=self.dm.async_anchors and step < self.dm.steps - 1)
            yield batch


class RolloutDataModule(L.LightningDataModule):
    def __init__(self, rollout: Rollout, train_tasks: list, groups_per_step: int, group_size: int, steps: int, seed: int,
                 async_anchors: bool = False):
        super().__init__()
        self.rollout, self.train_tasks, self.groups_per_step = rollout, train_tasks, groups_per_step
        self.group_size, self.steps, self.seed, self.async_anchors = group_size, steps, seed, async_anchors
        self.module = None

    def state_dict(self) -> dict:
        return {"pending_anchors": self.rollout.pending_state()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.rollout.load_pending_state(state_dict.get("pending_anchors"))

    def attach(self, module) -> None:
        self.module = module

    def sample_tasks(self, step: int) -> list:
        """Task prompts of a step: a fixed function of (seed, step), so data order survives resume."""
        rng = random.Random(stream_seed(self.seed, step, "tasks"))
        return [rng.choice(self.train_tasks) for _ in range(self.groups_per_step)]

    def train_dataloader(self):
        return DataLoader(_Stream(self), batch_size=None, num_workers=0)
