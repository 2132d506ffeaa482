"""A tiny stand-in for a wmrl.tasks Task (iris), so sandbox tests need no task suite."""
from __future__ import annotations

import numpy as np

from wmrl.outcome import Outcome, RawResult, Status, ladder_reward


class IrisTask:
    """Iris classification, accuracy metric; judge validates shape/finiteness like a real task."""

    metric = "accuracy"
    interface, method = "estimator", "predict"

    def __init__(self, name: str = "iris", time_limit_s: float = 3.0):
        from sklearn.datasets import load_iris

        X, y = load_iris(return_X_y=True)
        rng = np.random.default_rng(0)
        idx = rng.permutation(len(y))
        self._X, self._y = X[idx], y[idx]
        self.name = name
        self.time_limit_s = time_limit_s
        self.inputs_calls = 0

    def inputs(self, split: str):
        self.inputs_calls += 1
        return self._X[:100], self._y[:100], self._X[100:]

    def fingerprint(self) -> str:
        return "iris-v1"

    def judge(self, raw: RawResult, split: str) -> Outcome:
        status, value, pos = raw.status, None, None
        if status is Status.VALID:
            pred = np.asarray(raw.predictions)
            hidden = self._y[100:]
            if pred.shape != hidden.shape or not np.all(np.isfinite(pred)):
                status = Status.NO_VALID_OUTPUT
            else:
                value = float(np.mean(pred == hidden))
                pos = value
        reward = ladder_reward(status, pos)
        return Outcome(task=self.name, status=status, metric=self.metric, value=value, pos=pos, reward=reward,
                       split=split)


class SyntheticTask:
    """A classification task made on the fly, `n` rows of `d` features; inputs differ per seed."""

    metric = "accuracy"
    interface, method = "estimator", "predict"

    def __init__(self, name: str, n: int = 2000, d: int = 20, seed: int = 0, time_limit_s: float = 10.0,
                 fill: float | None = None):
        from sklearn.datasets import make_classification

        X, y = make_classification(n_samples=n, n_features=d, n_informative=d // 2, random_state=seed)
        if fill is not None:  # a recognisable byte pattern, to look for in another execution's memory
            X[:] = fill
        cut = int(0.8 * n)
        self._train, self._eval, self._y_eval = (X[:cut], y[:cut]), X[cut:], y[cut:]
        self.name, self.time_limit_s, self.seed = name, time_limit_s, seed

    def inputs(self, split: str):
        return self._train[0], self._train[1], self._eval

    def fingerprint(self) -> str:
        return f"{self.name}-{self.seed}"

    def judge(self, raw: RawResult, split: str) -> Outcome:
        status, value = raw.status, None
        if status is Status.VALID:
            pred = np.asarray(raw.predictions)
            if pred.shape != self._y_eval.shape or not np.all(np.isfinite(pred)):
                status = Status.NO_VALID_OUTPUT
            else:
                value = float(np.mean(pred == self._y_eval))
        return Outcome(task=self.name, status=status, metric=self.metric, value=value, pos=value,
                       reward=ladder_reward(status, value), split=split, fit_s=raw.fit_s, predict_s=raw.predict_s)
