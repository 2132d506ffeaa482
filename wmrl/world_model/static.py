"""Deterministic static checks beyond syntax: failures that need no model to predict.

A program that uses a name it never defined, imports a name its module does not have, calls a
scikit-learn estimator with arguments its constructor does not take, or returns an estimator whose
literal hyperparameters its own validation rejects fails with a runtime error when it runs, whatever
the data. The world model predicts those exactly (reward 0.1, variance 0, the error line the sandbox
would print), as it does syntax errors, and saves its network for what depends on the data.
"""
from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import math
import symtable
import warnings
from functools import lru_cache

import numpy as np

from wmrl.outcome import Status, sandbox_error_line
from wmrl.sandbox.program import precheck

# Modules whose attributes may be looked up on the host: importing them has no side effects.
# Anything else is left to the model (importing an arbitrary module named by agent code is not safe).
_INSPECTABLE = ("sklearn", "numpy", "scipy")
_BUILTINS = set(dir(builtins)) | {"__name__", "__file__", "__doc__", "__builtins__"}


@lru_cache(maxsize=4096)
def _import_failure(module: str, name: str) -> tuple[str, str] | None:
    """(exception name, message) that `from module import name` certainly raises, ("", "") when it certainly
    works, None when unknown."""
    if module.split(".")[0] not in _INSPECTABLE:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = importlib.import_module(module)
    except ImportError as e:
        return type(e).__name__, str(e)
    except Exception:  # noqa: BLE001 - an odd module: do not guess
        return None
    if hasattr(mod, name):
        return "", ""
    try:
        importlib.import_module(f"{module}.{name}")  # a submodule imported by name
        return "", ""
    except ImportError:  # worded as Python words it
        return "ImportError", f"cannot import name {name!r} from {module!r} ({getattr(mod, '__file__', None) or 'unknown location'})"
    except Exception:  # noqa: BLE001
        return None


def _parse(source: str) -> ast.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        return ast.parse(source)


def _imports(tree: ast.Module) -> list[tuple[str, str]]:
    out = []
    for node in tree.body:  # module level only: these run when the program is loaded
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.module, a.name) for a in node.names]
    return out


def static_check(source: str, interface: str = "estimator") -> tuple[Status | None, str]:
    """RUNTIME_ERROR with a reason when the program certainly fails at load, in `build()` or, for an
    estimator task (where the sandbox calls `build()` and fits what it returns), in fit; else None.

    Call after the syntax pre-check passed.
    """
    tree = _parse(source)
    imports = _imports(tree)
    for module, name in imports:
        if name == "*":
            return None, ""  # names are then unknowable statically
        failure = _import_failure(module, name)
        if failure and failure[0]:
            return Status.RUNTIME_ERROR, _error_line(*failure, "build")
    try:
        top = symtable.symtable(source, "program.py", "exec")
    except SyntaxError:
        return None, ""
    build = _the_build(tree)
    if build is None:
        return None, ""
    table = next(c for c in top.get_children() if c.get_name() == "build" and c.get_type() == "function")
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    undefined = {s.get_name() for s in table.get_symbols() if s.is_global()} - defined - _BUILTINS
    error = _build_error(tree, build, undefined, check_fit=interface == "estimator")
    return (Status.RUNTIME_ERROR, error) if error else (None, "")


def _the_build(tree: ast.Module) -> ast.FunctionDef | None:
    """The `def build` at the module's top level when it is the program's only binding of the name `build`;
    else None (with a second definition, the last one to run is the one called)."""
    bindings = [n for n in ast.walk(tree)
                if (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == "build")
                or (isinstance(n, ast.Name) and n.id == "build" and not isinstance(n.ctx, ast.Load))
                or (isinstance(n, ast.alias) and (n.asname or n.name) == "build")]
    only = bindings[0] if len(bindings) == 1 else None
    return only if isinstance(only, ast.FunctionDef) and only in tree.body else None


@lru_cache(maxsize=1024)
def _sklearn_class(module: str, name: str):
    """The scikit-learn estimator class `from module import name` gives, else None."""
    if module.split(".")[0] != "sklearn" or _import_failure(module, name) != ("", ""):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj = getattr(importlib.import_module(module), name, None)
    return obj if inspect.isclass(obj) and hasattr(obj, "get_params") else None


_NOT_LITERAL = object()
# Calls whose positional arguments are fitted in order whenever the result is (a pipeline's steps).
_PIPELINES = {("sklearn.pipeline", "make_pipeline")}


def _literal(node: ast.AST):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


def _evaluated(node: ast.AST):
    """Names read and calls made under `node`, in the order Python evaluates them (arguments before the
    call, an assignment's value before its target); what runs only maybe or later (lambda and nested bodies,
    comprehensions) or never (a local variable's annotation) is not entered."""
    if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                         ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        return
    if isinstance(node, ast.Assign):
        children = [node.value, *node.targets]
    elif isinstance(node, ast.AnnAssign):
        children = [node.value, node.target]
    else:
        children = ast.iter_child_nodes(node)
    for child in children:
        if child is not None:
            yield from _evaluated(child)
    if isinstance(node, ast.Call) or (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
        yield node


def _build_error(tree: ast.Module, build: ast.FunctionDef, undefined: set[str], check_fit: bool) -> str:
    """The error line of a `build()` that certainly fails, else "".

    Looked at: the statements of `build` up to its first `return`, as long as none of them branches or
    loops (each is then certainly run, in order; what follows a `return` never runs). Reading a global
    name the program never defines raises NameError; a scikit-learn constructor call with a keyword it
    does not take or too many positional arguments raises TypeError; with `check_fit` (the sandbox fits
    what `build` returns), an estimator returned alone or as a step of `make_pipeline` whose literal
    hyperparameters fail scikit-learn's own validation raises when it is fitted. Constructor errors are
    reproduced by constructing the class itself with the program's literal arguments (a placeholder for
    the others), which runs no agent code, so the message is the line the sandbox prints. Anything else
    (a name rebound, `*args`/`**kwargs`, an unknown module) is left to the model.
    """
    if build.args.args or build.args.vararg or build.args.kwarg or build.decorator_list:
        return ""
    rebound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    rebound |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments) for a in (*n.args, *n.kwonlyargs)}
    origin = {}  # local name -> (module, name) of a module-level `from sklearn... import`
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                origin[a.asname or a.name] = (node.module, a.name)
    names = [a.asname or a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names]
    origin = {k: v for k, v in origin.items() if k not in rebound and names.count(k) == 1}

    def origin_of(call: ast.Call):
        return origin.get(call.func.id) if isinstance(call.func, ast.Name) else None

    for stmt in build.body:
        if not isinstance(stmt, (ast.Return, ast.Assign, ast.AnnAssign, ast.Expr)):
            return ""  # a branch, loop, try or nested definition: what runs is no longer certain
        for node in _evaluated(stmt):
            if isinstance(node, ast.Name):
                if node.id in undefined:
                    return _error_line("NameError", f"name {node.id!r} is not defined", "build")
                continue
            cls = _sklearn_class(*origin_of(node)) if origin_of(node) else None
            if cls is None:
                continue
            if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                return ""  # unpacked arguments: unknowable here, and every later call is then uncertain
            args = [_literal(a) for a in node.args]
            kwargs = {k.arg: _literal(k.value) for k in node.keywords}
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    cls(*(None if a is _NOT_LITERAL else a for a in args),
                        **{k: None if v is _NOT_LITERAL else v for k, v in kwargs.items()})
            except TypeError as e:
                return _error_line(type(e).__name__, str(e), "build")
            except Exception:  # noqa: BLE001 - a constructor that validates: leave it to the model
                return ""
        if isinstance(stmt, ast.Return):
            return _returned_estimator_error(stmt.value, origin_of) if check_fit and stmt.value is not None else ""
    return ""


def _returned_estimator_error(node: ast.AST, origin_of) -> str:
    """Validation error of the estimator `build` returns, or of a step of the `make_pipeline` it returns."""
    if not isinstance(node, ast.Call) or origin_of(node) is None:
        return ""
    if origin_of(node) in _PIPELINES:
        for step in node.args:
            error = _returned_estimator_error(step, origin_of)
            if error:
                return error
        return ""
    cls = _sklearn_class(*origin_of(node))
    values = [_literal(k.value) for k in node.keywords]
    if cls is None or node.args or _NOT_LITERAL in values or not hasattr(cls, "_validate_params"):
        return ""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cls(**{k.arg: v for k, v in zip(node.keywords, values)})._validate_params()
    except (ValueError, TypeError) as e:  # InvalidParameterError is both
        return _error_line(type(e).__name__, str(e), "fit")
    except Exception:  # noqa: BLE001
        return ""
    return ""


def _error_line(exception: str, message: str, stage: str) -> str:
    """The error line the sandbox prints for an exception raised in `stage` (worded as `_zygote._run_program`
    words its detail)."""
    return sandbox_error_line(Status.RUNTIME_ERROR, f"{exception} in {stage}: {message[:200]}")


def decided_status(source: str, interface: str = "estimator") -> tuple[Status | None, str]:
    """(status, detail) of a program whose outcome needs no model: the sandbox's own pre-check (syntax,
    malformed), then the static checks above; (None, "") when a model must predict it."""
    status, detail = precheck(source, interface)
    if status is None:
        status, detail = static_check(source, interface)
    return status, detail


def value_at_position(points, pos: float) -> float:
    """Metric value at a leaderboard position, interpolated from (position, value) points of real
    executions; NaN without any."""
    if not points:
        return math.nan
    arr = np.array(sorted(points))
    return float(np.interp(pos, arr[:, 0], arr[:, 1]))
