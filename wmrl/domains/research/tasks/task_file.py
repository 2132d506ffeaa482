"""User tasks from YAML files, so a task is added without editing the package.

Example::

    name: churn
    data: churn.csv          # CSV or Parquet (needs `target`), NPZ with arrays X and y, bundled:NAME,
                             # synthetic:GENERATOR; a task folder for interface: script
    target: churned
    id_column: customer_id   # optional; never a feature
    test_data: churn_test.csv  # optional; a second labelled file scored as the test split
    kind: classification
    metric: roc_auc          # optional; a scikit-learn scorer name; default accuracy / r2
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

from wmrl.domains.research.tasks import tabular
from wmrl.domains.research.tasks.data import BUNDLED, GENERATORS
from wmrl.domains.research.tasks.metrics import ALIASES, DEFAULT_METRIC, METRICS
from wmrl.domains.research.tasks.references import REFERENCES
from wmrl.domains.research.tasks.spec import INTERFACES, KINDS, TaskError, TaskSpec

FIELDS = ("name", "data", "target", "kind", "metric", "split", "time_limit_s", "held_out", "description", "params",
          "id_column", "test_data", "interface", "optional", "references", "family")
REQUIRED = ("name", "data", "kind")


MAX_YAML_BYTES = 1 << 20


def is_task_name(name) -> bool:
    """A name that is also a safe folder name: letters, digits, _ and - (ASCII), at most 100 characters."""
    return isinstance(name, str) and 0 < len(name) <= 100 and name.isascii() and name.replace("_", "").replace("-", "").isalnum()


def read_yaml(path: Path, where: str):
    """A YAML document of plain data: no Python tags (safe_load), no aliases (a few lines of nested aliases
    expand to billions of nodes when the document is printed or walked), at most MAX_YAML_BYTES; else a TaskError."""
    import yaml

    class _NoAliases(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed in a task file",
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)

    try:
        if path.stat().st_size > MAX_YAML_BYTES:
            raise TaskError(f"{where}: larger than {MAX_YAML_BYTES >> 20} MiB")
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_NoAliases)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise TaskError(f"{where}: not valid YAML: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TaskError(f"{where}: cannot read it: {e}") from None


def load_task_file(path: str | Path, max_data_mb: float = tabular.DEFAULT_MAX_MB) -> TaskSpec:
    """Read and validate one task file; every error names the file and the bad field."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise TaskError(f"task file {str(path)!r} does not exist")
    doc = read_yaml(path, f"task file {path}")
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
    if not is_task_name(name):
        raise bad("name", f"must be a word of letters, digits, _ or -; got {name!r}")
    kind = doc["kind"]
    if kind not in KINDS:
        raise bad("kind", f"must be one of {', '.join(KINDS)}; got {kind!r}")
    metric = doc.get("metric") or DEFAULT_METRIC[kind]
    metric = ALIASES.get(metric, metric)
    if metric not in METRICS[kind]:
        raise bad("metric", f"must be one of {', '.join(METRICS[kind])} for {kind}; got {metric!r}")
    interface = doc.get("interface", "estimator")
    if interface not in INTERFACES:
        raise bad("interface", f"must be one of {', '.join(INTERFACES)}; got {interface!r}")
    if interface == "script":
        from wmrl.domains.research.tasks.script import check_folder

        folder = Path(str(doc["data"])).expanduser()
        folder = folder if folder.is_absolute() else path.parent / folder
        try:
            check_folder(folder, max_data_mb)
        except TaskError as e:
            raise bad("data", f"is not a usable task folder: {e}") from None
        data, target = str(folder.resolve()), doc.get("target")
    else:
        data, target = _data(doc, path, bad, max_data_mb)
    id_column = doc.get("id_column")
    if id_column is not None and not isinstance(id_column, str):
        raise bad("id_column", f"must be a column name; got {id_column!r}")
    test_data = doc.get("test_data")
    if test_data is not None:
        if not tabular.is_table(data):
            raise bad("test_data", "is only for CSV or Parquet data")
        tfile = Path(str(test_data)).expanduser()
        tfile = tfile if tfile.is_absolute() else path.parent / tfile
        if not tfile.is_file():
            raise bad("test_data", f"file {str(tfile)!r} does not exist")
        tabular.check_size(tfile, max_data_mb, f"task file {path}: field 'test_data'")
        test_data = str(tfile.resolve())
    optional = doc.get("optional", False)
    if not isinstance(optional, bool):
        raise bad("optional", f"must be true or false; got {optional!r}")
    references = doc.get("references")
    if references is not None:
        unknown = [r for r in references or [] if r not in REFERENCES[kind]] if isinstance(references, list) else [references]
        if unknown or not references:
            raise bad("references", f"must be a non-empty list of {', '.join(REFERENCES[kind])}; got {references!r}")
        references = tuple(references)
    family = doc.get("family")
    if family is not None and not (isinstance(family, str) and is_task_name(family)):
        raise bad("family", f"must be a name (letters, digits, _ and -); got {family!r}")
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
                    val=val, test=test, target=target, params=params, description=str(doc.get("description", "")),
                    interface=interface, id_column=id_column, test_data=test_data, optional=optional,
                    references=references, family=family)


def _data(doc: dict, path: Path, bad, max_data_mb: float) -> tuple[str, str | None]:
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
    if file.suffix.lower() not in (*tabular.TABLE_SUFFIXES, ".npz"):
        raise bad("data", f"must be a .csv, .parquet or .npz file, bundled:NAME or synthetic:GENERATOR; got {data!r}")
    if not file.is_file():
        raise bad("data", f"file {str(file)!r} does not exist")
    tabular.check_size(file, max_data_mb, f"task file {path}: field 'data'")
    if tabular.is_table(str(file)):
        if not isinstance(target, str):
            raise bad("target", "is required for CSV or Parquet data: the name of the target column")
        header = _columns(file, f"task file {path}: field 'data'")
        if target not in header:
            raise bad("target", f"column {target!r} is not in {file.name} (columns: {', '.join(header)})")
        id_column = doc.get("id_column")
        if isinstance(id_column, str) and id_column not in header:
            raise bad("id_column", f"column {id_column!r} is not in {file.name} (columns: {', '.join(header)})")
    return str(file.resolve()), target


def _columns(file: Path, where: str) -> list[str]:
    if file.suffix.lower() != ".csv":
        return tabular.parquet_metadata(file, where)["names"]
    try:
        with open(file, newline="", encoding="utf-8", errors="replace") as f:
            return next(csv.reader(f), [])
    except (csv.Error, OSError) as e:
        raise TaskError(f"{where}: cannot read the header of {file.name}: {e}") from None


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
