"""A prediction-powered rectifier: subtract the WM's recent mean error measured on anchors."""
from __future__ import annotations

import math

import numpy as np

from wmrl.config import DebiasConfig  # defaults live in the schema


class OffsetRectifier:
    """b̂ = exponentially weighted mean of (r̂ − r) over anchor pairs; r̃ = r̂ − b̂.

    A pair's weight halves every `half_life` newer pairs (inf = plain mean), so the estimate
    follows a WM whose error drifts as the policy and the WM train. `n` is the decayed pair
    count Σ λ^age, the number of pairs the estimate effectively rests on. A pair may carry a
    sample weight v (1/π for non-uniformly chosen anchors): b̂ = Σ λ^age v e / Σ λ^age v (a Hájek
    IPW mean), while `n` still counts pairs, not weights.
    """

    def __init__(self, half_life: float = DebiasConfig.half_life):
        self.decay = 0.5 ** (1.0 / half_life) if math.isfinite(half_life) else 1.0
        self.weighted_sum = 0.0  # Σ λ^age v (r̂ − r)
        self.weighted_sq = 0.0  # Σ λ^age v (r̂ − r)²
        self.weight_total = 0.0  # Σ λ^age v
        self.n = 0.0  # Σ λ^age

    def update(self, wm: np.ndarray, real: np.ndarray, sample_weight: np.ndarray | None = None) -> None:
        err = np.asarray(wm, float) - np.asarray(real, float)
        v = np.ones(len(err)) if sample_weight is None else np.asarray(sample_weight, float)
        age_w = self.decay ** np.arange(len(err))[::-1]  # the last pair of the batch is the newest
        keep = self.decay ** len(err)
        self.weighted_sum = keep * self.weighted_sum + float(np.sum(age_w * v * err))
        self.weighted_sq = keep * self.weighted_sq + float(np.sum(age_w * v * err**2))
        self.weight_total = keep * self.weight_total + float(np.sum(age_w * v))
        self.n = keep * self.n + float(np.sum(age_w))

    def bias(self) -> float:
        return self.weighted_sum / self.weight_total if self.weight_total > 0 else 0.0

    def correct(self, wm: np.ndarray) -> np.ndarray:
        return np.asarray(wm, float) - self.bias()

    def residual_variance(self, wm: np.ndarray) -> np.ndarray:
        """Var[r | r̂] after the shift: the weighted variance of (r̂ − r), times n/(n − 1) so that it is
        not the in-sample (too small) one; the same everywhere (an offset has no regions); NaN below 2 pairs."""
        shape = np.shape(wm)
        if self.n < 2 or self.weight_total <= 0:
            return np.full(shape, np.nan)
        var = max(self.weighted_sq / self.weight_total - self.bias() ** 2, 0.0) * self.n / (self.n - 1.0)
        return np.full(shape, var)

    def state_dict(self) -> dict:
        return {"weighted_sum": self.weighted_sum, "weighted_sq": self.weighted_sq,
                "weight_total": self.weight_total, "n": self.n}

    def load_state_dict(self, state: dict) -> None:
        self.weighted_sum, self.n = float(state["weighted_sum"]), float(state["n"])
        self.weighted_sq = float(state.get("weighted_sq", 0.0))  # absent in checkpoints before variances
        self.weight_total = float(state.get("weight_total", self.n))
