"""Synthetic executions with a known rule, for world-model tests.

Rule: a classifier on a regression task (or a regressor on a classification task) raises
(runtime_error); `raise` in build -> runtime_error; forests score high, boosting high, linear
models middle, neighbours lower, dummy baselines near 0; more trees help a little.
"""
from __future__ import annotations

import random

from wmrl.domains.research.outcome import Outcome, Status, ladder_reward
from wmrl.domains.research.world_model.base import WMQuery

TASKS = {
    "wine": "task=wine kind=classification n=124 d=13 classes=3 metric=accuracy",
    "iris": "task=iris kind=classification n=105 d=4 classes=3 metric=accuracy",
    "diabetes": "task=diabetes kind=regression n=309 d=10 metric=r2",
    "housing": "task=housing kind=regression n=1000 d=8 metric=r2",
}
KIND = {"wine": "classification", "iris": "classification", "diabetes": "regression", "housing": "regression"}
FAMILIES = {  # family -> (module, classifier, regressor, base pos)
    "forest": ("sklearn.ensemble", "RandomForestClassifier", "RandomForestRegressor", 0.85),
    "boost": ("sklearn.ensemble", "GradientBoostingClassifier", "GradientBoostingRegressor", 0.75),
    "linear": ("sklearn.linear_model", "LogisticRegression", "Ridge", 0.5),
    "knn": ("sklearn.neighbors", "KNeighborsClassifier", "KNeighborsRegressor", 0.35),
    "dummy": ("sklearn.dummy", "DummyClassifier", "DummyRegressor", 0.03),
}


def program(family: str, want: str, rng: random.Random, broken: bool = False) -> tuple[str, float]:
    module, clf, reg, base = FAMILIES[family]
    name = clf if want == "classification" else reg
    kw, bonus = "", 0.0
    if family in ("forest", "boost"):
        n = rng.choice([10, 50, 100, 200, 300, 500])
        kw, bonus = f"n_estimators={n}, random_state={rng.randint(0, 99)}", 0.1 * (n >= 100) - 0.1
    elif family == "linear":
        kw = f"{'C' if want == 'classification' else 'alpha'}={rng.choice(['0.1', '1.0', '10.0'])}"
    elif family == "knn":
        kw = f"n_neighbors={rng.choice([3, 5, 7, 15])}"
    scale = rng.random() < 0.5
    imports = f"from {module} import {name}\n" + ("from sklearn.pipeline import make_pipeline\n"
                                                   "from sklearn.preprocessing import StandardScaler\n" if scale else "")
    body = f"make_pipeline(StandardScaler(), {name}({kw}))" if scale else f"{name}({kw})"
    extra = "    raise RuntimeError('todo')\n" if broken else ""
    return f"{imports}\n\ndef build():\n{extra}    return {body}\n", base + bonus


def make_examples(n: int, seed: int = 0) -> list[tuple[WMQuery, Outcome]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        task = rng.choice(list(TASKS))
        family = rng.choice(list(FAMILIES))
        mismatch = rng.random() < 0.15
        want = KIND[task] if not mismatch else ({"classification": "regression", "regression": "classification"}[KIND[task]])
        broken = rng.random() < 0.08
        src, pos = program(family, want, rng, broken)
        if mismatch or broken:
            status, pos, value = Status.RUNTIME_ERROR, None, None
        else:
            status = Status.VALID
            pos = min(1.0, max(0.0, pos + rng.gauss(0, 0.04)))
            value = 0.3 + 0.6 * pos
        metric = TASKS[task].split("metric=")[1]
        o = Outcome(task=task, status=status, metric=metric, value=value, pos=pos,
                    reward=ladder_reward(status, pos),
                    stderr_tail="ValueError: Unknown label type: continuous" if mismatch else "")
        out.append((WMQuery(task=task, descriptor=TASKS[task], program=src, metric=metric), o))
    return out
