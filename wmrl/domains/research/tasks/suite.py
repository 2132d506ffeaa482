"""The task registry: built-in tasks, imported task folders and YAML task files, bound to the host secret."""
from __future__ import annotations

import difflib
import warnings
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from wmrl.domains.research.tasks import tabular
from wmrl.domains.research.tasks.builtin import BUILTIN
from wmrl.domains.research.tasks.script import ScriptTask
from wmrl.domains.research.tasks.secret import host_secret
from wmrl.domains.research.tasks.spec import TaskError, TaskSpec
from wmrl.domains.research.tasks.task import Task
from wmrl.domains.research.tasks.task_file import load_task_file


class TaskSuite:
    """Tasks by name, and which of them are for training and which for evaluation."""

    def __init__(self, tasks: Dict[str, Task], train: List[str], eval: List[str], transfer: List[str] = ()):
        self._tasks = tasks
        for name in [*train, *eval, *transfer]:
            self.get(name)
        overlap = sorted(set(train) & set(eval))
        if overlap:
            warnings.warn(f"tasks {overlap} are used for both training and evaluation")
        if set(transfer) & (set(train) | set(eval)):
            raise TaskError(f"task.transfer {sorted(set(transfer) & (set(train) | set(eval)))} must be tasks neither "
                            "trained on nor in task.eval: transfer is measured on tasks of other kinds")
        self._train, self._eval, self._transfer = list(train), list(eval), list(transfer)

    def get(self, name: str) -> Task:
        if name not in self._tasks:
            near = difflib.get_close_matches(name, self._tasks, n=3, cutoff=0.4)
            hint = f"closest: {', '.join(near)}" if near else f"valid: {', '.join(self._tasks)}"
            raise TaskError(f"unknown task {name!r} ({hint})")
        return self._tasks[name]

    def names(self) -> List[str]:
        return list(self._tasks)

    def train_tasks(self) -> List[Task]:
        return [self._tasks[n] for n in self._train]

    def eval_tasks(self) -> List[Task]:
        return [self._tasks[n] for n in self._eval]

    def transfer_tasks(self) -> List[Task]:
        """Held-out tasks of other kinds, evaluated beside `eval_tasks` and reported per family only."""
        return [self._tasks[n] for n in self._transfer]

    def private_paths(self) -> List[str]:
        """Host paths holding task data or answers, which the sandbox must hide from programs."""
        return sorted({p for task in self for p in task.private_paths()})

    def __iter__(self):
        return iter(self._tasks.values())

    def __len__(self) -> int:
        return len(self._tasks)


def load_suite(task_cfg: Optional[Any] = None) -> TaskSuite:
    """The suite described by a `task` config section (TaskConfig or its DictConfig; None = defaults).

    `train` defaults to every task not held out and `eval` to the held-out ones; optional tasks
    (the built-in script tasks, imported folders) are used only where named.
    """
    def get(key: str, default: Any) -> Any:
        if isinstance(task_cfg, Mapping):  # a dict or an OmegaConf DictConfig
            return task_cfg.get(key, default)
        return getattr(task_cfg, key, default)

    cache_dir = Path(get("cache_dir", "~/.cache/wmrl")).expanduser()
    secret = host_secret(cache_dir, get("secret_seed", None))
    max_mb = float(get("max_data_mb", tabular.DEFAULT_MAX_MB))
    specs: Dict[str, TaskSpec] = dict(BUILTIN)
    for file in [*imported_task_files(cache_dir), *(get("files", []) or [])]:
        spec = load_task_file(file, max_mb)
        if spec.name in specs:
            raise TaskError(f"task file {file}: field 'name': {spec.name!r} is already a task")
        specs[spec.name] = spec
    tasks = {name: (ScriptTask if spec.interface == "script" else Task)(spec, secret, cache_dir, max_mb)
             for name, spec in specs.items()}
    train = list(get("train", []) or []) or [n for n, s in specs.items() if not s.held_out and not s.optional]
    eval_ = list(get("eval", []) or []) or [n for n, s in specs.items() if s.held_out and not s.optional]
    return TaskSuite(tasks, train, eval_, list(get("transfer", []) or []))


def imported_task_files(cache_dir: Path) -> List[Path]:
    """task.yaml of every folder `python -m wmrl.domains.research.tasks import` registered under the cache dir."""
    return sorted((Path(cache_dir) / "tasks").glob("*/task.yaml"))
