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
import keyword
import math
import symtable
from functools import lru_cache


from wmrl.domains.research.outcome import Status, sandbox_error_line
from wmrl.domains.research.sandbox.program import collector_paused, parse_program, precheck
from wmrl.domains.research.world_model.catalog import LITERAL_SAMPLES, ROOTS, catalog, literal_type

# Modules the catalog describes (`wmrl.domains.research.world_model.catalog`, gathered in a child process ahead of any
# program): nothing an agent names is imported here, and no library code runs on an agent's values.
_INSPECTABLE = ROOTS
_BUILTINS = set(dir(builtins)) | {"__name__", "__file__", "__doc__", "__builtins__"}


@lru_cache(maxsize=4096)
def _import_failure(module: str, name: str) -> tuple[str, str] | None:
    """(exception name, message) that `from module import name` certainly raises, ("", "") when it certainly
    works, None when unknown. Read from the catalog, worded as Python words it."""
    parts = module.split(".")
    if parts[0] not in _INSPECTABLE:
        return None
    modules = catalog()["modules"]
    if parts[0] not in modules:
        return None
    for i in range(2, len(parts) + 1):  # the first missing prefix is the one Python names
        prefix, parent = ".".join(parts[:i]), ".".join(parts[:i - 1])
        if prefix in modules:
            continue
        if "names" not in modules[parent]:
            return None  # a module whose contents are not known (private, or it failed to import)
        if prefix.rpartition(".")[2] in modules[parent]["names"]:
            return None  # an attribute of the parent, not a submodule: `from a.b import c` then fails oddly
        if modules[parent]["package"]:
            return "ModuleNotFoundError", f"No module named {prefix!r}"
        return "ModuleNotFoundError", f"No module named {prefix!r}; {parent!r} is not a package"
    entry = modules[module]
    if "error" in entry:
        return tuple(entry["error"])
    if "names" not in entry:
        return None
    if name in entry["names"] or f"{module}.{name}" in modules:
        return "", ""
    if entry.get("lazy"):
        return None  # a module-level __getattr__ may still answer the name
    return "ImportError", f"cannot import name {name!r} from {module!r} ({entry.get('file') or 'unknown location'})"


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
    with collector_paused():
        return _static_check(source, interface)


def _static_check(source: str, interface: str) -> tuple[Status | None, str]:
    tree, status, detail = parse_program(source)
    if tree is None:
        return status, detail
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
    nodes = list(ast.walk(tree))  # walked once: the checks below look at every node more than once
    build = _the_build(tree, nodes)
    if build is None:
        return None, ""
    table = next(c for c in top.get_children() if c.get_name() == "build" and c.get_type() == "function")
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    undefined = {s.get_name() for s in table.get_symbols() if s.is_global()} - defined - _BUILTINS
    error = _build_error(tree, nodes, build, undefined, check_fit=interface == "estimator")
    return (Status.RUNTIME_ERROR, error) if error else (None, "")


def _the_build(tree: ast.Module, nodes: list[ast.AST]) -> ast.FunctionDef | None:
    """The `def build` at the module's top level when it is the program's only binding of the name `build`;
    else None (with a second definition, the last one to run is the one called)."""
    bindings = [n for n in nodes
                if (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == "build")
                or (isinstance(n, ast.Name) and n.id == "build" and not isinstance(n.ctx, ast.Load))
                or (isinstance(n, ast.alias) and (n.asname or n.name) == "build")]
    only = bindings[0] if len(bindings) == 1 else None
    return only if isinstance(only, ast.FunctionDef) and only in tree.body else None


def _sklearn_class(module: str, name: str) -> dict | None:
    """The catalog's description of the scikit-learn estimator class `from module import name` gives, else None."""
    if module.split(".")[0] != "sklearn" or _import_failure(module, name) != ("", ""):
        return None
    return catalog()["estimators"].get(f"{module}:{name}")


@lru_cache(maxsize=1024)
def _constructor(module: str, name: str):
    """A function with the signature and qualified name of the class's `__init__` and an empty body: calling it
    raises the TypeError the constructor raises on those arguments, worded by Python itself. Compiled from the
    catalog's parameter names (never from agent text)."""
    est = catalog()["estimators"][f"{module}:{name}"]
    params = est["params"]
    if not all(n.isidentifier() and not keyword.iskeyword(n) for n, _, _ in params):
        return None
    parts = []
    for i, (pname, kind, has_default) in enumerate(params):
        if kind == "KEYWORD_ONLY" and not any(k in ("KEYWORD_ONLY", "VAR_POSITIONAL") for _, k, _ in params[:i]):
            parts.append("*")
        prefix = {"VAR_POSITIONAL": "*", "VAR_KEYWORD": "**"}.get(kind, "")
        parts.append(prefix + pname + ("=None" if has_default and not prefix else ""))
        if kind == "POSITIONAL_ONLY" and (i + 1 == len(params) or params[i + 1][1] != "POSITIONAL_ONLY"):
            parts.append("/")
    namespace: dict = {}
    exec(compile(f"def __init__({', '.join(parts)}):\n    pass\n", "<catalog>", "exec"), namespace)  # noqa: S102
    fn = namespace["__init__"]
    fn.__qualname__ = est["init_qualname"]  # what Python names in the TypeError
    return fn


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


def _build_error(tree: ast.Module, nodes: list[ast.AST], build: ast.FunctionDef, undefined: set[str],
                 check_fit: bool) -> str:
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
    rebound = {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    rebound |= {a.arg for n in nodes if isinstance(n, ast.arguments) for a in (*n.args, *n.kwonlyargs)}
    origin = {}  # local name -> (module, name) of a module-level `from sklearn... import`
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                origin[a.asname or a.name] = (node.module, a.name)
    names = [a.asname or a.name for n in nodes if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names]
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
            cls = _constructor(*origin_of(node)) if origin_of(node) and _sklearn_class(*origin_of(node)) else None
            if cls is None:
                continue
            if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                return ""  # unpacked arguments: unknowable here, and every later call is then uncertain
            try:  # `self`, then placeholders: only the arguments' number and names matter to the signature
                cls(None, *(None for _ in node.args), **{k.arg: None for k in node.keywords})
            except TypeError as e:
                return _error_line(type(e).__name__, str(e), "build")
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
    est = _sklearn_class(*origin_of(node))
    names = [k.arg for k in node.keywords]
    if None in names or len(set(names)) < len(names):  # `**mapping`, or a keyword repeated (Python's compiler
        return ""  # rejects that: the sandbox reports it, the network predicts it)
    values = [_literal(k.value) for k in node.keywords]
    if est is None or node.args or _NOT_LITERAL in values or est["constraints"] is None:
        return ""
    for pname, value in sorted(zip(names, values), key=lambda kv: kv[0]):  # get_params() order: sorted
        rule = est["constraints"].get(pname)
        if rule is None:
            continue
        verdicts = [_satisfies(c, value) for c in rule["any"]]
        if True in verdicts:
            continue
        if None in verdicts:
            return ""  # a constraint the catalog cannot evaluate: leave it to the model
        return _error_line("InvalidParameterError", f"The {pname!r} parameter of {est['name']} must be "
                                                    f"{rule['message']}. Got {value!r} instead.", "fit")
    return ""


def _satisfies(c: dict, value) -> bool | None:
    """Whether a literal satisfies a catalog constraint (as scikit-learn's `is_satisfied_by` decides), None
    when unknown."""
    kind = c["kind"]
    if kind == "types":
        return literal_type(value) in c["types"] if literal_type(value) in LITERAL_SAMPLES else None
    if kind == "any":
        verdicts = [_satisfies(x, value) for x in c["of"]]
        return True if True in verdicts else None if None in verdicts else False
    if kind == "options":
        return literal_type(value) in c["types"] and _hashable(value) and value in c["values"]
    if kind == "nan":
        return isinstance(value, float) and math.isnan(value)
    if kind == "interval":
        numeric = {"integral": (bool, int), "real": (bool, int, float), "real_not_int": (float,)}[c["type"]]
        if not isinstance(value, numeric):
            return False
        if isinstance(value, float) and math.isnan(value):
            return False
        left = -math.inf if c["left"] is None else c["left"]
        right = math.inf if c["right"] is None else c["right"]
        closed = c["closed"]
        below = value < left if closed in ("left", "both") else value <= left
        above = value > right if closed in ("right", "both") else value >= right
        return not (below or above)
    return None


def _hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


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

