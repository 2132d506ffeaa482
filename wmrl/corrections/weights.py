"""Denoising: per-trajectory loss weights that trust a reward in proportion to its precision."""
from __future__ import annotations

import torch


def inverse_variance_weights(var: torch.Tensor, is_real: torch.Tensor, sigma_floor: float, w_min: float,
                             w_max: float, valid: torch.Tensor | None = None) -> torch.Tensor:
    """w_i ∝ 1/(σ_i² + σ_floor²), normalised to mean 1 over valid rows, then clipped to [w_min, w_max].

    Real rewards (anchors, sandbox rows) carry only the real-execution noise: σ² = 0, so they sit
    at the floor 1/σ_floor². A WM row with unknown (NaN) variance is trusted least (w_min).
    Invalid rows get weight 0. With every row real all weights are 1.
    """
    valid = torch.ones_like(is_real, dtype=torch.bool) if valid is None else valid.bool()
    var = torch.where(is_real.bool(), torch.zeros_like(var), torch.nan_to_num(var, nan=float("inf")).clamp_min(0.0))
    precision = torch.where(valid, 1.0 / (var + sigma_floor**2), torch.zeros_like(var))
    w = precision / precision[valid].mean() if valid.any() else precision
    return torch.where(valid, w.clamp(w_min, w_max), torch.zeros_like(w))


def within_group_residual_s2(calibrated: torch.Tensor, real: torch.Tensor, group_ids: torch.Tensor) -> float | None:
    """s² = Σ ((r̃ − mean_g r̃) − (r − mean_g r))² / Σ (r − mean_g r)² over rows with both scores.

    Only within-group differences reach a GRPO advantage, so the WM's error is measured after
    removing each group's mean, relative to the real scores' own within-group variance.
    None when the real scores do not vary inside any group (nothing to normalise by).
    """
    _, g = torch.unique(group_ids, return_inverse=True)
    n_groups = int(g.max()) + 1 if g.numel() else 0

    def centred(x: torch.Tensor) -> torch.Tensor:
        sums = torch.zeros(n_groups, dtype=x.dtype).index_add_(0, g, x)
        counts = torch.zeros(n_groups, dtype=x.dtype).index_add_(0, g, torch.ones_like(x))
        return x - (sums / counts)[g]

    real_c = centred(real.double())
    signal = float((real_c**2).sum())
    if signal <= 1e-12:
        return None
    return float(((centred(calibrated.double()) - real_c) ** 2).sum()) / signal


def anchor_upweight_weights(is_anchor: torch.Tensor, s2: float, c: float, w_max: float,
                            valid: torch.Tensor | None = None) -> torch.Tensor:
    """The paper's rule: with V_WM = (1 + c·s²)·V_real, anchor trajectories get w = clip(1 + c·s², 1, w_max)
    (their real reward is that much more precise); WM trajectories keep 1; invalid rows get 0."""
    valid = torch.ones_like(is_anchor, dtype=torch.bool) if valid is None else valid.bool()
    anchor_w = min(max(1.0 + c * s2, 1.0), w_max)
    w = torch.where(is_anchor.bool(), anchor_w, 1.0).float()
    return torch.where(valid, w, torch.zeros_like(w))
