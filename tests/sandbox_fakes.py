"""A tiny stand-in for a wmrl.domains.research.tasks Task (iris), so sandbox tests need no task suite."""
from __future__ import annotations

import numpy as np

from wmrl.domains.research.outcome import Outcome, RawResult, Status, ladder_reward


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


IRIS_SCRIPT_MAIN = """
import pandas as _pd
_train, _test = _pd.read_csv("input/train.csv"), _pd.read_csv("input/test.csv")
_model = build()
_model.fit(_train.drop(columns=["id", "species"]).to_numpy(), _train["species"].to_numpy())
_pred = _model.predict(_test.drop(columns=["id"]).to_numpy())
_pd.DataFrame({"id": _test["id"], "species": _pred}).to_csv("submission/submission.csv", index=False)
"""


def iris_script_task(root, time_limit_s: float = 3.0):
    """Iris as a real script task (folder with public files and private answers under `root`): a
    program that defines build() followed by IRIS_SCRIPT_MAIN runs as the estimator harness would."""
    import pandas as pd
    from sklearn.datasets import load_iris

    from wmrl.domains.research.tasks.generated import write_folder
    from wmrl.domains.research.tasks.script import ScriptTask
    from wmrl.domains.research.tasks.spec import TaskSpec

    X, y = load_iris(return_X_y=True)
    df = pd.DataFrame(X, columns=["sepal_length", "sepal_width", "petal_length", "petal_width"])
    df.insert(0, "id", range(len(df)))
    df["species"] = y
    idx = np.random.default_rng(0).permutation(len(df))
    train, test = df.iloc[idx[:100]], df.iloc[idx[100:]]
    folder = root / "iris_script"
    if not folder.exists():
        write_folder(folder, train, test.drop(columns=["species"]), test[["id", "species"]],
                     test[["id"]].assign(species=0), "Classify iris species.", {"name": "iris_script"})
    spec = TaskSpec("iris_script", str(folder), "classification", "accuracy", time_limit_s, interface="script",
                    target="species", id_column="id")
    return ScriptTask(spec, "s" * 64, root / "cache")
