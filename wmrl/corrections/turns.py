"""Correct per turn, then aggregate: a trajectory's reward is max_t f_{s(t)}(r̂_t).

A trajectory of K turns is scored per turn (the paper's ladder) and its reward is the max over
turns. The WM's error depends on the class of each turn's program, so each turn is corrected in
its own stratum before the max; correcting after the max would apply the best WM turn's class
to a score that may have come from another class. Likewise every executed turn of an anchor is
its own (r̂_t, r_t, s_t) pair for the debiasing fit. Arrays are [N, K] with NaN for turns that
did not happen (a trajectory that stopped early).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from wmrl.corrections.strata import Debiaser, Key


def aggregate_turns(per_turn: np.ndarray) -> np.ndarray:
    """[N, K] → [N]: max over the turns that happened (NaN ignored; NaN when none did)."""
    x = np.asarray(per_turn, float)
    out = np.full(x.shape[0], np.nan)
    seen = ~np.all(np.isnan(x), axis=1)
    out[seen] = np.nanmax(x[seen], axis=1)
    return out


def best_turn(per_turn: np.ndarray) -> np.ndarray:
    """[N, K] → [N] index of the turn `aggregate_turns` takes (-1 when no turn happened), e.g. to
    read that turn's corrected variance."""
    x = np.asarray(per_turn, float)
    out = np.full(x.shape[0], -1)
    seen = ~np.all(np.isnan(x), axis=1)
    out[seen] = np.nanargmax(x[seen], axis=1)
    return out


def _flat(keys: Sequence[Sequence[Key]] | None, shape: tuple[int, int], rows: np.ndarray) -> list[Key] | None:
    if keys is None:
        return None
    return [tuple(keys[i][t]) for i, t in zip(*np.nonzero(rows))]


def correct_turns(debiaser: Debiaser, wm_turns: np.ndarray, keys_turns: Sequence[Sequence[Key]] | None = None,
                  wm_var_turns: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Each turn's WM score corrected in its own stratum: f_{s(i,t)}(r̂_{i,t}); NaN where no turn.

    `keys_turns[i][t]` is turn t's stratum key (as for `Debiaser.correct`). With `wm_var_turns`
    also returns each turn's corrected variance (`Debiaser.corrected_variance`), else None.
    """
    wm = np.asarray(wm_turns, float)
    rows = ~np.isnan(wm)
    keys = _flat(keys_turns, wm.shape, rows)
    out = np.full(wm.shape, np.nan)
    out[rows] = debiaser.correct(wm[rows], keys)
    var = None
    if wm_var_turns is not None:
        var = np.full(wm.shape, np.nan)
        var[rows] = debiaser.corrected_variance(wm[rows], np.asarray(wm_var_turns, float)[rows], keys)
    return out, var


def turn_pairs(wm_turns: np.ndarray, real_turns: np.ndarray, keys_turns: Sequence[Sequence[Key]] | None = None,
               sample_weight: np.ndarray | None = None):
    """Every executed turn of the anchors as its own pair: (wm, real, keys, sample_weight), flat,
    for `Debiaser.update`. `sample_weight` [N] (per trajectory, 1/π) is repeated over its turns."""
    wm, real = np.asarray(wm_turns, float), np.asarray(real_turns, float)
    rows = ~np.isnan(wm) & ~np.isnan(real)
    sw = None if sample_weight is None else np.broadcast_to(np.asarray(sample_weight, float)[:, None], wm.shape)[rows]
    return wm[rows], real[rows], _flat(keys_turns, wm.shape, rows), sw
