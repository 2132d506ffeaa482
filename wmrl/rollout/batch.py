"""The training batch that flows from the rollout DataModule through the callbacks into the module.

One row per trajectory. Callbacks run in `on_train_batch_start`, in order, and may rewrite
`reward` (debiasing) and `weight` (denoising); the module then computes group advantages
from `reward` and `weight`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch

SOURCE_REAL = 0  # reward came from a real execution (sandbox mode, warm-up, or an anchor group)
SOURCE_WM = 1  # reward came from the world model only


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
    wm_var: torch.Tensor  # [N] float; world-model reward variance, NaN where not scored
    source: torch.Tensor  # [N] long; SOURCE_REAL or SOURCE_WM
    is_anchor: torch.Tensor  # [N] bool; executed for real AND scored by the world model
    valid: torch.Tensor  # [N] bool; False for trajectories dropped from the loss (infra_error groups)
    weight: torch.Tensor  # [N] float; per-trajectory loss weight (denoising), 1 by default
    strata: dict[str, list[str]] = field(default_factory=dict)  # e.g. task, action_class, status -> [N]
    ref_logprobs: torch.Tensor | None = None  # [N, T] under the frozen reference, when rl.kl_beta > 0
    records: list[Any] = field(default_factory=list)  # per-trajectory records for logging (not tensors)
    stats: dict[str, float] = field(default_factory=dict)  # rollout-side measurements (times, counts)

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
        return (self.source == SOURCE_WM) & self.valid

    @property
    def anchor_pairs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(indices, wm_reward, real_reward) of anchored trajectories with both scores."""
        ok = self.is_anchor & self.valid & ~torch.isnan(self.real_reward) & ~torch.isnan(self.wm_reward)
        idx = torch.nonzero(ok).flatten()
        return idx, self.wm_reward[idx], self.real_reward[idx]
