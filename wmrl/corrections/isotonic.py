"""The paper's debiasing map: a monotone (isotonic) regression from WM score to real score.

A monotone non-affine map is used because GRPO's group standardisation cancels any affine
correction; a monotone one can still reshape the score where the WM is miscalibrated.
"""
from __future__ import annotations

from collections import deque

import numpy as np
from sklearn.isotonic import IsotonicRegression

from wmrl.config import DebiasConfig  # defaults live in the schema


def fit_isotonic(wm: np.ndarray, real: np.ndarray,
                 sample_weight: np.ndarray | None = None) -> tuple[list[float], list[float]]:
    """Knots (x, y) of the increasing (weighted) least-squares fit of real on wm, flat beyond the data.

    With anchors chosen non-uniformly, `sample_weight` = 1/π (inclusion probability) makes the
    fit estimate E[r | r̂] over every row, not only over the rows that were likely to be chosen.
    """
    iso = IsotonicRegression(increasing=True, out_of_bounds="clip")
    iso.fit(np.asarray(wm, float), np.asarray(real, float), sample_weight=sample_weight)
    return iso.X_thresholds_.tolist(), iso.y_thresholds_.tolist()


def apply_isotonic(knots: tuple[list[float], list[float]], wm: np.ndarray) -> np.ndarray:
    """Evaluate the fitted map: linear between knots, clipped to the end values (sklearn's predict)."""
    x, y = knots
    return np.interp(np.asarray(wm, float), x, y)


def crossfit_isotonic(wm: np.ndarray, real: np.ndarray, folds: int = 5,
                      sample_weight: np.ndarray | None = None) -> np.ndarray:
    """Out-of-fold predictions f_{-k(i)}(r̂_i): pair i is predicted by a map fitted without its fold.

    Folds interleave (i mod K), so in a FIFO each fold spans the whole buffer's time range.
    Residuals real − prediction are then out of sample: on a flat stretch of the map they keep
    the scatter an in-sample fit (which passes through block means) would partly absorb.
    """
    wm, real = np.asarray(wm, float), np.asarray(real, float)
    sw = np.ones(len(wm)) if sample_weight is None else np.asarray(sample_weight, float)
    fold = np.arange(len(wm)) % max(2, folds)
    out = np.empty(len(wm))
    for k in np.unique(fold):
        test = fold == k
        out[test] = apply_isotonic(fit_isotonic(wm[~test], real[~test], sw[~test]), wm[test])
    return out


def residual_variance_table(wm: np.ndarray, resid: np.ndarray, sample_weight: np.ndarray | None = None,
                            bins: int = 5, min_bin: int = 16, prior: float = 8.0) -> tuple[list[float], list[float]]:
    """Var[r | r̂] by region of r̂: (inner bin edges, one variance per bin).

    Bins are quantiles of r̂ with at least `min_bin` pairs each (fewer bins when pairs are few).
    A bin's variance is the weighted mean squared residual, shrunk toward the pooled one with
    `prior` pseudo-pairs: v_b = (n_b·s²_b + prior·s²) / (n_b + prior), so a sparse bin borrows
    from the rest. Residuals are taken around the map (mean zero by construction), not re-centred.
    """
    wm, resid = np.asarray(wm, float), np.asarray(resid, float)
    sw = np.ones(len(wm)) if sample_weight is None else np.asarray(sample_weight, float)
    pooled = float(np.sum(sw * resid**2) / np.sum(sw))
    n_bins = int(max(1, min(bins, len(wm) // max(1, min_bin))))
    edges = np.quantile(wm, np.linspace(0, 1, n_bins + 1)[1:-1]).tolist() if n_bins > 1 else []
    which = np.searchsorted(edges, wm, side="right")
    var = []
    for b in range(n_bins):
        rows = which == b
        n_b = float(rows.sum())
        s2_b = float(np.sum(sw[rows] * resid[rows] ** 2) / np.sum(sw[rows])) if n_b else pooled
        var.append((n_b * s2_b + prior * pooled) / (n_b + prior))
    return edges, var


class IsotonicMap:
    """Isotonic map refitted online from a bounded FIFO of (WM, real) anchor pairs.

    Identity until `min_pairs` pairs are buffered; afterwards refitted every `refit_every` new
    pairs. `n` is the number of pairs the current fit rests on (0 while it is the identity).
    Each pair may carry a sample weight (1/π for non-uniformly chosen anchors). At every refit
    the residual variance of real around the map is re-estimated out of sample (`crossfit_folds`
    folds) per region of r̂ (`residual_variance`).
    """

    def __init__(self, min_pairs: int = DebiasConfig.min_pairs, refit_every: int = DebiasConfig.refit_every,
                 buffer_size: int = DebiasConfig.buffer_size, crossfit_folds: int = 5):
        self.min_pairs, self.refit_every, self.crossfit_folds = min_pairs, refit_every, crossfit_folds
        self.wm: deque[float] = deque(maxlen=buffer_size)
        self.real: deque[float] = deque(maxlen=buffer_size)
        self.weight: deque[float] = deque(maxlen=buffer_size)
        self.new_pairs = 0  # arrived since the last fit
        self.n = 0
        self.knots: tuple[list[float], list[float]] | None = None
        self.var_table: tuple[list[float], list[float]] | None = None

    def update(self, wm: np.ndarray, real: np.ndarray, sample_weight: np.ndarray | None = None) -> None:
        wm = np.asarray(wm, float)
        self.wm.extend(wm.tolist())
        self.real.extend(np.asarray(real, float).tolist())
        weight = np.ones(len(wm)) if sample_weight is None else np.asarray(sample_weight, float)
        self.weight.extend(weight.tolist())
        self.new_pairs += len(wm)
        due = self.knots is None or self.new_pairs >= self.refit_every
        if len(self.wm) >= self.min_pairs and due and self.new_pairs > 0:
            x, y, sw = np.array(self.wm), np.array(self.real), np.array(self.weight)
            self.knots = fit_isotonic(x, y, sw)
            self.n, self.new_pairs = len(self.wm), 0
            self.var_table = None
            if len(x) >= 2 * self.crossfit_folds:
                self.var_table = residual_variance_table(x, y - crossfit_isotonic(x, y, self.crossfit_folds, sw), sw)

    def correct(self, wm: np.ndarray) -> np.ndarray:
        wm = np.asarray(wm, float)
        return wm.copy() if self.knots is None else apply_isotonic(self.knots, wm)

    def residual_variance(self, wm: np.ndarray) -> np.ndarray:
        """Out-of-sample Var[r | r̂] of real around the map in r̂'s region; NaN until it is known."""
        wm = np.asarray(wm, float)
        if self.var_table is None:
            return np.full(wm.shape, np.nan)
        edges, var = self.var_table
        return np.asarray(var)[np.searchsorted(edges, wm, side="right")]

    def bias(self) -> float:
        """Mean amount the map removes from the buffered WM scores."""
        if not self.wm:
            return 0.0
        wm = np.array(self.wm)
        return float(np.mean(wm - self.correct(wm)))

    def state_dict(self) -> dict:
        return {"wm": list(self.wm), "real": list(self.real), "weight": list(self.weight), "new_pairs": self.new_pairs,
                "n": self.n, "knots": None if self.knots is None else [list(self.knots[0]), list(self.knots[1])],
                "var_table": None if self.var_table is None else [list(self.var_table[0]), list(self.var_table[1])]}

    def load_state_dict(self, state: dict) -> None:
        self.wm.clear(), self.real.clear(), self.weight.clear()
        self.wm.extend(state["wm"]), self.real.extend(state["real"])
        self.weight.extend(state["weight"])
        self.new_pairs, self.n = int(state["new_pairs"]), int(state["n"])
        self.knots = None if state["knots"] is None else (list(state["knots"][0]), list(state["knots"][1]))
        table = state["var_table"]
        self.var_table = None if table is None else (list(table[0]), list(table[1]))
