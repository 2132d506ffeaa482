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


# Tables (CSV/Parquet tasks) hold text, categories and empty cells: each reference gets the
# preprocessing its model family needs, so a leaderboard spans skill, not data handling.
_PRE = """from sklearn.compose import make_column_selector, make_column_transformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder, StandardScaler


def preprocess(encoding, scale):
    numeric = make_pipeline(SimpleImputer(strategy='median'), StandardScaler()) if scale else SimpleImputer(strategy='median')
    if encoding == 'onehot':
        categorical = make_pipeline(SimpleImputer(strategy='most_frequent'),
                                    OneHotEncoder(handle_unknown='ignore', min_frequency=5, sparse_output=False))
    else:
        categorical = OrdinalEncoder(handle_unknown='use_encoded_value', unknown_value=-1, encoded_missing_value=-1)
    return make_column_transformer((numeric, make_column_selector(dtype_include='number')),
                                   (categorical, make_column_selector(dtype_exclude='number')))
"""
# name -> (module, classifier, regressor, constructor arguments, encoding, scale)
_TABLE_MODELS = {
    "dummy": ("sklearn.dummy", "DummyClassifier", "DummyRegressor", "", "ordinal", False),
    "naive_bayes": ("sklearn.naive_bayes", "GaussianNB", None, "", "onehot", True),
    "logreg": ("sklearn.linear_model", "LogisticRegression", None, "max_iter=1000", "onehot", True),
    "linear": ("sklearn.linear_model", None, "LinearRegression", "", "onehot", False),
    "lasso": ("sklearn.linear_model", None, "Lasso", "alpha=1.0", "onehot", True),
    "knn": ("sklearn.neighbors", "KNeighborsClassifier", "KNeighborsRegressor", "n_neighbors=15", "onehot", True),
    "stump": ("sklearn.tree", "DecisionTreeClassifier", "DecisionTreeRegressor", "max_depth=1, random_state=0", "ordinal", False),
    "tree": ("sklearn.tree", "DecisionTreeClassifier", "DecisionTreeRegressor", "max_depth=6, random_state=0", "ordinal", False),
    "forest": ("sklearn.ensemble", "RandomForestClassifier", "RandomForestRegressor",
               "n_estimators=100, n_jobs=1, random_state=0", "ordinal", False),
    "boosting": ("sklearn.ensemble", "HistGradientBoostingClassifier", "HistGradientBoostingRegressor",
                 "random_state=0", "ordinal", False),
    "svm": ("sklearn.svm", "SVC", "SVR", "", "onehot", True),
    "mlp": ("sklearn.neural_network", "MLPClassifier", "MLPRegressor",
            "hidden_layer_sizes=(64,), max_iter=300, early_stopping=True, random_state=0", "onehot", True),
}


def _table_program(name: str, kind: str) -> str:
    module, clf, reg, args, encoding, scale = _TABLE_MODELS[name]
    est = clf if kind == "classification" else reg
    return (f"from {module} import {est}\n{_PRE}\n\ndef build():\n"
            f"    return make_pipeline(preprocess({encoding!r}, {scale}), {est}({args}))\n")


TABLE_REFERENCES: Dict[str, Dict[str, str]] = {
    kind: {name: _table_program(name, kind) for name in REFERENCES[kind]} for kind in REFERENCES}
NO_PROBA = ("svm",)  # no predict_proba without an expensive internal cross-validation


def references_for(kind: str, names: Optional[Sequence[str]] = None, table: bool = False,
                   proba: bool = False) -> Dict[str, str]:
    """The reference programs (name -> source) of a task of this kind, optionally a subset;
    with preprocessing for tables, and only those offering predict_proba for probability metrics."""
    programs = (TABLE_REFERENCES if table else REFERENCES)[kind]
    names = list(programs) if names is None else list(names)
    return {n: programs[n] for n in names if not (proba and n in NO_PROBA)}


def reference_set_hash(programs: Dict[str, str]) -> str:
    """Changes whenever a reference program changes, so stale leaderboards are never reused."""
    return hashlib.sha256(repr(sorted(programs.items())).encode()).hexdigest()[:16]
