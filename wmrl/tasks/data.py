"""Turning a task spec into arrays: load or generate (X, y), then split it with secret seeds."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Tuple

import numpy as np

from wmrl.tasks.secret import random_state_for, rng_for
from wmrl.tasks.spec import TaskError, TaskSpec

BUNDLED = ("iris", "wine", "breast_cancer", "digits", "diabetes")
GENERATORS = ("make_classification", "make_regression", "make_friedman1", "make_friedman2",
              "make_friedman3", "make_hastie_10_2", "make_moons", "make_circles", "make_blobs")


@dataclass(frozen=True)
class Splits:
    """A task's data: float64 features, int64 class labels (0..k-1) or float64 targets."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


def build_splits(spec: TaskSpec, secret: str) -> Splits:
    X, y = load_xy(spec, secret)
    if spec.kind == "classification":
        y = np.unique(y, return_inverse=True)[1].reshape(-1).astype(np.int64)
    else:
        y = y.astype(np.float64)
    train, val, test = split_indices(y, spec, secret)
    return Splits(X[train], y[train], X[val], y[val], X[test], y[test])


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
    if not path.exists():
        raise TaskError(f"task {spec.name!r}: data file {str(path)!r} does not exist")
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ("X", "y") if k not in z.files]
            if missing:
                raise TaskError(f"task {spec.name!r}: {path} lacks array(s) {missing}; has {z.files}")
            X, y = z["X"], z["y"]
    else:
        X, y = _read_csv(path, spec)
    if X.ndim != 2 or len(X) != len(y):
        raise TaskError(f"task {spec.name!r}: X must be 2-D with one row per target; got {X.shape} and {len(y)}")
    if not np.issubdtype(X.dtype, np.number) or not np.all(np.isfinite(X.astype(np.float64))):
        raise TaskError(f"task {spec.name!r}: features must be numeric and finite (no missing values)")
    return X, y


def _read_csv(path: Path, spec: TaskSpec) -> Tuple[np.ndarray, np.ndarray]:
    import csv

    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], [r for r in rows[1:] if r]
    if spec.target not in header:
        raise TaskError(f"task {spec.name!r}: field 'target': column {spec.target!r} not in {path.name} (columns: {', '.join(header)})")
    t = header.index(spec.target)
    features = [i for i in range(len(header)) if i != t]
    X = np.empty((len(body), len(features)))
    for j, i in enumerate(features):
        try:
            X[:, j] = [float(r[i]) for r in body]
        except ValueError:
            raise TaskError(f"task {spec.name!r}: column {header[i]!r} of {path.name} is not numeric") from None
    y = np.array([r[t] for r in body])
    if spec.kind == "regression":
        try:
            y = y.astype(np.float64)
        except ValueError:
            raise TaskError(f"task {spec.name!r}: target {spec.target!r} is not numeric (kind is regression)") from None
    return X, y


def split_indices(y: np.ndarray, spec: TaskSpec, secret: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Secret train/val/test row indices; stratified for classification.

    Each row gets a key uniform in [0, 1); for classification the key is (rank within its
    class + jitter) / class size, so every contiguous cut of the sorted keys holds each
    class in proportion. Each part is then shuffled, so row order says nothing about labels
    (bundled datasets are sorted by class).
    """
    n = len(y)
    n_val, n_test = _count(spec.val, n), _count(spec.test, n)
    if n - n_val - n_test < 2 or n_val < 1 or n_test < 1:
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


def digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]
