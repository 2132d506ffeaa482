"""Task metrics, all "higher is better", on numpy arrays (no scikit-learn import needed).

The host scores agent predictions and reference programs with these same functions, so a
leaderboard position compares like with like.
"""
from __future__ import annotations

from typing import Callable, Dict

import numpy as np


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.mean(y_true == y_pred))


def balanced_accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean recall over the classes present in `y_true`: a constant guess scores 1/classes."""
    return float(np.mean([np.mean(y_pred[y_true == c] == c) for c in np.unique(y_true)]))


def f1_macro(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    scores = []
    for c in np.union1d(y_true, y_pred):
        tp = np.sum((y_pred == c) & (y_true == c))
        denom = np.sum(y_pred == c) + np.sum(y_true == c)
        scores.append(2.0 * tp / denom if denom else 0.0)
    return float(np.mean(scores))


def r2(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Coefficient of determination; 0 for predicting the mean, negative for worse."""
    ss_tot = float(np.sum((y_true - y_true.mean()) ** 2))
    ss_res = float(np.sum((y_true - y_pred) ** 2))
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)


def neg_rmse(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return -float(np.sqrt(np.mean((y_true - y_pred) ** 2)))


def neg_mae(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return -float(np.mean(np.abs(y_true - y_pred)))


METRICS: Dict[str, Dict[str, Callable[[np.ndarray, np.ndarray], float]]] = {
    "classification": {"accuracy": accuracy, "balanced_accuracy": balanced_accuracy, "f1_macro": f1_macro},
    "regression": {"r2": r2, "neg_rmse": neg_rmse, "neg_mae": neg_mae},
}
DEFAULT_METRIC = {"classification": "accuracy", "regression": "r2"}
