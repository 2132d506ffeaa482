"""What the static checks know of the installed scientific libraries, gathered once, ahead of any program.

The trainer never imports a module an agent names, nor runs library code on an agent's values: a module
named in agent text may run a program when imported (a `__main__` submodule does, with the trainer's
`sys.argv`), and a constructor is library code. Instead a child process imports the public modules of
scikit-learn, NumPy and SciPy (a fixed list, the same for every program) and writes what a check needs:
which modules exist, the names each defines, and for every scikit-learn estimator class its constructor's
signature and its parameters' validation constraints, as plain data. The file is cached per installed
version (`~/.cache/wmrl/catalog/`); the checks only read it.

    python -m wmrl.domains.research.world_model.catalog OUT.json     # what the trainer runs once, in a child process (~6 s)
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

import wmrl

log = logging.getLogger(__name__)

VERSION = 1  # of the file's layout
ROOTS = ("sklearn", "numpy", "scipy")
BUILD_TIMEOUT_S = 600
# One value of each type `ast.literal_eval` can produce: constraints that depend on a value's type only
# (instances of a class, array-likes, callables, objects with methods) are evaluated on these, ahead of time.
LITERAL_SAMPLES = {"NoneType": None, "bool": True, "int": 1, "float": 1.5, "complex": 1j, "str": "a", "bytes": b"a",
                   "tuple": (1,), "list": [1], "dict": {"a": 1}, "set": {1}, "ellipsis": ...}


def literal_type(value) -> str:
    return type(value).__name__


# --- reading (the trainer) --------------------------------------------------------------------------------
def cache_path() -> Path:
    """Where the catalog of this interpreter and these library versions lives."""
    from importlib import metadata

    versions = []
    for dist in ("scikit-learn", "numpy", "scipy"):
        try:
            versions.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{dist}=absent")
    key = hashlib.sha256(f"{VERSION}|{sys.executable}|{sys.version}|{'|'.join(versions)}".encode()).hexdigest()[:16]
    root = Path(os.environ.get("WMRL_CACHE", "~/.cache/wmrl")).expanduser()
    return root / "catalog" / f"{key}.json"


@lru_cache(maxsize=1)
def catalog() -> dict:
    """The catalog (built in a child process on first use, then read from the cache); an empty one, with a
    warning, when it cannot be built: the checks then decide less, never wrongly."""
    path = cache_path()
    try:
        data = json.loads(path.read_text())
        if data.get("version") == VERSION:
            return data
    except (OSError, ValueError):
        pass
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as f:
            tmp = Path(f.name)
        try:
            package_root = str(Path(wmrl.__file__).resolve().parents[1])  # wmrl importable in the child, installed or not
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
            subprocess.run([sys.executable, "-c", "import sys; from wmrl.domains.research.world_model.catalog import main; sys.exit(main(sys.argv[1:]))",
                            str(tmp)], check=True, timeout=BUILD_TIMEOUT_S, env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           cwd=tempfile.gettempdir())
            data = json.loads(tmp.read_text())
            os.replace(tmp, path)
            return data
        finally:
            tmp.unlink(missing_ok=True)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", b"") or b""
        log.warning("static checks: no catalog of the installed libraries (%s %s); they decide imports and "
                    "estimator arguments no more", type(e).__name__, detail.decode(errors="replace")[-500:])
        return {"version": VERSION, "modules": {}, "estimators": {}}


# --- building (the child process) -------------------------------------------------------------------------
def _importable(name: str) -> bool:
    """Modules the builder imports: library code, not test suites or command-line entry points."""
    return not any(p in ("tests", "test", "conftest", "setup", "__main__") for p in name.split(".")[1:])


def _changes_others(name: str) -> bool:
    """Modules whose import adds names to other modules (`sklearn.experimental.enable_*`): imported after
    every other module's names are read, so no module is described with names a program would lack."""
    return name.startswith("sklearn.experimental.")


def _constraint(c, pv) -> dict:
    """A scikit-learn constraint object as data the checks evaluate on a literal value."""
    from numbers import Integral, Real

    kind = type(c).__name__
    if kind == "Interval":
        t = "integral" if c.type is Integral else "real_not_int" if c.type is pv.RealNotInt else "real" if c.type is Real else None
        if t is None:
            return {"kind": "unknown"}
        return {"kind": "interval", "type": t, "left": c.left, "right": c.right, "closed": c.closed}
    if kind in ("StrOptions", "Options"):
        values = list(c.options)
        if not all(isinstance(v, (str, int, float, bool)) or v is None for v in values):
            return {"kind": "unknown"}
        types = [name for name, v in LITERAL_SAMPLES.items() if isinstance(v, c.type)]
        return {"kind": "options", "types": types, "values": values}
    if kind == "_NanConstraint":
        return {"kind": "nan"}
    if hasattr(c, "_constraints"):  # booleans, verbose, random_state, cv objects, missing values: any of these
        return {"kind": "any", "of": [_constraint(x, pv) for x in c._constraints]}
    if kind in ("_InstancesOf", "_NoneConstraint", "_ArrayLikes", "_SparseMatrices", "_Callables", "HasMethods",
                "_IterablesNotString", "_PandasNAConstraint"):  # decided by a literal's type alone
        return {"kind": "types", "types": [name for name, v in LITERAL_SAMPLES.items() if c.is_satisfied_by(v)]}
    return {"kind": "unknown"}


def _estimator(cls, pv) -> dict | None:
    import inspect

    init = cls.__init__
    if init is object.__init__ or inspect.isabstract(cls):
        return None
    try:
        params = [[p.name, p.kind.name, p.default is not inspect.Parameter.empty]
                  for p in inspect.signature(init).parameters.values()]
    except (TypeError, ValueError):
        return None
    out = {"init_qualname": init.__qualname__, "params": params, "name": cls.__name__, "constraints": None}
    constraints = getattr(cls, "_parameter_constraints", None)
    if isinstance(constraints, dict) and hasattr(cls, "_validate_params"):
        table = {}
        for param, cs in constraints.items():
            if cs == "no_validation":
                continue
            made = [pv.make_constraint(x) for x in cs]
            shown = [x for x in made if not x.hidden]
            message = f"{shown[0]}" if len(shown) == 1 else f"{', '.join(str(x) for x in shown[:-1])} or {shown[-1]}"
            table[param] = {"any": [_constraint(x, pv) for x in made], "message": message}
        out["constraints"] = table
    return out


def build() -> dict:
    """Import the public modules of ROOTS (in this process: call it in a child) and describe them."""
    import importlib
    import inspect
    import pkgutil
    import warnings

    warnings.simplefilter("ignore")
    modules: dict = {}
    estimators: dict = {}
    for root in ROOTS:
        try:
            pkg = importlib.import_module(root)
        except Exception:  # noqa: BLE001 - not installed, or broken: nothing known of it
            continue
        found = {root: True}
        for info in pkgutil.walk_packages(pkg.__path__, root + ".", onerror=lambda name: None):
            found[info.name] = info.ispkg
        for name in list(sys.modules):
            if name.split(".")[0] == root and name not in found:
                found[name] = hasattr(sys.modules[name], "__path__")
        for name, ispkg in sorted(found.items(), key=lambda item: (_changes_others(item[0]), item[0])):
            entry = {"package": bool(ispkg)}
            if _importable(name):
                try:
                    mod = importlib.import_module(name)
                except ImportError as e:
                    entry["error"] = [type(e).__name__, str(e)]
                except BaseException:  # noqa: BLE001 - an odd module: nothing is known of its names
                    pass
                else:
                    entry.update(file=getattr(mod, "__file__", None), names=sorted(n for n in dir(mod) if isinstance(n, str)),
                                 lazy=callable(getattr(mod, "__getattr__", None)))
            modules[name] = entry
    try:
        import sklearn.utils._param_validation as pv
    except ImportError:
        pv = None
    for name, entry in modules.items():
        if pv is None or not name.startswith("sklearn") or "names" not in entry:
            continue
        mod = sys.modules.get(name)
        for attr in entry["names"]:
            obj = getattr(mod, attr, None)
            if inspect.isclass(obj) and hasattr(obj, "get_params"):
                try:
                    described = _estimator(obj, pv)
                except Exception:  # noqa: BLE001 - a class whose constraints cannot be read: left to the model
                    described = None
                if described is not None:
                    estimators[f"{name}:{attr}"] = described
    return {"version": VERSION, "modules": modules, "estimators": estimators}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    data = build()
    Path(argv[0]).write_text(json.dumps(data, default=_json_number))
    return 0


def _json_number(value):
    """Interval bounds may be NumPy numbers or infinities."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
