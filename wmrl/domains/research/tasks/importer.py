"""`python -m wmrl.domains.research.tasks import FOLDER`: a prepared competition folder becomes a registered task.

Accepted layouts: ours (task.yaml, public/, private/), MLE-bench's prepared data
(prepared/public/ and prepared/private/test.csv, or public/ and private/ directly), or one flat
folder (description.md, train.csv, test.csv, sample_submission.csv, answers.csv). The files are
copied under `{task.cache_dir}/tasks/NAME/`, which the sandbox never mounts, and registered
there: every later run finds the task by name. Its leaderboard is built on first use.
"""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any, Dict, Optional

from wmrl.domains.research.tasks import tabular
from wmrl.domains.research.tasks.script import ANSWERS, PUBLIC
from wmrl.domains.research.tasks.spec import TaskError
from wmrl.domains.research.tasks.task_file import is_task_name, read_yaml

TASK_FIELDS = ("name", "kind", "metric", "target", "id_column", "time_limit_s", "description", "held_out")


def _layout(folder: Path) -> tuple[Path, Path]:
    """(directory of the public files, path of the answers file)."""
    for base in (folder, folder / "prepared"):
        if (base / "public").is_dir():
            answers = next((base / "private" / a for a in ANSWERS if (base / "private" / a).is_file()), None)
            if answers is None:
                raise TaskError(f"import {folder}: {base / 'private'} holds none of {', '.join(ANSWERS)}")
            return base / "public", answers
    if (folder / "answers.csv").is_file():
        return folder, folder / "answers.csv"
    raise TaskError(f"import {folder}: expected public/ and private/ (MLE-bench: prepared/public, prepared/private) "
                    f"or a flat folder with {', '.join(PUBLIC)} and answers.csv")


def _own_file(path: Path, folder: Path, max_mb: float) -> Path:
    """`path` if it is a regular file of `folder` itself (not a link, a FIFO or a device, nothing outside the
    folder) of at most `max_mb`; else a TaskError. What is copied from here is mounted for every agent to read:
    a link would publish whatever it points at (the host secret, another task's answers)."""
    if path.is_symlink() or not path.resolve().is_relative_to(folder):
        raise TaskError(f"import {folder}: {path.relative_to(folder)} links outside the folder; copy the file itself")
    if not stat.S_ISREG(path.stat().st_mode):
        raise TaskError(f"import {folder}: {path.relative_to(folder)} is not a regular file")
    tabular.check_size(path, max_mb, f"import {folder}")
    return path


def import_folder(folder: str | Path, task_cfg: Any, fields: Dict[str, Any]) -> Path:
    """Copy and register `folder` as a script task; returns the task.yaml written. Fields given
    override those of the folder's own task.yaml; the task's data is loaded once to check it."""
    import yaml

    from wmrl.domains.research.tasks.suite import load_suite

    folder = Path(folder).expanduser().resolve()
    if not folder.is_dir():
        raise TaskError(f"import: folder {str(folder)!r} does not exist")
    public, answers = _layout(folder)
    missing = [n for n in PUBLIC if not (public / n).is_file() and not (public / n).is_symlink()]
    if missing:
        raise TaskError(f"import {folder}: {public} lacks {', '.join(missing)}")
    max_mb = float(task_cfg.max_data_mb)
    sources = {f"public/{n}": _own_file(public / n, folder, max_mb) for n in PUBLIC}
    sources["private/answers.csv"] = _own_file(answers, folder, max_mb)
    doc: Dict[str, Any] = {}
    if (folder / "task.yaml").is_file() or (folder / "task.yaml").is_symlink():
        doc = read_yaml(_own_file(folder / "task.yaml", folder, max_mb), f"import {folder}: task.yaml") or {}
        if not isinstance(doc, dict):
            raise TaskError(f"import {folder}: task.yaml must be a mapping of fields, not {type(doc).__name__}")
    doc.update({k: v for k, v in fields.items() if v is not None})
    doc.setdefault("name", folder.name if folder.name != "prepared" else folder.parent.name)
    doc["name"] = str(doc["name"]).replace(" ", "_")
    if not is_task_name(doc["name"]):  # it becomes a folder name under the cache: nothing that leaves it
        raise TaskError(f"import {folder}: task name {doc['name']!r} must be letters, digits, _ or -; pass --name")
    if doc["name"] in _builtin_names():
        raise TaskError(f"import: {doc['name']!r} is a built-in task; pass --name")
    if "kind" not in doc:
        raise TaskError(f"import {folder}: say the task's kind (--kind classification|regression) or write it in task.yaml")
    doc.update(interface="script", data=".")
    cache_dir = Path(task_cfg.cache_dir).expanduser()
    dest = cache_dir / "tasks" / doc["name"]
    if dest.exists():
        raise TaskError(f"import: task {doc['name']!r} is already imported at {dest}; remove that folder to replace it")
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        (tmp / "public").mkdir(parents=True)
        (tmp / "private").mkdir(mode=0o700)
        for dest_name, source in sources.items():
            shutil.copyfile(source, tmp / dest_name, follow_symlinks=False)
        (tmp / "task.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        _check(tmp, task_cfg)
        os.rename(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load_suite(task_cfg).get(doc["name"])  # registered: found by name from now on
    return dest / "task.yaml"


def _check(folder: Path, task_cfg: Any) -> None:
    """Load the copied task as a run would (columns, ids, answers, classes) before registering it."""
    from wmrl.domains.research.tasks.script import ScriptTask
    from wmrl.domains.research.tasks.secret import host_secret
    from wmrl.domains.research.tasks.task_file import load_task_file

    cache_dir = Path(task_cfg.cache_dir).expanduser()
    spec = load_task_file(folder / "task.yaml", float(task_cfg.max_data_mb))
    task = ScriptTask(spec, host_secret(cache_dir, task_cfg.secret_seed), cache_dir, float(task_cfg.max_data_mb))
    task.splits()


def _builtin_names() -> set:
    from wmrl.domains.research.tasks.builtin import BUILTIN

    return set(BUILTIN)


def fields_from_args(args: Any) -> Dict[str, Optional[Any]]:
    return {"name": args.name, "kind": args.kind, "metric": args.metric, "target": args.target,
            "id_column": args.id_column, "time_limit_s": args.time_limit_s}
