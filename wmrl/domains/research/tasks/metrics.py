"""Task metrics, all "higher is better", named as scikit-learn's scorers are.

The host scores agent predictions and reference programs with these same functions, so a
leaderboard position compares like with like. A few are numpy-only (the built-in suite needs
no scikit-learn import to judge); the rest call `sklearn.metrics` lazily. Probability metrics
score `predict_proba` output (n rows x classes, columns in class-code order).
"""
from __future__ import annotations

from dataclasses import dataclass
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


def _sk(name: str, sign: float = 1.0, **kw) -> Callable[[np.ndarray, np.ndarray], float]:
    def score(y_true: np.ndarray, y_pred: np.ndarray) -> float:
        import sklearn.metrics

        return sign * float(getattr(sklearn.metrics, name)(y_true, y_pred, **kw))

    score.__name__ = name
    return score


def _roc_auc(y_true: np.ndarray, proba: np.ndarray) -> float:
    """Binary: AUC of the positive class's probability; multiclass: one-vs-rest macro AUC."""
    import sklearn.metrics

    k = proba.shape[1]
    if k == 2:
        return float(sklearn.metrics.roc_auc_score(y_true, proba[:, 1]))
    return float(sklearn.metrics.roc_auc_score(y_true, _renormalised(proba), multi_class="ovr", labels=np.arange(k)))


def _neg_log_loss(y_true: np.ndarray, proba: np.ndarray) -> float:
    import sklearn.metrics

    return -float(sklearn.metrics.log_loss(y_true, _renormalised(proba), labels=np.arange(proba.shape[1])))


def _renormalised(proba: np.ndarray) -> np.ndarray:
    """Rows summing to 1 (submissions are rounded; scikit-learn refuses rows that do not sum to 1)."""
    p = np.clip(proba, 0.0, None)
    s = p.sum(axis=1, keepdims=True)
    return np.where(s > 0, p / np.where(s > 0, s, 1.0), 1.0 / p.shape[1])


@dataclass(frozen=True)
class Metric:
    fn: Callable[[np.ndarray, np.ndarray], float]
    proba: bool = False  # scores predict_proba output instead of predict


_LABEL_CLF = {
    "accuracy": Metric(accuracy), "balanced_accuracy": Metric(balanced_accuracy), "f1_macro": Metric(f1_macro),
    "f1_weighted": Metric(_sk("f1_score", average="weighted")), "matthews_corrcoef": Metric(_sk("matthews_corrcoef")),
    "cohen_kappa": Metric(_sk("cohen_kappa_score")),
}
_PROBA_CLF = {"roc_auc": Metric(_roc_auc, proba=True), "roc_auc_ovr": Metric(_roc_auc, proba=True),
              "neg_log_loss": Metric(_neg_log_loss, proba=True)}
_REG = {
    "r2": Metric(r2), "neg_rmse": Metric(neg_rmse), "neg_mae": Metric(neg_mae),
    "neg_root_mean_squared_error": Metric(neg_rmse), "neg_mean_absolute_error": Metric(neg_mae),
    "neg_mean_squared_error": Metric(_sk("mean_squared_error", -1.0)),
    "neg_median_absolute_error": Metric(_sk("median_absolute_error", -1.0)),
    "neg_mean_absolute_percentage_error": Metric(_sk("mean_absolute_percentage_error", -1.0)),
    "explained_variance": Metric(_sk("explained_variance_score")),
}
SCORERS: Dict[str, Dict[str, Metric]] = {"classification": {**_LABEL_CLF, **_PROBA_CLF}, "regression": _REG}
# name -> function, for callers that only score labels or values
METRICS: Dict[str, Dict[str, Callable[[np.ndarray, np.ndarray], float]]] = {
    kind: {name: m.fn for name, m in table.items()} for kind, table in SCORERS.items()}
ALIASES = {"log_loss": "neg_log_loss", "rmse": "neg_rmse", "mae": "neg_mae"}  # error names users write
DEFAULT_METRIC = {"classification": "accuracy", "regression": "r2"}


def needs_proba(kind: str, metric: str) -> bool:
    return SCORERS[kind][metric].proba
