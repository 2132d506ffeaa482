"""The action class of a program: the estimator family its `build()` returns.

Used as a stratum for debiasing and for statistics, so it must be cheap (AST only, the
program is never run) and total (every string gets a class).
"""
from __future__ import annotations

import ast
import re
from typing import Dict, Optional

from wmrl.domains.research.sandbox.program import collector_paused, parse_program

ACTION_CLASSES = ("forest", "linear", "boosting", "knn", "svm", "tree", "naive_bayes",
                  "neural_net", "dummy", "other", "unparsable")

# First match wins; names are estimator class names as scikit-learn (or xgboost...) spell them.
_FAMILIES = [
    ("dummy", r"Dummy\w*"),
    ("boosting", r"\w*GradientBoosting\w*|AdaBoost\w*|XGB\w*|LGBM\w*|CatBoost\w*"),
    ("forest", r"RandomForest\w*|ExtraTrees\w*|Bagging\w*"),
    ("tree", r"DecisionTree\w*|ExtraTree(Classifier|Regressor)"),
    ("svm", r"SVC|SVR|LinearSVC|LinearSVR|NuSVC|NuSVR"),
    ("knn", r"KNeighbors\w*|RadiusNeighbors\w*|NearestCentroid"),
    ("naive_bayes", r"\w+NB"),
    ("neural_net", r"MLP\w*"),
    ("linear", r"LogisticRegression\w*|Ridge\w*|Lasso\w*|ElasticNet\w*|LinearRegression|SGD\w*|Perceptron"
               r"|PassiveAggressive\w*|\w*Lars\w*|BayesianRidge|ARDRegression|HuberRegressor|QuantileRegressor"
               r"|TheilSenRegressor|RANSACRegressor|PoissonRegressor|GammaRegressor|TweedieRegressor"
               r"|OrthogonalMatchingPursuit\w*|LinearDiscriminantAnalysis"),
]
# Meta-estimators whose family is that of the estimator they wrap.
_WRAPPERS = {"GridSearchCV", "RandomizedSearchCV", "HalvingGridSearchCV", "HalvingRandomSearchCV",
             "CalibratedClassifierCV", "OneVsRestClassifier", "OneVsOneClassifier", "OutputCodeClassifier",
             "MultiOutputClassifier", "MultiOutputRegressor", "ClassifierChain", "RegressorChain",
             "TransformedTargetRegressor", "TunedThresholdClassifierCV", "FixedThresholdClassifier"}
_WRAPPED_KWARGS = ("estimator", "regressor", "classifier", "base_estimator")
_MAX_DEPTH = 8
_MAX_STEPS = 2_000  # expressions followed per program: helpers returning helpers would otherwise branch exponentially


def family_of(class_name: str) -> Optional[str]:
    for family, pattern in _FAMILIES:
        if re.fullmatch(pattern, class_name):
            return family
    return None


def action_class(source: str) -> str:
    """Family of the estimator `build()` returns; for a pipeline, of its final step."""
    tree = parse_program(source)[0]  # bounded in size and depth: no text makes the walks below recurse too deep
    if tree is None:
        return "unparsable"
    with collector_paused():
        return _family(tree)


def _family(tree: ast.Module) -> str:
    resolver = _Resolver(tree)
    build = resolver.functions.get("build")
    family = resolver.of_function(build, 0) if build is not None else None
    if family is None:  # no resolvable return: fall back to the last estimator constructed anywhere
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        calls.sort(key=lambda n: (n.lineno, n.col_offset))
        families = [f for f in (family_of(resolver.callee(c)) for c in calls) if f]
        family = families[-1] if families else None
    return family or "other"


class _Resolver:
    """Follows returns, local assignments, helper functions, pipelines and wrappers."""

    def __init__(self, tree: ast.Module):
        self.functions: Dict[str, ast.FunctionDef] = {
            n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.aliases: Dict[str, str] = {}
        self.steps = 0
        self.bodies: Dict[int, tuple] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    self.aliases[a.asname or a.name] = a.name
        self.module_env = self._assignments(tree.body)

    def callee(self, call: ast.Call) -> str:
        f = call.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        return self.aliases.get(name, name)

    def of_function(self, fn: ast.FunctionDef, depth: int) -> Optional[str]:
        if id(fn) not in self.bodies:  # each function walked once, however often helpers call it
            nodes = list(ast.walk(fn))
            self.bodies[id(fn)] = ([n.value for n in nodes if isinstance(n, ast.Return) and n.value is not None],
                                   {**self.module_env, **self._assignments(nodes)})
        returns, env = self.bodies[id(fn)]
        for value in reversed(returns):
            family = self.of_expr(value, env, depth + 1)
            if family:
                return family
        return None

    @staticmethod
    def _assignments(nodes) -> Dict[str, ast.expr]:
        env: Dict[str, ast.expr] = {}
        for node in nodes:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        env[target.id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
                env[node.target.id] = node.value
        return env

    def of_expr(self, expr: ast.expr, env: Dict[str, ast.expr], depth: int) -> Optional[str]:
        self.steps += 1
        if depth > _MAX_DEPTH or self.steps > _MAX_STEPS:
            return None
        if isinstance(expr, ast.Name) and expr.id in env and env[expr.id] is not expr:
            return self.of_expr(env[expr.id], env, depth + 1)
        if isinstance(expr, (ast.List, ast.Tuple)) and expr.elts:  # a (name, estimator) step or a step list
            return self.of_expr(expr.elts[-1], env, depth + 1)
        if not isinstance(expr, ast.Call):
            return None
        name = self.callee(expr)
        kwargs = {k.arg: k.value for k in expr.keywords if k.arg}
        if name == "make_pipeline" and expr.args:
            return self.of_expr(expr.args[-1], env, depth + 1)
        if name == "Pipeline":
            steps = expr.args[0] if expr.args else kwargs.get("steps")
            return self.of_expr(steps, env, depth + 1) if steps is not None else None
        if name in _WRAPPERS:
            inner = expr.args[0] if expr.args else next((kwargs[k] for k in _WRAPPED_KWARGS if k in kwargs), None)
            return self.of_expr(inner, env, depth + 1) if inner is not None else None
        if name == "set_params" and isinstance(expr.func, ast.Attribute):
            return self.of_expr(expr.func.value, env, depth + 1)
        if name in self.functions and isinstance(expr.func, ast.Name):
            return self.of_function(self.functions[name], depth + 1)
        return family_of(name)
