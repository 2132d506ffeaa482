"""Denoising, the step's `denoise` stage (`wmrl.step`): per-trajectory loss weights that trust precise rewards
more. A Lightning callback for its checkpointed state; dropping it drops the stage."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from lightning.pytorch import Callback

from wmrl import distributed
from wmrl.corrections import anchor_upweight_weights, inverse_variance_weights, within_group_residual_s2
from wmrl.rl import group_reward_std
from wmrl.rollout import RolloutBatch, Source

METHODS = ("anchor_upweight", "inverse_variance")


class DenoiseCallback(Callback):
    """A pure transform of the batch (`__call__`) that sets `weight` before the update; the module uses it for the weighted group
    baseline and multiplies each trajectory's loss by it.

    inverse_variance: weights on the scale they act on, advantages: w ∝ 1/(σ²/s_g² + 1) with σ² the
    variance of each training reward (`batch.reward_var`: the corrected one when debiasing ran
    first; real rewards at σ_floor²) and s_g its group's reward std (after debiasing).
    anchor_upweight (the paper): anchor trajectories get clip(1 + c·s², 1, w_max), s² an EMA of
    the within-group residual of calibrated WM scores on anchors, calibrated out of sample
    (`batch.wm_corrected`: the debias fit before those anchors' pairs; the raw score without it).

    Under DDP weights are normalised over every rank's rows and s² is measured on every rank's anchors,
    so each rank holds the same s². Returns denoise/weight_mean, denoise/weight_min, denoise/weight_max (valid rows) and, for
    anchor_upweight, denoise/s2.
    """

    def __init__(self, *, method: str, c: float, ema: float, sigma_floor: float, w_min: float, w_max: float):
        if method not in METHODS:
            raise ValueError(f"denoise method must be one of {METHODS}; got {method!r}")
        self.method, self.c, self.ema = method, c, ema
        self.sigma_floor, self.w_min, self.w_max = sigma_floor, w_min, w_max
        self.s2: float | None = None  # anchor_upweight: None until a batch had anchors with varying real rewards

    @classmethod
    def from_config(cls, cfg: Any) -> "DenoiseCallback":
        """From the `callbacks.denoise` section (the schema holds the defaults)."""
        return cls(method=cfg.method, c=cfg.c, ema=cfg.ema, sigma_floor=cfg.sigma_floor, w_min=cfg.w_min, w_max=cfg.w_max)

    def update_s2(self, batch: RolloutBatch) -> None:
        idx, wm, real = batch.anchor_pairs
        ranks = distributed.gather((batch.wm_corrected[idx].cpu(), real.cpu(), batch.group_ids[idx].cpu()))
        calibrated, real = torch.cat([r[0] for r in ranks]), torch.cat([r[1] for r in ranks])
        # group ids are a rank's own: keep two ranks' groups apart
        groups = torch.cat([r[2] * len(ranks) + k for k, r in enumerate(ranks)])
        if not len(real):
            return
        s2 = within_group_residual_s2(calibrated, real, groups)
        if s2 is not None:
            self.s2 = s2 if self.s2 is None else self.ema * self.s2 + (1.0 - self.ema) * s2

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, dict[str, float]]:
        """(the batch with its loss weights, a new batch; metrics)."""
        if self.method == "inverse_variance":
            w = inverse_variance_weights(batch.reward_var, batch.source == Source.REAL, self.sigma_floor,
                                         self.w_min, self.w_max, batch.valid,
                                         group_std=group_reward_std(batch.reward, batch.group_ids, batch.valid),
                                         pool=_over_ranks)
        else:
            self.update_s2(batch)
            w = anchor_upweight_weights(batch.is_anchor, self.s2 or 0.0, self.c, self.w_max, batch.valid)
        batch = replace(batch, weight=w.to(device=batch.reward.device, dtype=batch.reward.dtype))

        shown = batch.weight[batch.valid] if batch.valid.any() else batch.weight
        metrics = {"denoise/weight_mean": shown.mean().item(), "denoise/weight_min": shown.min().item(),
                   "denoise/weight_max": shown.max().item()}
        if self.method == "anchor_upweight":
            metrics["denoise/s2"] = float(self.s2 or 0.0)
        return batch, metrics

    def state_dict(self) -> dict:
        return {"s2": self.s2}

    def load_state_dict(self, state_dict: dict) -> None:
        self.s2 = state_dict["s2"]


def _over_ranks(total: float, n: int) -> tuple[float, int]:
    """A (sum, count) summed over every rank."""
    ranks = distributed.gather((total, n))
    return sum(t for t, _ in ranks), sum(c for _, c in ranks)
