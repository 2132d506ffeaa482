"""Reference programs that define each task's leaderboard, from a constant guess to strong models.

They use the agents' own `build()` interface, so a reference and an agent program are
scored the same way and a leaderboard position means "beats this share of the references".
"""
from __future__ import annotations

import hashlib
from typing import Dict, Optional, Sequence


def _program(imports: str, expr: str) -> str:
    return f"{imports}\n\n\ndef build():\n    return {expr}\n"


_SCALE = "from sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler\n"

REFERENCES: Dict[str, Dict[str, str]] = {
    "classification": {
        "dummy": _program("from sklearn.dummy import DummyClassifier", "DummyClassifier(strategy='prior')"),
        "naive_bayes": _program("from sklearn.naive_bayes import GaussianNB", "GaussianNB()"),
        "logreg": _program(_SCALE + "from sklearn.linear_model import LogisticRegression",
                           "make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))"),
        "knn": _program(_SCALE + "from sklearn.neighbors import KNeighborsClassifier",
                        "make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors=15))"),
        "stump": _program("from sklearn.tree import DecisionTreeClassifier",
                          "DecisionTreeClassifier(max_depth=1, random_state=0)"),
        "tree": _program("from sklearn.tree import DecisionTreeClassifier",
                         "DecisionTreeClassifier(max_depth=6, random_state=0)"),
        "forest": _program("from sklearn.ensemble import RandomForestClassifier",
                           "RandomForestClassifier(n_estimators=100, n_jobs=1, random_state=0)"),
        "boosting": _program("from sklearn.ensemble import HistGradientBoostingClassifier",
                             "HistGradientBoostingClassifier(random_state=0)"),
        "svm": _program(_SCALE + "from sklearn.svm import SVC", "make_pipeline(StandardScaler(), SVC())"),
        "mlp": _program(_SCALE + "from sklearn.neural_network import MLPClassifier",
                        "make_pipeline(StandardScaler(), MLPClassifier(hidden_layer_sizes=(64,), max_iter=300, early_stopping=True, random_state=0))"),
    },
    "regression": {
        "dummy": _program("from sklearn.dummy import DummyRegressor", "DummyRegressor()"),
        "linear": _program("from sklearn.linear_model import LinearRegression", "LinearRegression()"),
        "lasso": _program(_SCALE + "from sklearn.linear_model import Lasso",
                          "make_pipeline(StandardScaler(), Lasso(alpha=1.0))"),
        "knn": _program(_SCALE + "from sklearn.neighbors import KNeighborsRegressor",
                        "make_pipeline(StandardScaler(), KNeighborsRegressor(n_neighbors=15))"),
        "stump": _program("from sklearn.tree import DecisionTreeRegressor",
                          "DecisionTreeRegressor(max_depth=1, random_state=0)"),
        "tree": _program("from sklearn.tree import DecisionTreeRegressor",
                         "DecisionTreeRegressor(max_depth=6, random_state=0)"),
        "forest": _program("from sklearn.ensemble import RandomForestRegressor",
                           "RandomForestRegressor(n_estimators=100, n_jobs=1, random_state=0)"),
        "boosting": _program("from sklearn.ensemble import HistGradientBoostingRegressor",
                             "HistGradientBoostingRegressor(random_state=0)"),
        "svm": _program(_SCALE + "from sklearn.svm import SVR", "make_pipeline(StandardScaler(), SVR())"),
        "mlp": _program(_SCALE + "from sklearn.neural_network import MLPRegressor",
                        "make_pipeline(StandardScaler(), MLPRegressor(hidden_layer_sizes=(64,), max_iter=300, early_stopping=True, random_state=0))"),
    },
}


def references_for(kind: str, names: Optional[Sequence[str]] = None) -> Dict[str, str]:
    """The reference programs (name -> source) of a task of this kind, optionally a subset."""
    table = REFERENCES[kind]
    return dict(table) if names is None else {n: table[n] for n in names}


def reference_set_hash(programs: Dict[str, str]) -> str:
    """Changes whenever a reference program changes, so stale leaderboards are never reused."""
    return hashlib.sha256(repr(sorted(programs.items())).encode()).hexdigest()[:16]
