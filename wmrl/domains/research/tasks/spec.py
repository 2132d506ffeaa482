"""What defines a task, independent of where it came from (built-in table, YAML file or task folder)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Tuple

KINDS = ("classification", "regression")
INTERFACES = ("estimator", "script")


class TaskError(ValueError):
    """A task that cannot be defined or found; the message names the bad field or name."""


@dataclass(frozen=True)
class TaskSpec:
    """Everything needed to build a task's data and score programs on it.

    `data` is `bundled:NAME` (a dataset shipped with scikit-learn), `synthetic:GENERATOR`
    (a scikit-learn generator called with `params` and a secret seed), a path to a CSV or
    Parquet file (needs `target`; the program gets a DataFrame) or an NPZ file (arrays `X`, `y`),
    or, for `interface: script`, a prepared task folder (see wmrl/domains/research/tasks/script.py).
    """

    name: str
    data: str
    kind: str
    metric: str
    time_limit_s: float = 10.0
    held_out: bool = False
    val: float = 0.15  # fraction of rows if < 1, else a row count
    test: float = 0.15  # ignored when `test_data` is given
    target: Optional[str] = None
    params: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""  # one sentence for the prompt: what the rows and the target are
    references: Optional[Tuple[str, ...]] = None  # reference programs to use; None = all for the kind
    interface: str = "estimator"  # estimator: build() returns an estimator; script: a program writes a submission
    id_column: Optional[str] = None  # a row id in tabular data: never a feature
    test_data: Optional[str] = None  # a second labelled file scored as the test split
    optional: bool = False  # registered but in no default train/eval list: used when named
    family: Optional[str] = None  # what kind of task it is, for per-family evaluation; None = from its form

    @property
    def task_family(self) -> str:
        """`family`, else the form of its data: scripts (a program writes a submission), tables (a CSV or
        Parquet file, a DataFrame with named, possibly categorical or blank columns) or arrays (numbers only)."""
        if self.family:
            return self.family
        if self.interface == "script":
            return "scripts"
        from wmrl.domains.research.tasks.tabular import is_table

        return "tables" if is_table(self.data) or self.data.startswith("generated-table:") else "arrays"
