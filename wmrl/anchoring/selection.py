"""Where to spend real executions: which trajectories become anchors, and how many.

Selection (Active Statistical Inference, Zrnic & Candès 2024, arXiv 2403.03208): a trajectory
is executed for real with probability π_i growing with how little the WM is trusted on it,
mixed with a uniform floor so that 1/π stays bounded; the debiasing fit then weights each pair
by 1/π_i (inverse-probability weighting), so it still estimates the WM's error over all rows,
not over the rows that were likely to be chosen. Without the floor a few huge weights would
dominate the fit.

Rate: more real executions while the WM is weak (low rank correlation, large error, intervals
that miss), fewer once it is good.
"""
from __future__ import annotations

import math
import random

import numpy as np

from wmrl.config import EnvConfig  # defaults live in the schema

SELECTIONS = ("random", "uncertainty", "advantage")


def anchor_scores(selection: str, wm_var: np.ndarray | None = None,
                  predicted_advantage: np.ndarray | None = None, n: int | None = None) -> np.ndarray:
    """How much each trajectory deserves a real execution, ≥ 0.

    random: 1 for every row. uncertainty: σ_i = √(WM variance) (ensemble disagreement); the
    variance-optimal labelling rule of active inference is π ∝ √E[(r − r̂)² | x], a std, not a
    variance; unknown (NaN) variance scores as the largest. advantage: |A_i| of the advantage the
    update would use with the WM's (corrected) rewards: verify the winners and losers it pushes hardest.
    """
    if selection not in SELECTIONS:
        raise ValueError(f"anchor_selection must be one of {SELECTIONS}; got {selection!r}")
    if selection == "random":
        size = n if n is not None else len(wm_var if wm_var is not None else predicted_advantage)
        return np.ones(size)
    if selection == "uncertainty":
        std = np.sqrt(np.clip(np.asarray(wm_var, float), 0.0, None))
        top = np.nanmax(std) if np.any(~np.isnan(std)) else 1.0
        return np.where(np.isnan(std), top, std)
    return np.abs(np.nan_to_num(np.asarray(predicted_advantage, float)))


def predicted_advantage(wm_score: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The group advantage the update would give each trajectory if its world-model score were its reward
    (`wmrl.rl.group_advantages`, the update's own definition): what `anchor_selection=advantage` ranks by."""
    import torch

    from wmrl.rl import group_advantages

    return group_advantages(torch.as_tensor(wm_score), torch.as_tensor(groups)).numpy()


def inclusion_probabilities(score: np.ndarray, rate: float, uniform_floor: float = EnvConfig.anchor_floor) -> np.ndarray:
    """π_i = rate·N·[(1 − λ)·score_i/Σ score + λ/N], capped at 1 (the excess spread over the rest in
    the same proportions), so Σ π = rate·N and π_i ≥ λ·rate: 1/π ≤ 1/(λ·rate).

    λ = `uniform_floor` ∈ (0, 1]; λ = 1 (or equal scores) is uniform sampling at `rate`.
    """
    score = np.clip(np.nan_to_num(np.asarray(score, float)), 0.0, None)
    n = len(score)
    if n == 0 or rate <= 0:
        return np.zeros(n)
    budget = min(float(rate), 1.0) * n
    lam = float(np.clip(uniform_floor, 0.0, 1.0))
    share = np.full(n, 1.0 / n) if score.sum() <= 0 else (1 - lam) * score / score.sum() + lam / n
    pi = np.zeros(n)
    capped = np.zeros(n, dtype=bool)
    for _ in range(n):  # each pass caps at least one more row, or stops
        free = ~capped
        pi[free] = (budget - capped.sum()) * share[free] / share[free].sum()
        over = free & (pi >= 1.0)
        if not over.any():
            break
        capped |= over
        pi[capped] = 1.0
    return np.clip(pi, 0.0, 1.0)


def select_anchors(score: np.ndarray, rate: float, rng: np.random.Generator,
                   uniform_floor: float = EnvConfig.anchor_floor) -> tuple[np.ndarray, np.ndarray]:
    """(chosen mask, inclusion probabilities π): systematic sampling with probabilities π in a random
    order, so row i is chosen with probability exactly π_i and the count is ⌊rate·N⌋ or ⌈rate·N⌉
    (expected rate·N). The debiasing fit takes `sample_weight = 1/π` of the chosen rows."""
    pi = inclusion_probabilities(score, rate, uniform_floor)
    n = len(pi)
    order = rng.permutation(n)
    edges = np.concatenate([[0.0], np.cumsum(pi[order])])
    u = rng.uniform()
    # row order[j] is chosen when some u + k (k integer) falls in [edges[j], edges[j + 1])
    hits = np.floor(edges[1:] - u) - np.floor(edges[:-1] - u) > 0
    chosen = np.zeros(n, dtype=bool)
    chosen[order[hits]] = True
    return chosen, pi


def adaptive_anchor_rate(fidelity: dict, rate_min: float, rate_max: float, mae_scale: float = EnvConfig.adaptive_mae_scale,
                         nominal_coverage: float = 0.95, min_pairs: int = EnvConfig.adaptive_min_pairs) -> float:
    """rate = rate_max − q·(rate_max − rate_min), q ∈ [0, 1] the WM's quality on recent anchors:

        q = clip(ρ, 0, 1) · clip(1 − MAE/mae_scale, 0, 1) · clip(coverage/nominal, 0, 1)

    a product, so one bad measure is enough to keep real executions high; coverage is left out
    when unknown (NaN). With fewer than `min_pairs` pairs, or ρ / MAE unknown, q = 0 (rate_max):
    the WM is trusted only once it has been measured.
    """
    rho, mae = fidelity.get("spearman", math.nan), fidelity.get("mae", math.nan)
    cov = fidelity.get("coverage", math.nan)
    if fidelity.get("pairs", 0) < min_pairs or math.isnan(rho) or math.isnan(mae):
        return float(rate_max)
    q = float(np.clip(rho, 0, 1)) * float(np.clip(1 - mae / mae_scale, 0, 1))
    if not math.isnan(cov):
        q *= float(np.clip(cov / nominal_coverage, 0, 1))
    return float(rate_max - q * (rate_max - rate_min))


def choose_anchor_groups(n_groups: int, rate: float, rng: random.Random) -> list[bool]:
    """Random anchor groups, rate * n of them in expectation: floor(rate * n), plus one more with probability
    equal to the fraction left. Rounding instead spent 2 of 6 groups (33 %) at rate 0.25 on every step."""
    expected = min(float(n_groups), max(0.0, rate * n_groups))
    k = math.floor(expected)
    k += rng.random() < expected - k
    chosen = set(rng.sample(range(n_groups), k))
    return [g in chosen for g in range(n_groups)]
