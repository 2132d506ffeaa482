"""Group-relative advantages: how much better a trajectory did than its siblings of the same prompt."""
from __future__ import annotations

import torch

SCALES = ("group", "batch", "none")


def _group_sum(values: torch.Tensor, index: torch.Tensor, n_groups: int) -> torch.Tensor:
    return torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, index, values)


def group_advantages(
    reward: torch.Tensor,
    group_ids: torch.Tensor,
    weight: torch.Tensor | None = None,
    valid: torch.Tensor | None = None,
    scale: str = "group",
    eps: float = 1e-6,
    std_floor: float = 0.0,
) -> torch.Tensor:
    """A_i = (r_i - b_g) / s, with b_g the (weighted) mean reward of i's group.

    The baseline is the weighted mean so that a down-weighted (noisy) trajectory also moves its
    siblings' baseline less. `scale`: "group" divides by the group's weighted std (GRPO),
    "batch" by the weighted std of all valid rewards, "none" leaves the centred reward (Dr. GRPO).
    Stds are population stds (divide by the weight sum). A group whose rewards are all equal
    carries no ranking signal and gets advantage 0; invalid rows get 0 and do not enter any
    baseline or std. `std_floor` divides by max(std, std_floor) instead: a near-tied group (std
    0.01 on a 0-1 reward) then gets advantages of its true size, not unit-size ones.
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}; got {scale!r}")
    valid = torch.ones_like(reward, dtype=torch.bool) if valid is None else valid.bool()
    w = torch.ones_like(reward) if weight is None else weight.to(reward.dtype)
    w = torch.where(valid, w, torch.zeros_like(w))
    r = torch.where(valid, reward, torch.zeros_like(reward))  # NaN rewards of dropped rows must not leak

    _, g = torch.unique(group_ids, return_inverse=True)
    n_groups = int(g.max()) + 1 if g.numel() else 0
    w_sum = _group_sum(w, g, n_groups).clamp_min(torch.finfo(r.dtype).tiny)
    centred = r - (_group_sum(w * r, g, n_groups) / w_sum)[g]
    group_std = (_group_sum(w * centred**2, g, n_groups) / w_sum).sqrt()[g]

    if scale == "group":
        adv = centred / (group_std.clamp_min(std_floor) + eps)
    elif scale == "batch":
        batch_mean = (w * r).sum() / w.sum().clamp_min(torch.finfo(r.dtype).tiny)
        batch_std = ((w * (r - batch_mean) ** 2).sum() / w.sum().clamp_min(torch.finfo(r.dtype).tiny)).sqrt()
        adv = centred / (batch_std.clamp_min(std_floor) + eps)
    else:
        adv = centred
    return torch.where(valid & (group_std > eps), adv, torch.zeros_like(adv))


def group_reward_std(reward: torch.Tensor, group_ids: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """s_g per row: the population std of the valid rewards of the row's group (0 for a tied group),
    the scale a group advantage divides by; denoising weights use it (`inverse_variance_weights`)."""
    valid = torch.ones_like(reward, dtype=torch.bool) if valid is None else valid.bool()
    w = valid.to(reward.dtype)
    r = torch.where(valid, reward, torch.zeros_like(reward))
    _, g = torch.unique(group_ids, return_inverse=True)
    n_groups = int(g.max()) + 1 if g.numel() else 0
    count = _group_sum(w, g, n_groups).clamp_min(1.0)
    centred = r - (_group_sum(w * r, g, n_groups) / count)[g]
    return (_group_sum(w * centred**2, g, n_groups) / count).sqrt()[g]
