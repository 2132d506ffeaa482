"""The paper's debiasing map: a monotone (isotonic) regression from WM score to real score.

A monotone non-affine map is used because GRPO's group standardisation cancels any affine
correction; a monotone one can still reshape the score where the WM is miscalibrated.
"""
from __future__ import annotations

from collections import deque

import numpy as np
from sklearn.isotonic import IsotonicRegression


def fit_isotonic(wm: np.ndarray, real: np.ndarray) -> tuple[list[float], list[float]]:
    """Knots (x, y) of the increasing least-squares fit of real on wm, flat beyond the data."""
    iso = IsotonicRegression(increasing=True, out_of_bounds="clip").fit(np.asarray(wm, float), np.asarray(real, float))
    return iso.X_thresholds_.tolist(), iso.y_thresholds_.tolist()


def apply_isotonic(knots: tuple[list[float], list[float]], wm: np.ndarray) -> np.ndarray:
    """Evaluate the fitted map: linear between knots, clipped to the end values (sklearn's predict)."""
    x, y = knots
    return np.interp(np.asarray(wm, float), x, y)


class IsotonicMap:
    """Isotonic map refitted online from a bounded FIFO of (WM, real) anchor pairs.

    Identity until `min_pairs` pairs are buffered; afterwards refitted every `refit_every` new
    pairs. `n` is the number of pairs the current fit rests on (0 while it is the identity).
    """

    def __init__(self, min_pairs: int = 16, refit_every: int = 8, buffer_size: int = 512):
        self.min_pairs, self.refit_every = min_pairs, refit_every
        self.wm: deque[float] = deque(maxlen=buffer_size)
        self.real: deque[float] = deque(maxlen=buffer_size)
        self.new_pairs = 0  # arrived since the last fit
        self.n = 0
        self.knots: tuple[list[float], list[float]] | None = None

    def update(self, wm: np.ndarray, real: np.ndarray) -> None:
        self.wm.extend(np.asarray(wm, float).tolist())
        self.real.extend(np.asarray(real, float).tolist())
        self.new_pairs += len(wm)
        due = self.knots is None or self.new_pairs >= self.refit_every
        if len(self.wm) >= self.min_pairs and due and self.new_pairs > 0:
            self.knots = fit_isotonic(np.array(self.wm), np.array(self.real))
            self.n, self.new_pairs = len(self.wm), 0

    def correct(self, wm: np.ndarray) -> np.ndarray:
        wm = np.asarray(wm, float)
        return wm.copy() if self.knots is None else apply_isotonic(self.knots, wm)

    def bias(self) -> float:
        """Mean amount the map removes from the buffered WM scores."""
        if not self.wm:
            return 0.0
        wm = np.array(self.wm)
        return float(np.mean(wm - self.correct(wm)))

    def state_dict(self) -> dict:
        return {"wm": list(self.wm), "real": list(self.real), "new_pairs": self.new_pairs, "n": self.n,
                "knots": None if self.knots is None else [list(self.knots[0]), list(self.knots[1])]}

    def load_state_dict(self, state: dict) -> None:
        self.wm.clear(), self.real.clear()
        self.wm.extend(state["wm"]), self.real.extend(state["real"])
        self.new_pairs, self.n = int(state["new_pairs"]), int(state["n"])
        self.knots = None if state["knots"] is None else (list(state["knots"][0]), list(state["knots"][1]))
