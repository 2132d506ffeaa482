"""Denoising: per-trajectory loss weights that trust a reward in proportion to its precision."""
from __future__ import annotations

from typing import Callable

import torch


def inverse_variance_weights(var: torch.Tensor, is_real: torch.Tensor, sigma_floor: float, w_min: float,
                             w_max: float, valid: torch.Tensor | None = None, group_std: torch.Tensor | None = None,
                             adv_floor: float = 1.0,
                             pool: Callable[[float, int], tuple[float, int]] | None = None) -> torch.Tensor:
    """Per-trajectory loss weights from each reward's variance, on the scale they act on: advantages.

    A group advantage is (r_i − b_g)/s_g, so reward noise σ_i² reaches it as σ_i²/s_g²: the same
    WM noise that is harmless in a group whose rewards spread widely reorders a near-tied group.
    With `group_std` (s_g of each row's group, `group_reward_std`):

        w_i ∝ 1 / (σ_i²/s_g² + adv_floor²)

    σ_i² is the corrected variance for WM rows and `sigma_floor`² (the real-execution noise, on the
    reward scale) for real rows. adv_floor² = 1 is the variance of a standardised advantage
    itself: every row's gradient term carries that much sampling noise whatever its reward's
    precision, so reward noise only costs weight once it is comparable to the group's own spread
    (σ_i ≳ s_g). A floor on the reward scale (σ_floor² = 0.0025) instead made an anchor worth five
    WM rows at σ² = 0.01 however wide the group's spread, and anchors took most of the gradient.
    Rows of a tied group (s_g = 0: advantage 0) get weight 1 and stay out of the normalisation.

    Without `group_std` (legacy, reward scale): w_i ∝ 1/(σ_i² + σ_floor²), real rows at σ² = 0.

    Weights are normalised to mean 1 over valid rows, then clipped to [w_min, w_max]. `pool` maps this
    batch's (sum, count) of counted precisions to those the mean is taken over (DDP: every rank's rows). A WM row
    with unknown (NaN) variance is trusted least (w_min); invalid rows get 0; all-real gives 1.
    """
    valid = torch.ones_like(is_real, dtype=torch.bool) if valid is None else valid.bool()
    real = is_real.bool()
    var = torch.nan_to_num(var, nan=float("inf")).clamp_min(0.0)
    if group_std is None:
        var = torch.where(real, torch.zeros_like(var), var)
        precision = 1.0 / (var + sigma_floor**2)
        counted = valid
    else:
        var = torch.where(real, torch.full_like(var, sigma_floor**2), var)
        s2 = group_std.to(var.dtype) ** 2
        counted = valid & (s2 > 1e-12)
        precision = torch.where(counted, 1.0 / (var / s2.clamp_min(1e-12) + adv_floor**2), torch.ones_like(var))
    precision = torch.where(valid, precision, torch.zeros_like(precision))
    if pool is None:
        w = precision / precision[counted].mean() if counted.any() else precision
    else:
        total, n = pool(float(precision[counted].sum()), int(counted.sum()))
        w = precision / (total / n) if n else precision
    w = torch.where(counted, w.clamp(w_min, w_max), torch.ones_like(w) if group_std is not None else w)
    return torch.where(valid, w, torch.zeros_like(w))


def within_group_residual_s2(calibrated: torch.Tensor, real: torch.Tensor, group_ids: torch.Tensor) -> float | None:
    """s² = Σ ((r̃ − mean_g r̃) − (r − mean_g r))² / Σ (r − mean_g r)² over rows with both scores.

    Only within-group differences reach a GRPO advantage, so the WM's error is measured after
    removing each group's mean, relative to the real scores' own within-group variance.
    r̃ must come from a map fitted WITHOUT these pairs, else s² is the fit's training error (too
    small): the pre-update residuals of `Debiaser.update` (r̃ = real + after, "fit before these
    pairs") or a K-fold fit by group.
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
