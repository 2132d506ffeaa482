"""Deterministic static checks beyond syntax: failures that need no model to predict.

A program that uses a name it never defined or imports a name its module does not have fails
with a runtime error the moment it runs, whatever the data. The world model predicts those
exactly (reward 0.1, variance 0), as it does syntax errors, and saves its network for what
depends on the data.
"""
from __future__ import annotations

import builtins
import importlib
import math
import symtable
import warnings
from functools import lru_cache

import numpy as np

from wmrl.outcome import Status
from wmrl.sandbox.program import precheck

# Modules whose attributes may be looked up on the host: importing them has no side effects.
# Anything else is left to the model (importing an arbitrary module named by agent code is not safe).
_INSPECTABLE = ("sklearn", "numpy", "scipy")
_BUILTINS = set(dir(builtins)) | {"__name__", "__file__", "__doc__", "__builtins__"}


@lru_cache(maxsize=4096)
def _module_has(module: str, name: str) -> bool | None:
    """True/False when `from module import name` certainly works/fails; None when unknown."""
    if module.split(".")[0] not in _INSPECTABLE:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = importlib.import_module(module)
    except ImportError:
        return False
    except Exception:  # noqa: BLE001 - an odd module: do not guess
        return None
    if hasattr(mod, name):
        return True
    try:
        importlib.import_module(f"{module}.{name}")  # a submodule imported by name
        return True
    except ImportError:
        return False
    except Exception:  # noqa: BLE001
        return None


def _imports(source: str) -> list[tuple[str, str]]:
    import ast

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        tree = ast.parse(source)
    out = []
    for node in tree.body:  # module level only: these run when the program is loaded
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.module, a.name) for a in node.names]
    return out


def static_check(source: str) -> tuple[Status | None, str]:
    """RUNTIME_ERROR with a reason when the program certainly fails at load or in `build()`; else None.

    Call after the syntax pre-check passed.
    """
    for module, name in _imports(source):
        if name == "*":
            return None, ""  # names are then unknowable statically
        if _module_has(module, name) is False:
            return Status.RUNTIME_ERROR, f"ImportError: cannot import name {name!r} from {module!r}"
    try:
        top = symtable.symtable(source, "program.py", "exec")
    except SyntaxError:
        return None, ""
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    build = next((c for c in top.get_children() if c.get_name() == "build" and c.get_type() == "function"), None)
    tables = [build] if build is not None else []
    while tables:  # build() and the scopes it contains (comprehensions, lambdas run inside it)
        table = tables.pop()
        tables += table.get_children()
        for sym in table.get_symbols():
            name = sym.get_name()
            if sym.is_referenced() and sym.is_global() and name not in defined and name not in _BUILTINS:
                return Status.RUNTIME_ERROR, f"NameError: name {name!r} is not defined"
    return None, ""


def decided_status(source: str, interface: str = "estimator") -> tuple[Status | None, str]:
    """(status, detail) of a program whose outcome needs no model: the sandbox's own pre-check (syntax,
    malformed), then the static checks above; (None, "") when a model must predict it."""
    status, detail = precheck(source, interface)
    if status is None:
        status, detail = static_check(source)
    return status, detail


def value_at_position(points, pos: float) -> float:
    """Metric value at a leaderboard position, interpolated from (position, value) points of real
    executions; NaN without any."""
    if not points:
        return math.nan
    arr = np.array(sorted(points))
    return float(np.interp(pos, arr[:, 0], arr[:, 1]))
