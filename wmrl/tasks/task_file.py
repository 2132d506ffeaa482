"""User tasks from YAML files, so a task is added without editing the package.

Example::

    name: churn
    data: churn.csv          # CSV (needs `target`), NPZ with arrays X and y, bundled:NAME, synthetic:GENERATOR
    target: churned
    kind: classification
    metric: balanced_accuracy  # optional; default accuracy / r2
    split: {val: 0.2, test: 0.2}  # optional; fractions, or row counts if >= 1
    time_limit_s: 10
    held_out: false
    description: Predict whether a customer leaves.   # optional, shown in the prompt
"""
from __future__ import annotations

import csv
import difflib
import numbers
from pathlib import Path

from wmrl.tasks.data import BUNDLED, GENERATORS
from wmrl.tasks.metrics import DEFAULT_METRIC, METRICS
from wmrl.tasks.spec import KINDS, TaskError, TaskSpec

FIELDS = ("name", "data", "target", "kind", "metric", "split", "time_limit_s", "held_out", "description", "params")
REQUIRED = ("name", "data", "kind")


def load_task_file(path: str | Path) -> TaskSpec:
    """Read and validate one task file; every error names the file and the bad field."""
    import yaml

    path = Path(path).expanduser()
    if not path.is_file():
        raise TaskError(f"task file {str(path)!r} does not exist")
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise TaskError(f"task file {path}: not valid YAML: {e}") from None
    if not isinstance(doc, dict):
        raise TaskError(f"task file {path}: expected a mapping of fields ({', '.join(FIELDS)})")

    def bad(field: str, why: str) -> TaskError:
        return TaskError(f"task file {path}: field {field!r} {why}")

    for key in doc:
        if key not in FIELDS:
            near = difflib.get_close_matches(str(key), FIELDS, n=1)
            raise bad(str(key), "is not a task field" + (f" (did you mean {near[0]!r}?)" if near else "")
                      + f"; fields: {', '.join(FIELDS)}")
    for key in REQUIRED:
        if doc.get(key) in (None, ""):
            raise bad(key, "is required")
    name = doc["name"]
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        raise bad("name", f"must be a word of letters, digits, _ or -; got {name!r}")
    kind = doc["kind"]
    if kind not in KINDS:
        raise bad("kind", f"must be one of {', '.join(KINDS)}; got {kind!r}")
    metric = doc.get("metric") or DEFAULT_METRIC[kind]
    if metric not in METRICS[kind]:
        raise bad("metric", f"must be one of {', '.join(METRICS[kind])} for {kind}; got {metric!r}")
    data, target = _data(doc, path, bad)
    val, test = _split(doc.get("split", {}), bad)
    limit = doc.get("time_limit_s", 10.0)
    if not isinstance(limit, numbers.Real) or isinstance(limit, bool) or limit <= 0:
        raise bad("time_limit_s", f"must be a positive number of seconds; got {limit!r}")
    held_out = doc.get("held_out", False)
    if not isinstance(held_out, bool):
        raise bad("held_out", f"must be true or false; got {held_out!r}")
    params = doc.get("params") or {}
    if not isinstance(params, dict) or (params and not data.startswith("synthetic:")):
        raise bad("params", "must be a mapping, and is only for synthetic:GENERATOR data")
    return TaskSpec(name=name, data=data, kind=kind, metric=metric, time_limit_s=float(limit), held_out=held_out,
                    val=val, test=test, target=target, params=params, description=str(doc.get("description", "")))


def _data(doc: dict, path: Path, bad) -> tuple[str, str | None]:
    data, target = str(doc["data"]), doc.get("target")
    source, _, arg = data.partition(":")
    if source == "bundled":
        if arg not in BUNDLED:
            raise bad("data", f"bundled dataset must be one of {', '.join(BUNDLED)}; got {arg!r}")
        return data, None
    if source == "synthetic":
        if arg not in GENERATORS:
            raise bad("data", f"generator must be one of {', '.join(GENERATORS)}; got {arg!r}")
        return data, None
    file = Path(data).expanduser()
    file = file if file.is_absolute() else path.parent / file  # relative to the task file
    if file.suffix not in (".csv", ".npz"):
        raise bad("data", f"must be a .csv or .npz file, bundled:NAME or synthetic:GENERATOR; got {data!r}")
    if not file.is_file():
        raise bad("data", f"file {str(file)!r} does not exist")
    if file.suffix == ".csv":
        if not isinstance(target, str):
            raise bad("target", "is required for CSV data: the name of the target column")
        with open(file, newline="") as f:
            header = next(csv.reader(f), [])
        if target not in header:
            raise bad("target", f"column {target!r} is not in {file.name} (columns: {', '.join(header)})")
    return str(file.resolve()), target


def _split(split, bad) -> tuple[float, float]:
    if not isinstance(split, dict) or set(split) - {"val", "test"}:
        raise bad("split", f"must be a mapping with keys val and test; got {split!r}")
    sizes = []
    for key in ("val", "test"):
        size = split.get(key, 0.15)
        if not isinstance(size, numbers.Real) or isinstance(size, bool) or size <= 0 or (size >= 1 and size != int(size)):
            raise bad("split", f"{key} must be a fraction in (0, 1) or a whole row count; got {size!r}")
        sizes.append(float(size))
    if sizes[0] < 1 and sizes[1] < 1 and sum(sizes) >= 0.9:
        raise bad("split", f"val + test = {sum(sizes):g} leaves too little to train on")
    return sizes[0], sizes[1]
