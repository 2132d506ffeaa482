"""What defines a task, independent of where it came from (built-in table or YAML file)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Tuple

KINDS = ("classification", "regression")


class TaskError(ValueError):
    """A task that cannot be defined or found; the message names the bad field or name."""


@dataclass(frozen=True)
class TaskSpec:
    """Everything needed to build a task's data and score programs on it.

    `data` is `bundled:NAME` (a dataset shipped with scikit-learn), `synthetic:GENERATOR`
    (a scikit-learn generator called with `params` and a secret seed), or a path to a
    CSV (needs `target`) or NPZ (arrays `X` and `y`) file.
    """

    name: str
    data: str
    kind: str
    metric: str
    time_limit_s: float = 10.0
    held_out: bool = False
    val: float = 0.15  # fraction of rows if < 1, else a row count
    test: float = 0.15
    target: Optional[str] = None
    params: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""  # one sentence for the prompt: what the rows and the target are
    references: Optional[Tuple[str, ...]] = None  # reference programs to use; None = all for the kind
