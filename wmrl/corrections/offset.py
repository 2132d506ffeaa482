"""A prediction-powered rectifier: subtract the WM's recent mean error measured on anchors."""
from __future__ import annotations

import numpy as np

from wmrl.config import DebiasConfig  # defaults live in the schema
from wmrl.corrections.decayed import DecayedMoments


class OffsetRectifier:
    """b̂ = exponentially weighted mean of (r̂ − r) over anchor pairs; r̃ = r̂ − b̂.

    A pair's weight halves every `half_life` newer pairs (inf = plain mean), so the estimate
    follows a WM whose error drifts as the policy and the WM train. `n` is the decayed pair
    count Σ λ^age, the number of pairs the estimate effectively rests on. A pair may carry a
    sample weight v (1/π for non-uniformly chosen anchors): b̂ = Σ λ^age v e / Σ λ^age v (a Hájek
    IPW mean), while `n` still counts pairs, not weights.
    """

    def __init__(self, half_life: float = DebiasConfig.half_life):
        self.errors = DecayedMoments(half_life)  # of (r̂ − r), weighted v

    @property
    def n(self) -> float:
        return self.errors.n

    def update(self, wm: np.ndarray, real: np.ndarray, sample_weight: np.ndarray | None = None) -> None:
        self.errors.update(np.asarray(wm, float) - np.asarray(real, float), sample_weight)

    def bias(self) -> float:
        return self.errors.mean()

    def correct(self, wm: np.ndarray) -> np.ndarray:
        return np.asarray(wm, float) - self.bias()

    def residual_variance(self, wm: np.ndarray) -> np.ndarray:
        """Var[r | r̂] after the shift: the weighted variance of (r̂ − r), times n/(n − 1) so that it is
        not the in-sample (too small) one; the same everywhere (an offset has no regions); NaN below 2 pairs."""
        shape = np.shape(wm)
        if self.n < 2 or self.errors.total <= 0:
            return np.full(shape, np.nan)
        return np.full(shape, self.errors.variance(self.n))

    def state_dict(self) -> dict:
        return self.errors.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.errors.load_state_dict(state)
