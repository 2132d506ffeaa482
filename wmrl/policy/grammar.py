"""A grammar over scikit-learn programs: the warm-start corpus and a map of the action space.

Each sample is a program in the task interface (`build()` returns an estimator) drawn from
estimator families and their hyperparameters. A share of samples is deliberately broken in
the ways real agents break programs (syntax, missing `build`, wrong estimator kind, bad
hyperparameters), so that the warm-started policy starts with the failure modes RL must fix.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

# family -> (module, classifier, regressor, {hyperparameter: choices})
FAMILIES: dict[str, tuple[str, str, str, dict[str, list]]] = {
    "dummy": ("sklearn.dummy", "DummyClassifier", "DummyRegressor", {}),
    "linear": ("sklearn.linear_model", "LogisticRegression", "Ridge", {"C|alpha": [0.01, 0.1, 1.0, 10.0]}),
    "knn": ("sklearn.neighbors", "KNeighborsClassifier", "KNeighborsRegressor",
            {"n_neighbors": [1, 3, 5, 15, 50], "weights": ["'uniform'", "'distance'"]}),
    "tree": ("sklearn.tree", "DecisionTreeClassifier", "DecisionTreeRegressor", {"max_depth": [2, 4, 8, None]}),
    "forest": ("sklearn.ensemble", "RandomForestClassifier", "RandomForestRegressor",
               {"n_estimators": [10, 50, 100, 200], "max_depth": [4, 8, 16, None]}),
    "extra_trees": ("sklearn.ensemble", "ExtraTreesClassifier", "ExtraTreesRegressor",
                    {"n_estimators": [10, 50, 100, 200], "max_depth": [4, 8, 16, None]}),
    "boosting": ("sklearn.ensemble", "HistGradientBoostingClassifier", "HistGradientBoostingRegressor",
                 {"max_iter": [20, 50, 100, 200], "learning_rate": [0.03, 0.1, 0.3]}),
    "svm": ("sklearn.svm", "SVC", "SVR", {"C": [0.1, 1.0, 10.0], "kernel": ["'rbf'", "'linear'"]}),
    "naive_bayes": ("sklearn.naive_bayes", "GaussianNB", "BayesianRidge", {}),
    "neural_net": ("sklearn.neural_network", "MLPClassifier", "MLPRegressor",
                   {"hidden_layer_sizes": ["(32,)", "(64,)", "(64, 64)"], "max_iter": [200, 500]}),
}

BROKEN_KINDS = ("syntax", "no_build", "wrong_kind", "bad_param", "returns_none")


@dataclass
class Sample:
    source: str
    family: str
    broken: str | None  # which way the program was broken, None when it should run


def _render(family: str, kind: str, rng: random.Random, scale: bool) -> tuple[str, str]:
    module, clf, reg, space = FAMILIES[family]
    est = clf if kind == "classification" else reg
    args = []
    for name, choices in space.items():
        if "|" in name:
            name = name.split("|")[0 if kind == "classification" else 1]
        if rng.random() < 0.75:
            value = rng.choice(choices)
            args.append(f"{name}={value}")
    call = f"{est}({', '.join(args)})"
    lines = [f"from {module} import {est}"]
    if scale:
        lines = ["from sklearn.pipeline import make_pipeline", "from sklearn.preprocessing import StandardScaler", *lines]
        call = f"make_pipeline(StandardScaler(), {call})"
    return "\n".join(lines) + f"\n\n\ndef build():\n    return {call}\n", est


def sample_program(kind: str, rng: random.Random, broken_rate: float = 0.0) -> Sample:
    """One program for a task of `kind` ("classification" | "regression")."""
    family = rng.choice(list(FAMILIES))
    scale = family in ("linear", "knn", "svm", "neural_net") and rng.random() < 0.6
    broken = rng.choice(BROKEN_KINDS) if rng.random() < broken_rate else None
    if broken == "wrong_kind":
        kind = "regression" if kind == "classification" else "classification"
    src, est = _render(family, kind, rng, scale)
    if broken == "syntax":
        src = src.replace("return ", "return (", 1) if rng.random() < 0.5 else src.replace("def build():", "def build()")
    elif broken == "no_build":
        src = src.replace("def build():", "def make_model():")
    elif broken == "bad_param":
        src = src.replace(f"{est}(", f"{est}(n_jobs_total=2, ", 1).replace(", )", ")")
    elif broken == "returns_none":
        src = src.replace("    return ", "    model = ", 1) + "    model.fit\n"
    return Sample(src, family, broken)
