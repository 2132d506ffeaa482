"""A grammar over scikit-learn programs: the warm-start corpus and a map of the action space.

Each sample is a program in the task's interface (`build()` returns an estimator, or a script
that reads ./input/ and writes ./submission/submission.csv) drawn from estimator families and
their hyperparameters; on tables (text, categories, empty cells) the estimator follows a
`ColumnTransformer` of imputers, encoders (one-hot or ordinal) and scalers. A share of samples is deliberately broken in
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
# Scripts break where a whole program does: no submission written, or one of the wrong shape.
SCRIPT_BROKEN_KINDS = ("syntax", "no_submission", "wrong_kind", "bad_param", "wrong_rows")
# Families whose models take any scale and missing values in stride get ordinal codes; the rest one-hot.
_ORDINAL = ("tree", "forest", "extra_trees", "boosting", "dummy")
_TABLE_IMPORTS = ["from sklearn.compose import make_column_selector, make_column_transformer",
                  "from sklearn.impute import SimpleImputer", "from sklearn.pipeline import make_pipeline"]


@dataclass
class Sample:
    source: str
    family: str
    broken: str | None  # which way the program was broken, None when it should run


def _preprocess(family: str, scale: bool) -> tuple[list[str], str]:
    """(imports, expression) of a ColumnTransformer: numbers imputed (and scaled), the rest encoded."""
    numeric = "make_pipeline(SimpleImputer(), StandardScaler())" if scale else "SimpleImputer()"
    if family in _ORDINAL:
        enc, imp = ("OrdinalEncoder(handle_unknown='use_encoded_value', unknown_value=-1, encoded_missing_value=-1)",
                    "OrdinalEncoder")
    else:
        enc, imp = "OneHotEncoder(handle_unknown='ignore')", "OneHotEncoder"
    names = ", ".join(sorted({imp, *(["StandardScaler"] if scale else [])}))
    expr = (f"make_column_transformer(({numeric}, make_column_selector(dtype_include='number')), "
            f"({enc}, make_column_selector(dtype_exclude='number')))")
    return [*_TABLE_IMPORTS, f"from sklearn.preprocessing import {names}"], expr


def _render(family: str, kind: str, rng: random.Random, scale: bool, table: bool = False) -> tuple[str, str]:
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
    if table:
        imports, pre = _preprocess(family, scale)
        return "\n".join([*imports, *lines]) + f"\n\n\ndef build():\n    return make_pipeline({pre}, {call})\n", est
    if scale:
        lines = ["from sklearn.pipeline import make_pipeline", "from sklearn.preprocessing import StandardScaler", *lines]
        call = f"make_pipeline(StandardScaler(), {call})"
    return "\n".join(lines) + f"\n\n\ndef build():\n    return {call}\n", est


def sample_for(task, rng: random.Random, broken_rate: float = 0.0) -> Sample:
    """One program in `task`'s interface and for its data (arrays, or a table needing preprocessing)."""
    if task.interface == "script":
        return sample_script(task.kind, rng, broken_rate, task.spec.id_column, task.spec.target,
                             proba=task.method == "predict_proba")
    return sample_program(task.kind, rng, broken_rate, table=has_own_programs(task))


def has_own_programs(task) -> bool:
    """Programs for this task differ from array programs (a script, or preprocessing for a table)."""
    from wmrl.domains.research.tasks.tabular import is_numeric_only

    return task.interface == "script" or not is_numeric_only(task.splits().X_train)


def sample_program(kind: str, rng: random.Random, broken_rate: float = 0.0, table: bool = False) -> Sample:
    """One program for a task of `kind` ("classification" | "regression"); `table`: for a DataFrame
    with text, categories or empty cells."""
    family = rng.choice(list(FAMILIES))
    scale = family in ("linear", "knn", "svm", "neural_net") and rng.random() < 0.6
    broken = rng.choice(BROKEN_KINDS) if rng.random() < broken_rate else None
    if broken == "wrong_kind":
        kind = "regression" if kind == "classification" else "classification"
    src, est = _render(family, kind, rng, scale, table)
    if broken == "syntax":
        src = src.replace("return ", "return (", 1) if rng.random() < 0.5 else src.replace("def build():", "def build()")
    elif broken == "no_build":
        src = src.replace("def build():", "def make_model():")
    elif broken == "bad_param":
        src = src.replace(f"{est}(", f"{est}(n_jobs_total=2, ", 1).replace(", )", ")")
    elif broken == "returns_none":
        src = src.replace("    return ", "    model = ", 1) + "    model.fit\n"
    return Sample(src, family, broken)


def sample_script(kind: str, rng: random.Random, broken_rate: float, id_column: str | None, target: str | None,
                  proba: bool = False) -> Sample:
    """A whole program for a script task: read ./input/, fit a pipeline, write the submission."""
    family = rng.choice(list(FAMILIES))
    scale = family in ("linear", "knn", "svm", "neural_net") and rng.random() < 0.6
    broken = rng.choice(SCRIPT_BROKEN_KINDS) if rng.random() < broken_rate else None
    if broken == "wrong_kind":
        kind = "regression" if kind == "classification" else "classification"
    model, est = _render(family, kind, rng, scale, table=True)
    id_col = repr(id_column) if id_column else "sub.columns[0]"
    y_col = repr(target) if target else "sub.columns[1]"
    predict = "model.predict_proba(test[X.columns])[:, 1]" if proba else "model.predict(test[X.columns])"
    body = (f"import pandas as pd\n{model}\n\n"
            f"train = pd.read_csv('input/train.csv')\ntest = pd.read_csv('input/test.csv')\n"
            f"sub = pd.read_csv('input/sample_submission.csv')\n"
            f"X = train.drop(columns=[{id_col}, {y_col}])\n"
            f"model = build().fit(X, train[{y_col}])\n"
            f"sub[sub.columns[1]] = {predict}\n"
            f"sub.to_csv('submission/submission.csv', index=False)\n")
    if broken == "syntax":
        body = body.replace("model = build()", "model = build(", 1)
    elif broken == "no_submission":
        body = body.replace("sub.to_csv('submission/submission.csv', index=False)\n", "print(sub.head())\n")
    elif broken == "bad_param":
        body = body.replace(f"{est}(", f"{est}(n_jobs_total=2, ", 1).replace(", )", ")")
    elif broken == "wrong_rows":
        body = body.replace("sub.to_csv(", "sub.head(10).to_csv(")
    return Sample(body, family, broken)
