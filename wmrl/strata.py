"""Strata: the classes of rollout (task, action class, predicted status, …) whose world-model error is
measured and corrected apart. One builder of their keys for the debiaser, its callback and the benchmark."""
from __future__ import annotations

from typing import Mapping, Sequence

Key = tuple  # a stratum: the values of the `stratify_by` keys, e.g. ("forest",)


def stratum_keys(columns: Mapping[str, Sequence], by: Sequence[str]) -> list[Key] | None:
    """The one builder of stratum keys: row i's key is (columns[k][i] for k in `by`); None for one global fit
    (`by` empty). A column `by` names that `columns` lacks is a KeyError naming what there is."""
    if not by:
        return None
    missing = [k for k in by if k not in columns]
    if missing:
        raise KeyError(f"debias.stratify_by needs strata {missing}; the batch has {sorted(columns)}")
    cols = [columns[k] for k in by]
    return [tuple(col[i] for col in cols) for i in range(len(cols[0]))]

