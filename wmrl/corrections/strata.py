"""Per-stratum debiasing with shrinkage toward the global fit: the stateful `Debiaser`.

One global map cannot undo an error the WM makes on one *class* of experiment only (one model
family, one failure mode); inside a GRPO group such an error reorders the siblings. Each
stratum s therefore gets its own fit f_s, trusted in proportion to the pairs n_s behind it:

    r̃ = (n_s · f_s(r̂) + κ · f(r̂)) / (n_s + κ)

which for the offset method is exactly b̂_s = (n_s·b̄_s + κ·b̂)/(n_s + κ).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping, Sequence

import numpy as np

from wmrl.config import DebiasConfig  # defaults live in the schema
from wmrl.corrections.isotonic import IsotonicMap
from wmrl.corrections.offset import OffsetRectifier
from wmrl.strata import Key, stratum_keys

METHODS = ("isotonic", "offset")


class Debiaser:
    """Learns from anchor pairs (`update`) and corrects WM scores (`correct`).

    `update` also records, per stratum, the mean residual of the raw WM score (r̂ − r) and of
    the corrected one (r̃ − r) where r̃ comes from the fit *before* those pairs were learned,
    so `table()` reports out-of-sample error, not the fit's own training error.
    """

    def __init__(self, method: str = DebiasConfig.method, stratify_by: Sequence[str] = (),
                 kappa: float = DebiasConfig.kappa, min_pairs: int = DebiasConfig.min_pairs,
                 refit_every: int = DebiasConfig.refit_every, buffer_size: int = DebiasConfig.buffer_size,
                 half_life: float = DebiasConfig.half_life,
                 min_stratum_pairs: int = DebiasConfig.min_stratum_pairs):
        if method not in METHODS:
            raise ValueError(f"debias method must be one of {METHODS}; got {method!r}")
        self.method, self.stratify_by, self.kappa = str(method), tuple(map(str, stratify_by)), float(kappa)
        self.min_pairs, self.refit_every, self.buffer_size = min_pairs, refit_every, buffer_size
        self.half_life, self.min_stratum_pairs = half_life, min_stratum_pairs
        self.global_fit = self._new_fit(min_pairs)
        self.strata: dict[Key, IsotonicMap | OffsetRectifier] = {}
        self.residuals: dict[Key, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])  # pairs, Σ(r̂−r), Σ(r̃−r)

    @classmethod
    def from_config(cls, cfg: Any) -> "Debiaser":
        return cls(method=cfg.method, stratify_by=list(cfg.stratify_by), kappa=cfg.kappa, min_pairs=cfg.min_pairs,
                   refit_every=cfg.refit_every, buffer_size=cfg.buffer_size, half_life=cfg.half_life,
                   min_stratum_pairs=cfg.min_stratum_pairs)

    def _new_fit(self, min_pairs: int) -> IsotonicMap | OffsetRectifier:
        if self.method == "isotonic":
            return IsotonicMap(min_pairs, self.refit_every, self.buffer_size)
        return OffsetRectifier(self.half_life)

    def keys_of(self, strata: Mapping[str, Sequence[str]]) -> list[Key] | None:
        """Each row's stratum, from per-row columns such as a batch's `strata`; None for one global fit."""
        return stratum_keys(strata, self.stratify_by)

    def _keys(self, strata_keys: Sequence[Key] | None, n: int) -> list[Key]:
        if not self.stratify_by or strata_keys is None:
            return [()] * n
        return [tuple(str(v) for v in k) for k in strata_keys]

    def update(self, wm, real, strata_keys: Sequence[Key] | None = None,
               sample_weight=None) -> tuple[np.ndarray, np.ndarray]:
        """Learn from anchor pairs; returns their residuals (r̂ − r, r̃ − r) before learning.

        Each executed turn is its own pair, filed under its own stratum (see `turns.py`).
        `sample_weight` = 1/π when anchors were chosen with inclusion probabilities π (IPW),
        so every fit still estimates the error over all rows, not over the likely-chosen ones.
        The residuals r̃ − r are out of sample ("fit before these pairs"): `real + after` is the
        calibrated score to measure s² on (`within_group_residual_s2`).
        """
        wm, real = np.asarray(wm, float), np.asarray(real, float)
        sw = None if sample_weight is None else np.asarray(sample_weight, float)
        keys = self._keys(strata_keys, len(wm))
        before, after = wm - real, self.correct(wm, keys) - real
        self.global_fit.update(wm, real, sw)
        for key in dict.fromkeys(keys):
            rows = np.array([k == key for k in keys])
            if key:
                self.strata.setdefault(key, self._new_fit(self.min_stratum_pairs)).update(
                    wm[rows], real[rows], None if sw is None else sw[rows])
            stats = self.residuals[key]
            stats[0] += int(rows.sum())
            stats[1] += float(before[rows].sum())
            stats[2] += float(after[rows].sum())
        return before, after

    def correct(self, wm, strata_keys: Sequence[Key] | None = None) -> np.ndarray:
        """Corrected WM scores: the global fit, blended with each row's stratum fit by n_s : κ."""
        wm = np.asarray(wm, float)
        keys = self._keys(strata_keys, len(wm))
        out = self.global_fit.correct(wm)
        for key in dict.fromkeys(keys):
            fit = self.strata.get(key)
            if fit is None or fit.n <= 0:
                continue  # n_s = 0: the global fit alone
            rows = np.array([k == key for k in keys])
            out[rows] = (fit.n * fit.correct(wm[rows]) + self.kappa * out[rows]) / (fit.n + self.kappa)
        return out

    def slope(self, wm, strata_keys: Sequence[Key] | None = None, h: float = 0.05) -> np.ndarray:
        """f′(r̂) by a central difference over ±h inside [0, 1] (an isotonic map is a step function,
        so a point derivative is 0 or undefined; an offset has slope 1)."""
        wm = np.clip(np.asarray(wm, float), 0.0, 1.0)  # an injected or extreme score still gets a two-sided difference
        hi, lo = np.clip(wm + h, 0.0, 1.0), np.clip(wm - h, 0.0, 1.0)
        return (self.correct(hi, strata_keys) - self.correct(lo, strata_keys)) / np.maximum(hi - lo, 1e-9)

    def residual_variance(self, wm, strata_keys: Sequence[Key] | None = None) -> np.ndarray:
        """Var[r | r̂, s]: out-of-sample scatter of real around the map in r̂'s region, per stratum
        shrunk toward the global one like the correction: v = (n_s·v_s(r̂) + κ·v(r̂)) / (n_s + κ).
        A stratum without its own estimate uses the global one; 0 while nothing is known (identity map)."""
        wm = np.asarray(wm, float)
        keys = self._keys(strata_keys, len(wm))
        out = np.nan_to_num(self.global_fit.residual_variance(wm), nan=0.0)
        for key in dict.fromkeys(keys):
            fit = self.strata.get(key)
            if fit is None or fit.n <= 0:
                continue
            rows = np.array([k == key for k in keys])
            own = fit.residual_variance(wm[rows])
            own = np.where(np.isnan(own), out[rows], own)
            out[rows] = (fit.n * own + self.kappa * out[rows]) / (fit.n + self.kappa)
        return out

    def corrected_variance(self, wm, wm_var, strata_keys: Sequence[Key] | None = None) -> np.ndarray:
        """Variance of a corrected WM reward as an estimate of the real one:

            Var[r | r̂, s] + f′_s(r̂)²·σ²_WM

        the residual scatter of real around the fitted map (out of sample, per region and stratum:
        a flat stretch of the map is not a certain one) plus the WM's own variance through the
        map's slope. The residual term already contains the part of the WM's noise the anchors
        saw, so the sum errs on the side of less trust. NaN σ² (unknown) stays NaN.
        """
        wm, wm_var = np.asarray(wm, float), np.asarray(wm_var, float)
        return self.residual_variance(wm, strata_keys) + self.slope(wm, strata_keys) ** 2 * wm_var

    def bias(self, key: Key = ()) -> float:
        """Mean amount the correction removes from a stratum's WM scores (() = the global fit)."""
        fit = self.strata.get(key, self.global_fit) if key else self.global_fit
        # an offset shifts every score alike; an isotonic map is probed at the scores it was fitted on
        probe = np.array(fit.wm) if self.method == "isotonic" and fit.wm else np.zeros(1)
        return float(np.mean(probe - self.correct(probe, [key] * len(probe) if key else None)))

    @property
    def pairs(self) -> int:
        """Anchor pairs learned from so far."""
        return int(sum(v[0] for v in self.residuals.values()))

    def table(self) -> list[dict]:
        """One row per stratum, the global fit first as "*": pairs its fit rests on (n), pairs seen,
        bias, and the out-of-sample mean residual before (r̂ − r) and after (r̃ − r) correction."""
        rows = []
        for key in [(), *sorted(self.strata)]:
            if key:
                pairs, before, after = self.residuals.get(key, (0, 0.0, 0.0))
            else:  # the global fit learned from every pair
                pairs, before, after = (sum(col) for col in zip((0, 0.0, 0.0), *self.residuals.values()))
            fit = self.strata[key] if key else self.global_fit
            rows.append({"stratum": "/".join(key) or "*", "n": float(fit.n), "pairs": int(pairs), "bias": self.bias(key),
                         "resid_before": before / pairs if pairs else float("nan"),
                         "resid_after": after / pairs if pairs else float("nan")})
        return rows

    def state_dict(self) -> dict:
        """Plain Python (lists, floats, str) so it goes into a Lightning checkpoint as is."""
        return {"method": self.method, "stratify_by": list(self.stratify_by), "global": self.global_fit.state_dict(),
                "strata": [[list(k), fit.state_dict()] for k, fit in self.strata.items()],
                "residuals": [[list(k), list(v)] for k, v in self.residuals.items()]}

    def load_state_dict(self, state: dict) -> None:
        if state["method"] != self.method or tuple(state["stratify_by"]) != self.stratify_by:
            raise ValueError(f"debias state is for method={state['method']} stratify_by={state['stratify_by']}, "
                             f"not method={self.method} stratify_by={list(self.stratify_by)}")
        self.global_fit.load_state_dict(state["global"])
        self.strata = {}
        for key, fit_state in state["strata"]:
            self.strata[tuple(key)] = self._new_fit(self.min_stratum_pairs)
            self.strata[tuple(key)].load_state_dict(fit_state)
        self.residuals.clear()
        self.residuals.update({tuple(k): list(v) for k, v in state["residuals"]})
