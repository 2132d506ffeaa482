"""Exponentially decayed running moments: the one running estimate behind the offset rectifier and the
reward-hacking guard."""
from __future__ import annotations

import math

import numpy as np


class DecayedMoments:
    """Over values x arriving in order, each weighted λ^age·v (λ = 0.5^(1/half_life), inf = no decay;
    v a sample weight, 1 by default, age counted in values):

        total = Σ λ^age v,  first = Σ λ^age v x,  second = Σ λ^age v x²,
        n = Σ λ^age (values, not weights),  n_sq = Σ λ^(2·age),  count (values ever seen, undecayed).
    """

    def __init__(self, half_life: float):
        self.decay = 0.5 ** (1.0 / half_life) if math.isfinite(half_life) else 1.0
        self.total = self.first = self.second = self.n = self.n_sq = 0.0
        self.count = 0

    def update(self, x: np.ndarray, sample_weight: np.ndarray | None = None) -> None:
        x = np.asarray(x, float)
        v = np.ones(len(x)) if sample_weight is None else np.asarray(sample_weight, float)
        age_w = self.decay ** np.arange(len(x))[::-1]  # the last value is the newest
        keep = self.decay ** len(x)
        self.first = keep * self.first + float(np.sum(age_w * v * x))
        self.second = keep * self.second + float(np.sum(age_w * v * x**2))
        self.total = keep * self.total + float(np.sum(age_w * v))
        self.n = keep * self.n + float(np.sum(age_w))
        self.n_sq = keep**2 * self.n_sq + float(np.sum(age_w**2))
        self.count += len(x)

    def mean(self) -> float:
        """The weighted mean; 0 before any weight."""
        return self.first / self.total if self.total > 0 else 0.0

    def variance(self, n: float) -> float:
        """The weighted variance of x, made unbiased for `n` effective values (× n/(n − 1))."""
        return max(self.second / self.total - self.mean() ** 2, 0.0) * n / (n - 1.0)

    @property
    def n_eff(self) -> float:
        """Kish's effective number of values, (Σ λ^age)² / Σ λ^(2·age)."""
        return self.n**2 / self.n_sq if self.n_sq > 0 else 0.0

    def state_dict(self) -> dict:
        return {"total": self.total, "first": self.first, "second": self.second, "n": self.n, "n_sq": self.n_sq,
                "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.total, self.first, self.second = float(state["total"]), float(state["first"]), float(state["second"])
        self.n, self.n_sq, self.count = float(state["n"]), float(state["n_sq"]), int(state["count"])
