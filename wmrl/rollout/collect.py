"""Rollouts: the policy acts (the domain reads the action from its completion: a program, in the research
domain) for G samples of each task prompt over K turns, each turn's outcome (real or predicted) becomes the
next observation, and the result is one RolloutBatch.

Training and evaluation share the turn loop (`_play`); they differ in routing (training sends
groups to the world model or the sandbox, evaluation executes everything on the hidden split) and
in their sampling streams. Training anchors may execute in the background (`BackgroundAnchors`)
and join a later step's batch (`env.anchor_lag`).

Under DDP (`world` > 1) every rank routes all of a step's groups alike and plays its own share of them
(`distributed.shard`), sampling with its own streams: a step's data, routing and anchors are those of
one process over the same groups.
"""
from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from wmrl import distributed, stop
from wmrl.background import BackgroundExecutions
from wmrl.env import EnvTimes, Environment
from wmrl.rollout.batch import RolloutBatch, make_batch
from wmrl.rollout.types import Trajectory, TrajectoryRecord, Turn, TurnItem
from wmrl.seeding import stream_seed
from wmrl.step import Handoff


@dataclass(frozen=True)
class Sampling:
    """How completions are sampled."""

    temperature: float
    top_p: float
    max_new_tokens: int  # per turn


class Rollout:
    def __init__(self, tokenizer, chat, generator, env: Environment, suite, turns: int, sampling: Sampling,
                 max_length: int, seed: int, rank: int = 0, world: int = 1):
        self.tok, self.chat, self.generator, self.env, self.suite = tokenizer, chat, generator, env, suite
        self.turns, self.sampling, self.max_length, self.seed = turns, sampling, max_length, seed
        self.rank, self.world = rank, world
        self.own_streams = f"/rank{rank}" if world > 1 else ""  # a rank's sampling streams (one process: none)
        self.anchors = BackgroundAnchors(env, env.cfg.anchor_lag, rank)

    def collect_train(self, step: int, tasks: list, group_size: int, defer: bool = False,
                      handoff: Handoff | None = None) -> RolloutBatch:
        """One training batch of this rank's share of the `len(tasks)` groups, routed by the environment with
        what the last step left (`handoff`: its world model, anchor budget, debiaser; none: all executed).
        `defer`: anchors execute in the background and join the batch `env.anchor_lag` steps later
        (importance-weighted there by their recorded sampling log-probs) with their whole group; earlier
        steps' deferred anchors due now join this one (at the last step, all of them). Random anchor groups
        are deferred before sampling; anchors chosen after scoring (uncertainty, advantage, the guard) take
        their groups along, as long as a batch remains now."""
        handoff = Handoff() if handoff is None else handoff
        rng = random.Random(stream_seed(self.seed, step, "train"))
        times = EnvTimes()
        waiting = self.anchors.due(step)  # earlier steps' anchors that join this batch, executing while it generates
        executed, scored = self.env.routing(len(tasks), step, rng, handoff)  # all groups, as one process routes them
        anchored = [e and s for e, s in zip(executed, scored)]
        # deferring must leave every rank a group to train on now (an empty batch has no update)
        defer_chosen = defer
        defer = defer and all(not all(distributed.shard(anchored, r, self.world)) for r in range(self.world))
        tasks, executed, scored = (distributed.shard(x, self.rank, self.world) for x in (tasks, executed, scored))
        defer = defer and any(e and s for e, s in zip(executed, scored))
        trajs = self._start(tasks, group_size, executed, scored, defer)
        t_gen = self._play(trajs, step, "train", "val", self.sampling.temperature, times, handoff=handoff)
        todo, prob = self.env.after_scoring(trajs, np.random.default_rng(stream_seed(self.seed, step, "anchors" + self.own_streams)), handoff)
        if defer_chosen and todo.any():
            todo = self._defer_chosen(trajs, todo, prob, keep_some=not waiting)
        self._execute_now([t for t, x in zip(trajs, todo) if x], [p for p, x in zip(prob, todo) if x], step, times)
        joining = self.anchors.resolve(step, times, everything=not defer_chosen)
        later = [t for t in trajs if t.deferred]
        if later:
            self.anchors.submit(step, "val", later)
        carried = []
        for k, submission in enumerate(joining, start=1):
            for t in submission:
                t.group += k * len(tasks)  # keep earlier steps' anchor groups apart from this step's and each other's
            carried += submission
        batch = make_batch([t for t in trajs if not t.deferred] + carried, self.tok.pad_token_id, self.max_length)
        batch.stats.update(_stats(t_gen, times))
        batch.stats["rollout/deferred_anchors"] = len(carried)
        batch.stats.update(status_counts(batch.records))
        return batch

    def collect_eval(self, step: int, tasks: list, samples: int, split: str, temperature: float,
                     purpose: str = "eval") -> RolloutBatch:
        """Every program executed for real on `split`. Every evaluation samples from one stream
        (that of step 0), so evaluations at different steps differ by the policy alone; `purpose` names
        the stream (eval, transfer), so one set of tasks evaluates the same whatever else is evaluated."""
        times = EnvTimes()
        trajs = self._start(tasks, samples, [True] * len(tasks), [False] * len(tasks), defer=False)
        t_gen = self._play(trajs, step, purpose, split, temperature, times, sample_step=0)
        batch = make_batch(trajs, self.tok.pad_token_id, self.max_length)
        batch.stats.update(_stats(t_gen, times))
        return batch

    @staticmethod
    def _defer_chosen(trajs: list[Trajectory], todo: np.ndarray, prob: np.ndarray, keep_some: bool) -> np.ndarray:
        """Anchors chosen after scoring execute in the background, their groups trained with them next step
        (a group's advantages need its anchors' real rewards). `keep_some`: unless a group stays to train on
        now, nothing is deferred. Returns what still executes now."""
        held = {t.group for t, x in zip(trajs, todo) if x}
        if keep_some and all(t.group in held or t.deferred for t in trajs):
            return todo
        for t, x, p in zip(trajs, todo, prob):
            if x:
                t.pending, t.anchor_prob = True, float(p)
            t.deferred = t.deferred or t.group in held
        return np.zeros_like(todo)

    def _execute_now(self, trajs: list[Trajectory], probs: list[float], step: int, times: EnvTimes) -> None:
        """Execute every turn of world-model-scored trajectories for real: they become anchors."""
        if not trajs:
            return
        items = [TurnItem(t.task, turn.action, meta={"step": step, "purpose": "train", "group": t.group, "turn": k,
                                                      "anchor": "selected"})
                 for t in trajs for k, turn in enumerate(t.turns)]
        outcomes = iter(self.env.collect(self.env.execute(items, "val"), times))
        for t, p in zip(trajs, probs):
            for turn in t.turns:
                turn.judgement.real = next(outcomes)
            t.executed, t.anchor_prob = True, float(p)

    def _start(self, tasks, group_size, executed, scored, defer) -> list[Trajectory]:
        trajs = []
        for g, task in enumerate(tasks):
            prompt = self.chat.prompt_ids(task.prompt())
            deferred = defer and executed[g] and scored[g]
            for _ in range(group_size):
                trajs.append(Trajectory(task.name, g, list(prompt), [0.0] * len(prompt), [0.0] * len(prompt),
                                        executed=executed[g] and not deferred, scored=scored[g], deferred=deferred,
                                        pending=deferred))
        return trajs

    def _play(self, trajs: list[Trajectory], step: int, purpose: str, split: str, temperature: float,
              times: EnvTimes, sample_step: int | None = None, handoff: Handoff | None = None) -> float:
        """K turns: generate, judge, append the observation. Returns the seconds spent generating."""
        seed_step = step if sample_step is None else sample_step
        own = self.own_streams if purpose == "train" else ""  # evaluation runs on one rank, as in one process
        t_gen = 0.0
        for turn in range(self.turns):
            stop.check()
            t0 = time.perf_counter()
            room = max(8, min(self.sampling.max_new_tokens, self.max_length - max(len(t.ids) for t in trajs)))
            completions = self.generator.generate(
                [t.ids for t in trajs], temperature=temperature, top_p=self.sampling.top_p, max_new_tokens=room,
                seed=stream_seed(self.seed, seed_step, f"{purpose}/gen/{turn}{own}"))
            t_gen += time.perf_counter() - t0
            items = []
            for k, (t, c) in enumerate(zip(trajs, completions)):
                t.ids += c.token_ids
                t.loss_mask += [1.0] * len(c.token_ids)
                t.logprobs += c.logprobs
                action = self.env.domain.action(self.tok.decode(c.token_ids, skip_special_tokens=True))
                items.append(TurnItem(t.task, action, t.history, self.suite.get(t.task).action_class(action),
                                      {"step": step, "purpose": purpose, "group": t.group, "trajectory": k, "turn": turn}))
            judgements = self.env.judge(items, [t.executed for t in trajs], [t.scored for t in trajs], split, times, handoff)
            for t, item, j in zip(trajs, items, judgements):
                t.turns.append(Turn(item.action, item.action_class, j))
                t.history = (t.history + "\n" + j.observation).strip()
                if turn < self.turns - 1:
                    obs = self.chat.observation_ids(self.chat.observation_text(j.observation))
                    t.ids += obs
                    t.loss_mask += [0.0] * len(obs)
                    t.logprobs += [0.0] * len(obs)
        return t_gen

    def state_dict(self) -> dict:
        """Every rank's pending anchors (a checkpoint is written by rank 0 alone; each rank resumes its own)."""
        if self.world == 1:
            return {"pending_anchors": self.anchors.state_dict()}
        return {"pending_anchors_by_rank": distributed.gather(self.anchors.state_dict())}

    @staticmethod
    def replayed(state: dict) -> set[tuple[int, int]]:
        """(rank, step) of the background anchors a run resumed from `state` (a `state_dict`) executes again."""
        by_rank = state.get("pending_anchors_by_rank", [state.get("pending_anchors")])
        out = set()
        for rank, pending in enumerate(by_rank):
            out |= {(rank, d["step"]) for d in ([pending] if isinstance(pending, dict) else pending or [])}
        return out

    def load_state_dict(self, state: dict) -> None:
        if "pending_anchors_by_rank" in state:
            by_rank = state["pending_anchors_by_rank"]
            if len(by_rank) != self.world:
                raise ValueError(f"the checkpoint was written by {len(by_rank)} processes; resume it with as many")
            self.anchors.load_state_dict(by_rank[self.rank])
        else:
            self.anchors.load_state_dict(state["pending_anchors"])


@dataclass
class _Submission:
    step: int  # the step whose trajectories these are
    split: str
    trajectories: list[Trajectory]
    future: BackgroundExecutions  # of the pending ones' turns


class BackgroundAnchors:
    """Trajectories of earlier steps carried to later ones: the anchors among them (`pending`) execute while
    the next steps are collected; their group mates wait for them. A step's submission joins the batch
    `lag` steps after its own, whatever the executions' timing (so a resumed run trains on the same
    batches); the trainer waits for what is not done by then."""

    def __init__(self, env: Environment, lag: int = 1, rank: int = 0):
        self.env, self.lag, self.rank = env, lag, rank
        self.submissions: list[_Submission] = []

    def due(self, step: int) -> bool:
        """Whether some submission joins the batch of `step`."""
        return any(self._joins(s, step) for s in self.submissions)

    def _joins(self, submission: _Submission, step: int, everything: bool = False) -> bool:
        return everything or step - submission.step >= self.lag

    def submit(self, step: int, split: str, trajectories: list[Trajectory]) -> None:
        items = [TurnItem(t.task, turn.action, meta={"step": step, "purpose": "train", "group": t.group, "turn": k,
                                                       "deferred": True, "rank": self.rank})
                 for t in trajectories if t.pending for k, turn in enumerate(t.turns)]
        self.submissions.append(_Submission(step, split, trajectories, self.env.execute_background(items, split)))

    def resolve(self, step: int, times: EnvTimes, everything: bool = False) -> list[list[Trajectory]]:
        """The submissions that join the batch of `step` (`lag` steps old; with `everything`, all), oldest
        first, with their real outcomes (waits for any still running)."""
        joining = [s for s in self.submissions if self._joins(s, step, everything)]
        self.submissions = [s for s in self.submissions if not self._joins(s, step, everything)]
        for s in joining:  # every slot for what the trainer waits for, before it waits
            s.future.hurry()
        out = []
        for s in joining:
            outcomes = iter(self.env.collect(s.future, times))
            for t in s.trajectories:
                if t.pending:
                    for turn in t.turns:
                        turn.judgement.real = next(outcomes)
                    t.executed = True
                t.deferred = t.pending = False
            out.append(s.trajectories)
        return out

    def state_dict(self) -> list[dict] | None:
        """Plain data for a checkpoint; a resumed run executes them again (executions are seeded,
        so it gets the same outcomes)."""
        if not self.submissions:
            return None
        return [{"step": s.step, "split": s.split, "trajectories": [t.to_dict() for t in s.trajectories]}
                for s in self.submissions]

    def load_state_dict(self, state: list[dict] | None) -> None:
        self.submissions = []
        for d in state or []:
            self.submit(d["step"], d["split"], [Trajectory.from_dict(t, self.env.domain) for t in d["trajectories"]])


def status_counts(records: Sequence[TrajectoryRecord]) -> dict[str, float]:
    """`train/status/<status>`: how many of the batch's turns got each status, the real one where executed, else the
    world model's (counts, so ranks sum; a share is a count over their total). What a policy writes, step by step."""
    out: dict[str, float] = {}
    for rec in records:
        for turn in rec.turns:
            j = turn.judgement
            status = j.real.status if j.real is not None else j.wm_status
            if status is not None:
                key = f"train/status/{status.value}"
                out[key] = out.get(key, 0.0) + 1.0
    return out


def _stats(t_gen: float, times: EnvTimes) -> dict[str, float]:
    return {"time/generation_s": t_gen, "time/env_real_s": times.real_s, "time/env_wm_s": times.wm_s,
            "cost/real_executions": times.executions, "cost/sandbox_slot_s": times.slot_s,
            "rollout/infra_errors": times.infra_errors,
            **({"wm/malformed_answers": times.wm_malformed, "wm/answers": times.wm_answers} if times.wm_answers else {})}
