"""Turning a task spec into data: load or generate (X, y), then split it with secret seeds.

Arrays for bundled and synthetic data; a DataFrame of real columns for CSV and Parquet files.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Tuple

import numpy as np

from wmrl.domains.research.tasks import tabular
from wmrl.domains.research.tasks.secret import random_state_for, rng_for
from wmrl.domains.research.tasks.spec import TaskError, TaskSpec

BUNDLED = ("iris", "wine", "breast_cancer", "digits", "diabetes")
GENERATED_TABLE = "generated-table:"  # a table we generate (`wmrl.domains.research.tasks.generated`), read as a user's CSV would be
GENERATORS = ("make_classification", "make_regression", "make_friedman1", "make_friedman2",
              "make_friedman3", "make_hastie_10_2", "make_moons", "make_circles", "make_blobs")


@dataclass(frozen=True)
class Splits:
    """A task's data: features (float64 arrays, or DataFrames for tables), int64 class codes
    (0..k-1, `classes` holds the original labels) or float64 targets."""

    X_train: Any
    y_train: np.ndarray
    X_val: Any
    y_val: np.ndarray
    X_test: Any
    y_test: np.ndarray
    classes: Optional[List] = None


def build_splits(spec: TaskSpec, secret: str, max_mb: float = tabular.DEFAULT_MAX_MB) -> Splits:
    if tabular.is_table(spec.data):
        return _table_splits(spec, secret, max_mb)
    if spec.data.startswith(GENERATED_TABLE):
        from wmrl.domains.research.tasks.generated import table

        X, y = tabular.features_and_target(table(spec.data[len(GENERATED_TABLE):], secret), spec.name,
                                           f"task {spec.name!r}", spec.target, spec.kind, spec.id_column)
        return _frame_splits(spec, secret, X, y)
    X, y = load_xy(spec, secret)
    if spec.kind == "classification":
        y = np.unique(y, return_inverse=True)[1].reshape(-1).astype(np.int64)
    else:
        y = y.astype(np.float64)
    train, val, test = split_indices(y, spec, secret)
    return Splits(X[train], y[train], X[val], y[val], X[test], y[test])


def _table_splits(spec: TaskSpec, secret: str, max_mb: float) -> Splits:
    """Splits of a CSV/Parquet task: val (and test, unless `test_data` is a second file) cut from the
    rows with the secret seed, stratified for classification; features stay a DataFrame."""
    where = f"task {spec.name!r}"
    path = Path(spec.data)
    X, y = tabular.features_and_target(tabular.read_table(path, where, max_mb), path.name, where, spec.target,
                                       spec.kind, spec.id_column)
    if spec.test_data:
        tpath = Path(spec.test_data)
        X_test, y_test = tabular.features_and_target(tabular.read_table(tpath, where, max_mb), tpath.name, where,
                                                     spec.target, spec.kind, spec.id_column)
        if list(X_test.columns) != list(X.columns):
            raise TaskError(f"{where}: {tpath.name} has columns {list(X_test.columns)}, {path.name} has {list(X.columns)}")
        return _frame_splits(spec, secret, X, y, X_test, y_test)
    return _frame_splits(spec, secret, X, y)


def _frame_splits(spec: TaskSpec, secret: str, X, y, X_test=None, y_test=None) -> Splits:
    """Splits of a table's features `X` and raw target `y`, the test rows cut from them unless given."""
    where = f"task {spec.name!r}"
    if X_test is not None:
        train, val, _ = split_indices(y, spec, secret, with_test=False)
    else:
        train, val, test = split_indices(y, spec, secret)
        X_test, y_test = X.iloc[test], y[test]
    part = lambda df, rows: df.iloc[rows].reset_index(drop=True)  # noqa: E731
    X_train, X_val, X_test = part(X, train), part(X, val), X_test.reset_index(drop=True)
    y_train, y_val = y[train], y[val]
    classes = None
    if spec.kind == "classification":
        labels, classes = tabular.class_codes(y_train, y_val, y_test, where=where, column=spec.target)
        y_train, y_val, y_test = (np.searchsorted(labels, v).astype(np.int64) for v in (y_train, y_val, y_test))
    else:
        y_train, y_val, y_test = (np.asarray(v, dtype=np.float64) for v in (y_train, y_val, y_test))
    return Splits(X_train, y_train, X_val, y_val, X_test, y_test, classes)


def load_xy(spec: TaskSpec, secret: str) -> Tuple[np.ndarray, np.ndarray]:
    source, _, arg = spec.data.partition(":")
    if source == "bundled":
        X, y = _bundled(arg)
        X, y = disguise(X, y, secret, spec.name, spec.kind)
    elif source == "synthetic":
        import sklearn.datasets

        X, y = getattr(sklearn.datasets, arg)(**dict(spec.params), random_state=random_state_for(secret, spec.name, "data"))
    else:
        X, y = _read_file(Path(spec.data), spec)
    return np.ascontiguousarray(X, dtype=np.float64), np.asarray(y)


def _bundled(name: str) -> Tuple[np.ndarray, np.ndarray]:
    import sklearn.datasets

    return getattr(sklearn.datasets, f"load_{name}")(return_X_y=True)


FEATURE_NOISE = 0.2  # noise added to each standardized feature before mixing, in standard deviations
TARGET_NOISE = 0.1  # noise added to regression targets, in standard deviations of the target


def disguise(X: np.ndarray, y: np.ndarray, secret: str, task: str, kind: str) -> Tuple[np.ndarray, np.ndarray]:
    """Public data made unrecognisable to anyone holding the public copy, the learning problem kept.

    A program may hold a copy of the public dataset (a file the sandbox failed to hide, or rows an
    LLM memorised), so nothing it sees may map back to public rows exactly: standardized features
    plus noise, mixed by a secret full-rank linear map (a rotation, per-axis
    scales in [1/2, 2], another rotation) and shifted, so no column is a public column; regression
    targets carry noise too, so they cannot be matched by value. The noise is what makes it
    non-invertible: even someone who recovered the map only gets a noisy nearest-neighbour lookup.
    """
    rng = rng_for(secret, task, "disguise")  # every row kept: the splits cover the dataset
    X = np.asarray(X, dtype=np.float64)
    d = X.shape[1]
    std = X.std(axis=0)
    Z = (X - X.mean(axis=0)) / np.where(std > 0, std, 1.0)
    Z = Z + FEATURE_NOISE * rng.standard_normal(Z.shape)
    mix = _rotation(rng, d) @ np.diag(np.exp(rng.uniform(np.log(0.5), np.log(2.0), d))) @ _rotation(rng, d)
    X = Z @ mix + rng.normal(size=d)
    if kind == "regression":
        y = y.astype(np.float64)
        y = y + TARGET_NOISE * y.std() * rng.standard_normal(len(y))
    return X, y


def _rotation(rng: np.random.Generator, d: int) -> np.ndarray:
    """A uniformly random orthogonal matrix (QR of a Gaussian matrix, signs fixed)."""
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def _read_file(path: Path, spec: TaskSpec) -> Tuple[np.ndarray, np.ndarray]:
    """An NPZ file with arrays X and y (tables go through `_table_splits`)."""
    if not path.exists():
        raise TaskError(f"task {spec.name!r}: data file {str(path)!r} does not exist")
    with np.load(path, allow_pickle=False) as z:
        missing = [k for k in ("X", "y") if k not in z.files]
        if missing:
            raise TaskError(f"task {spec.name!r}: {path} lacks array(s) {missing}; has {z.files}")
        X, y = z["X"], z["y"]
    if X.ndim != 2 or len(X) != len(y):
        raise TaskError(f"task {spec.name!r}: X must be 2-D with one row per target; got {X.shape} and {len(y)}")
    if not np.issubdtype(X.dtype, np.number) or not np.all(np.isfinite(X.astype(np.float64))):
        raise TaskError(f"task {spec.name!r}: NPZ features must be numeric and finite (use a CSV for missing values)")
    return X, y


def split_indices(y: np.ndarray, spec: TaskSpec, secret: str,
                  with_test: bool = True) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Secret train/val/test row indices; stratified for classification.

    Each row gets a key uniform in [0, 1); for classification the key is (rank within its
    class + jitter) / class size, so every contiguous cut of the sorted keys holds each
    class in proportion. Each part is then shuffled, so row order says nothing about labels
    (bundled datasets are sorted by class).
    """
    n = len(y)
    n_val, n_test = _count(spec.val, n), (_count(spec.test, n) if with_test else 0)
    if n - n_val - n_test < 2 or n_val < 1 or (with_test and n_test < 1):
        raise TaskError(f"task {spec.name!r}: split val={spec.val} test={spec.test} leaves no room in {n} rows")
    rng = rng_for(secret, spec.name, "split")
    key = rng.random(n)
    if spec.kind == "classification":
        for c in np.unique(y):
            rows = np.flatnonzero(y == c)
            key[rows] = (rng.permutation(len(rows)) + rng.random(len(rows))) / len(rows)
    order = np.argsort(key, kind="stable")
    test, val, train = order[:n_test], order[n_test:n_test + n_val], order[n_test + n_val:]
    return rng.permutation(train), rng.permutation(val), rng.permutation(test)


def _count(size: float, n: int) -> int:
    return int(round(size * n)) if size < 1 else int(size)


def digest(*arrays: Any) -> str:
    h = hashlib.sha256()
    for a in arrays:
        if isinstance(a, np.ndarray):
            h.update(f"{a.dtype}{a.shape}".encode())
            h.update(np.ascontiguousarray(a).tobytes())
        else:  # a DataFrame of a table task
            tabular.frame_digest(h, a)
    return h.hexdigest()[:16]
