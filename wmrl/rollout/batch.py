"""The training batch that flows from the rollout DataModule through the step's stages (`wmrl.step`),
and `make_batch`, which builds one from played trajectories.

One row per trajectory. The corrections return new batches with `reward` and `reward_var` (debiasing)
and `weight` (denoising) replaced; the update then computes group advantages from `reward` and `weight`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from enum import Enum

import torch

from wmrl.rollout.types import Source, Trajectory, TrajectoryRecord



@dataclass
class RolloutBatch:
    # tokens of the whole trajectory (prompt, completions, observations), right-padded
    input_ids: torch.Tensor  # [N, T] long
    attention_mask: torch.Tensor  # [N, T] long
    loss_mask: torch.Tensor  # [N, T] float; 1 on tokens the policy generated (targets), 0 elsewhere
    old_logprobs: torch.Tensor  # [N, T] float; log-prob of token t under the sampling policy, at target positions
    group_ids: torch.Tensor  # [N] long; trajectories of one prompt share an id
    reward: torch.Tensor  # [N] float; reward used for training (callbacks may correct it)
    real_reward: torch.Tensor  # [N] float; executed reward, NaN where not executed
    wm_reward: torch.Tensor  # [N] float; world-model reward mean, NaN where not scored
    wm_var: torch.Tensor  # [N] float; the world model's own reward variance, NaN where not scored
    reward_var: torch.Tensor  # [N] float; variance of `reward` as an estimate of the real reward:
    #   0 where executed, the WM's variance on WM-only rows until debiasing replaces it by the corrected one
    source: torch.Tensor  # [N] long; a `Source` per row (REAL or WM)
    is_anchor: torch.Tensor  # [N] bool; executed for real AND scored by the world model
    valid: torch.Tensor  # [N] bool; False for trajectories dropped from the loss (infra_error groups)
    weight: torch.Tensor  # [N] float; per-trajectory loss weight (denoising), 1 by default
    strata: dict[str, list[str]] = field(default_factory=dict)  # e.g. task, action_class, status -> [N]
    # per turn: a trajectory's reward is the max over its turns, so corrections work turn by turn
    turn_wm_reward: torch.Tensor | None = None  # [N, K] float; NaN where not scored
    turn_wm_var: torch.Tensor | None = None  # [N, K] float; NaN where not scored
    turn_real_reward: torch.Tensor | None = None  # [N, K] float; NaN where not executed (or infra_error)
    turn_wm_exact: torch.Tensor | None = None  # [N, K] bool; the deterministic checks decided the WM score
    turn_strata: dict[str, list[list[str]]] = field(default_factory=dict)  # key -> [N][K]; status: WM's if scored
    wm_corrected: torch.Tensor | None = None  # [N] WM score after debiasing (anchors: by the fit before their
    #   own pairs, so out of sample); = wm_reward until a debias callback sets it
    wm_corrected_var: torch.Tensor | None = None  # [N] its variance; = wm_var until a debias callback sets it
    anchor_prob: torch.Tensor | None = None  # [N] probability the row was chosen as an anchor (IPW weight 1/p)
    records: list[TrajectoryRecord] = field(default_factory=list)  # per-trajectory, token-free
    step: int = 0  # the training step (0-based) the batch was collected for
    collected_at: float = 0.0  # time.perf_counter() when collection ended (step cost accounting)
    stats: dict[str, float] = field(default_factory=dict)  # rollout-side measurements (times, counts)

    def __post_init__(self) -> None:
        """A batch built without per-turn fields is one of single-turn trajectories."""
        if self.turn_wm_reward is None:
            self.turn_wm_reward, self.turn_wm_var = self.wm_reward[:, None].clone(), self.wm_var[:, None].clone()
            self.turn_real_reward = self.real_reward[:, None].clone()
            self.turn_strata = {k: [[v] for v in col] for k, col in self.strata.items()}
        if self.turn_wm_exact is None:
            self.turn_wm_exact = torch.zeros(self.turn_wm_reward.shape, dtype=torch.bool)
        if self.wm_corrected is None:
            self.wm_corrected, self.wm_corrected_var = self.wm_reward.clone(), self.wm_var.clone()
        if self.anchor_prob is None:
            self.anchor_prob = torch.ones_like(self.reward)

    def __len__(self) -> int:
        return int(self.group_ids.shape[0])

    def to(self, device: torch.device | str) -> "RolloutBatch":
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, torch.Tensor):
                setattr(self, f.name, v.to(device))
        return self

    @property
    def wm_only(self) -> torch.Tensor:
        """Trajectories whose training reward comes from the world model alone."""
        return (self.source == Source.WM) & self.valid

    @property
    def anchor_pairs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(indices, wm_reward, real_reward) of anchored trajectories with both scores."""
        ok = self.is_anchor & self.valid & ~torch.isnan(self.real_reward) & ~torch.isnan(self.wm_reward)
        idx = torch.nonzero(ok).flatten()
        return idx, self.wm_reward[idx], self.real_reward[idx]


def make_batch(trajs: list[Trajectory], pad_id: int, max_length: int) -> RolloutBatch:
    """Right-padded tensors of played trajectories. A trajectory's reward is the max over its turns
    (real when executed, else the world model's); a group with any infra_error is dropped (valid =
    False). Strata of a world-model-scored row come from the world model's side (its best turn's
    class and predicted status), so anchors are filed where the WM-only rows their fit corrects are."""
    n, width = len(trajs), min(max_length, max(len(t.ids) for t in trajs))
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    mask = torch.zeros((n, width))
    old = torch.zeros((n, width))
    real, wm, var = torch.full((n,), math.nan), torch.full((n,), math.nan), torch.full((n,), math.nan)
    strata: dict[str, list[str]] = {"task": [], "action_class": [], "status": []}
    k_turns = max(len(t.turns) for t in trajs)
    t_wm, t_var, t_real = (torch.full((n, k_turns), math.nan) for _ in range(3))
    t_exact = torch.zeros((n, k_turns), dtype=torch.bool)
    turn_strata: dict[str, list[list[str]]] = {"task": [], "action_class": [], "status": []}
    bad_groups = {t.group for t in trajs if t.executed
                  and any(turn.judgement.real.missing for turn in t.turns)}
    for i, t in enumerate(trajs):
        length = min(width, len(t.ids))
        ids[i, :length] = torch.tensor(t.ids[:length])
        attn[i, :length] = 1
        mask[i, :length] = torch.tensor(t.loss_mask[:length])
        old[i, :length] = torch.tensor(t.logprobs[:length])
        judgements = [turn.judgement for turn in t.turns]
        for k, j in enumerate(judgements):
            t_wm[i, k], t_var[i, k], t_exact[i, k] = j.wm_reward, j.wm_var, j.wm_exact
            if j.real is not None and t.group not in bad_groups:
                t_real[i, k] = j.real.reward
        turn_strata["task"].append([t.task] * len(t.turns))
        turn_strata["action_class"].append([turn.action_class for turn in t.turns])
        turn_strata["status"].append([_word(j.wm_status) if t.scored else _word(j.real and j.real.status)
                                      for j in judgements])
        if t.executed and t.group not in bad_groups:
            real[i] = max(j.real.reward for j in judgements)
        if t.scored:
            b = max(range(len(judgements)), key=lambda k: judgements[k].wm_reward)
            wm[i], var[i] = judgements[b].wm_reward, judgements[b].wm_var
            strata["action_class"].append(t.turns[b].action_class)
            strata["status"].append(_word(judgements[b].wm_status))
        else:
            best = t.best_turn() if t.group not in bad_groups else 0
            real_best = judgements[best].real
            strata["action_class"].append(t.turns[best].action_class)
            strata["status"].append(_word(real_best and real_best.status))
        strata["task"].append(t.task)
    executed = torch.tensor([t.executed for t in trajs])
    scored = torch.tensor([t.scored for t in trajs])
    valid = torch.tensor([t.group not in bad_groups for t in trajs])
    reward = torch.where(valid, torch.where(executed, real, wm), torch.zeros(n))
    return RolloutBatch(
        input_ids=ids, attention_mask=attn, loss_mask=mask, old_logprobs=old,
        group_ids=torch.tensor([t.group for t in trajs]), reward=reward, real_reward=real, wm_reward=wm, wm_var=var,
        reward_var=torch.where(executed, torch.zeros(n), var),
        source=torch.where(executed, int(Source.REAL), int(Source.WM)), is_anchor=executed & scored, valid=valid,
        weight=torch.ones(n), strata=strata, turn_wm_reward=t_wm, turn_wm_var=t_var, turn_real_reward=t_real,
        turn_wm_exact=t_exact,
        turn_strata=turn_strata, anchor_prob=torch.tensor([t.anchor_prob for t in trajs], dtype=torch.float32),
        records=[t.record() for t in trajs],
        stats={"rollout/dropped_groups": len(bad_groups)},
    )


def _word(status: Enum | None) -> str:
    """A status as the strata spell it ("" for none)."""
    return "" if status is None else status.value
