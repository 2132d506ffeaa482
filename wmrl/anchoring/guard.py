"""A reward-hacking guard: catch an action class whose world-model reward over-rates real results.

A policy that learns the learned reward instead of research drifts toward what the WM over-rates;
on anchors that shows up first as a growing gap between the WM's and the real reward of one
class. Per class the guard keeps an exponentially weighted running gap d = r̂ − r (the WM reward
the policy is trained on: corrected when debiasing is on, raw otherwise) with a normal interval.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from wmrl.config import EnvConfig  # defaults live in the schema
from wmrl.corrections.decayed import DecayedMoments


class RewardHackingGuard:
    """Per class c, over its anchor pairs with weights λ^age (λ = 0.5^(1/half_life)):

        m_c = Σ λ^age d / Σ λ^age,  v_c = weighted variance of d,
        n_eff = (Σ λ^age)² / Σ λ^(2·age),  se_c = √(v_c / n_eff),  interval m_c ± z·se_c.

    Flag c once it rests on ≥ `min_pairs` pairs and m_c − z·se_c > `threshold` (the WM over-rates it
    by more than the threshold, beyond doubt); unflag once m_c + z·se_c < `threshold` (the whole
    interval is back below it). The gap between the two conditions is the hysteresis: a class
    whose gap sits near the threshold does not flip every step. A flagged class's groups go to
    real execution, which brings its pairs in fast, so the gap is re-measured quickly.
    """

    def __init__(self, threshold: float = EnvConfig.guard_threshold, half_life: float = EnvConfig.guard_half_life,
                 z: float = EnvConfig.guard_z, min_pairs: int = EnvConfig.guard_min_pairs):
        self.threshold, self.half_life, self.z, self.min_pairs = threshold, half_life, z, min_pairs
        self.stats: dict[str, DecayedMoments] = {}  # class -> its gaps' running moments
        self.flagged: set[str] = set()

    def update(self, classes: Sequence[str], wm: np.ndarray, real: np.ndarray) -> set[str]:
        """Learn from anchor pairs (one class per pair, in arrival order); returns the flagged classes."""
        gap = np.asarray(wm, float) - np.asarray(real, float)
        classes = [str(c) for c in classes]
        for cls in dict.fromkeys(classes):
            s = self.stats.setdefault(cls, DecayedMoments(self.half_life))
            s.update(gap[[c == cls for c in classes]])
            _, lo, hi = self.interval(cls)
            if cls not in self.flagged and s.count >= self.min_pairs and lo > self.threshold:
                self.flagged.add(cls)
            elif cls in self.flagged and hi < self.threshold:
                self.flagged.discard(cls)
        return set(self.flagged)

    def interval(self, cls: str) -> tuple[float, float, float]:
        """(gap, lower, upper) of the class's running WM − real gap; NaNs for a class never seen,
        an infinite interval below 2 effective pairs."""
        s = self.stats.get(str(cls))
        if s is None or s.total <= 0:
            return math.nan, math.nan, math.nan
        mean, n_eff = s.mean(), s.n_eff
        if n_eff < 2:
            return mean, -math.inf, math.inf
        half = self.z * math.sqrt(s.variance(n_eff) / n_eff)
        return mean, mean - half, mean + half

    def route_real(self, classes: Iterable[str]) -> np.ndarray:
        """True for rows whose class is flagged: they go to real execution."""
        return np.array([str(c) in self.flagged for c in classes], dtype=bool)

    def metrics(self) -> dict[str, float]:
        """guard/flagged (count), guard/gap/<class> and guard/gap_lower/<class> for logging."""
        out = {"guard/flagged": float(len(self.flagged))}
        for cls in sorted(self.stats):
            gap, lo, _ = self.interval(cls)
            out[f"guard/gap/{cls}"], out[f"guard/gap_lower/{cls}"] = gap, lo
        return out

    def state_dict(self) -> dict:
        return {"stats": {c: s.state_dict() for c, s in self.stats.items()}, "flagged": sorted(self.flagged)}

    def load_state_dict(self, state: dict) -> None:
        self.stats = {}
        for c, s in state["stats"].items():
            self.stats[str(c)] = DecayedMoments(self.half_life)
            self.stats[str(c)].load_state_dict(s)
        self.flagged = set(state["flagged"])
