"""What one execution of an agent's program produced, and the reward ladder on top of it."""
from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass
from typing import Any


class Status(str, enum.Enum):
    """How an execution ended, from worst to best for the agent."""

    MALFORMED = "malformed"  # no program could be read from the completion (e.g. no `build`)
    SYNTAX_ERROR = "syntax_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    NO_VALID_OUTPUT = "no_valid_output"  # ran, but its predictions are not a valid submission
    VALID = "valid"
    INFRA_ERROR = "infra_error"  # the sandbox failed, not the program: treated as missing


# Ladder from the WMRL paper; `valid` adds 0.5 * pos on top of its base.
LADDER = {
    Status.MALFORMED: 0.0,
    Status.SYNTAX_ERROR: 0.0,
    Status.RUNTIME_ERROR: 0.1,
    Status.TIMEOUT: 0.1,
    Status.NO_VALID_OUTPUT: 0.2,
    Status.VALID: 0.5,
}

# Order used by status heads and per-status tables; infra_error is never predicted.
PREDICTED_STATUSES = [
    Status.MALFORMED,
    Status.SYNTAX_ERROR,
    Status.RUNTIME_ERROR,
    Status.TIMEOUT,
    Status.NO_VALID_OUTPUT,
    Status.VALID,
]


def ladder_reward(status: Status | str, pos: float | None = None) -> float:
    """Reward of one execution; NaN for `infra_error` (missing, not a failure)."""
    status = Status(status)
    if status is Status.INFRA_ERROR:
        return math.nan
    if status is Status.VALID:
        if pos is None or not (0.0 <= pos <= 1.0):
            raise ValueError(f"a valid outcome needs pos in [0, 1], got {pos!r}")
        return 0.5 + 0.5 * pos
    return LADDER[status]


@dataclass
class Outcome:
    """The judged result of running one program on one task split."""

    task: str
    status: Status
    metric: str = ""
    value: float | None = None  # the task metric on the scored split, higher is better
    pos: float | None = None  # position in the task's reference leaderboard, in [0, 1]
    reward: float = math.nan
    wall_s: float = 0.0  # sandbox slot time this execution occupied
    fit_s: float | None = None
    predict_s: float | None = None
    stderr_tail: str = ""
    split: str = "val"
    attempts: int = 1

    def __post_init__(self) -> None:
        self.status = Status(self.status)

    @property
    def missing(self) -> bool:
        """The sandbox failed, not the program: no reward (`wmrl.domain.Outcome`)."""
        return self.status is Status.INFRA_ERROR

    def to_dict(self) -> dict:
        d = asdict(self)
        d["status"] = self.status.value
        if isinstance(self.reward, float) and math.isnan(self.reward):
            d["reward"] = None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Outcome":
        d = dict(d)
        if d.get("reward") is None:
            d["reward"] = math.nan
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass
class RawResult:
    """What the sandbox saw, before the host judges predictions against hidden labels.

    `status` is one of malformed/syntax_error (host pre-check), runtime_error, timeout,
    no_valid_output (e.g. not an estimator, unreadable predictions), infra_error, or
    valid meaning only "predictions came back" (the task then validates and scores them).
    """

    status: Status
    predictions: Any = None  # numpy array parsed without pickle, or None
    wall_s: float = 0.0
    fit_s: float | None = None
    predict_s: float | None = None
    stderr_tail: str = ""
    detail: str = ""  # one line for humans: why the status was given


def sandbox_error_line(status: Status, detail: str) -> str:
    """The line the sandbox appends to a failed execution's stderr: its verdict and why."""
    return f"[sandbox] {status.value}: {detail}"


def error_line(stderr_tail: str) -> str:
    """The line of an error an agent reads: the last non-empty line of stderr, at most 200 characters."""
    last = [line for line in (stderr_tail or "").strip().splitlines() if line.strip()][-1:]
    return last[0][:200] if last else ""


def render_observation(outcome: "Outcome", turn: int | None = None) -> str:
    """The feedback text an agent reads after a turn, for real and predicted outcomes alike."""
    head = f"[execution{'' if turn is None else f' of turn {turn}'}] status: {outcome.status.value}"
    if outcome.status is Status.VALID and outcome.value is not None:
        head += f"; {outcome.metric or 'score'} = {outcome.value:.4f}"
        if outcome.pos is not None:
            head += f"; leaderboard position = {outcome.pos:.2f}"
    elif error_line(outcome.stderr_tail):
        head += f"; error: {error_line(outcome.stderr_tail)}"
    return head
