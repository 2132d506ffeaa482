"""A tiny stand-in for a wmrl.tasks Task (iris), so sandbox tests need no task suite."""
from __future__ import annotations

import numpy as np

from wmrl.outcome import Outcome, RawResult, Status, ladder_reward


class IrisTask:
    """Iris classification, accuracy metric; judge validates shape/finiteness like a real task."""

    metric = "accuracy"

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
