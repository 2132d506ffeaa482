"""A prediction-powered rectifier: subtract the WM's recent mean error measured on anchors."""
from __future__ import annotations

import math

import numpy as np


class OffsetRectifier:
    """b̂ = exponentially weighted mean of (r̂ − r) over anchor pairs; r̃ = r̂ − b̂.

    A pair's weight halves every `half_life` newer pairs (inf = plain mean), so the estimate
    follows a WM whose error drifts as the policy and the WM train. `n` is the decayed pair
    count Σ λ^age, the number of pairs the estimate effectively rests on.
    """

    def __init__(self, half_life: float = 64.0):
        self.decay = 0.5 ** (1.0 / half_life) if math.isfinite(half_life) else 1.0
        self.weighted_sum = 0.0  # Σ λ^age (r̂ − r)
        self.n = 0.0  # Σ λ^age

    def update(self, wm: np.ndarray, real: np.ndarray) -> None:
        err = np.asarray(wm, float) - np.asarray(real, float)
        ages = np.arange(len(err))[::-1]  # the last pair of the batch is the newest
        self.weighted_sum = self.decay ** len(err) * self.weighted_sum + float(np.sum(self.decay**ages * err))
        self.n = self.decay ** len(err) * self.n + float(np.sum(self.decay**ages))

    def bias(self) -> float:
        return self.weighted_sum / self.n if self.n > 0 else 0.0

    def correct(self, wm: np.ndarray) -> np.ndarray:
        return np.asarray(wm, float) - self.bias()

    def state_dict(self) -> dict:
        return {"weighted_sum": self.weighted_sum, "n": self.n}

    def load_state_dict(self, state: dict) -> None:
        self.weighted_sum, self.n = float(state["weighted_sum"]), float(state["n"])
