"""What every world model offers: predict outcomes of programs, learn from real executions.

A world model answers a batch of `WMQuery`s with one `WMPrediction` (tensors over the batch).
Implementations: `LearnedEnsembleWM` (ensemble.py) and `PromptedLMWM` (prompted.py: the frozen base
LLM answering in JSON, or scored answer by answer), whose `update` trains nothing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol, Sequence, runtime_checkable

import numpy as np
import torch

from collections import deque

from wmrl.domains.research.outcome import LADDER, PREDICTED_STATUSES, Outcome, Status, error_line, render_observation
from wmrl.domains.research.world_model.static import decided_status

N_STATUS = len(PREDICTED_STATUSES)
VALID_INDEX = PREDICTED_STATUSES.index(Status.VALID)
# ladder base of each predicted status, in PREDICTED_STATUSES order
LADDER_BASE = torch.tensor([LADDER[s] for s in PREDICTED_STATUSES])


@dataclass(frozen=True)
class WMQuery:
    """One program to predict: the task it runs on and what the agent has seen so far."""

    task: str
    descriptor: str  # one line, e.g. "task=wine kind=classification n=124 d=13 classes=3 metric=accuracy"
    program: str
    history: str = ""  # earlier turns' observations
    metric: str = ""  # metric name shown in the predicted observation
    interface: str = "estimator"  # what the program must define: estimator (build()) | script (writes a submission)


def reward_moments(status_probs: torch.Tensor, pos_mean: torch.Tensor, pos_var: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and variance of the ladder reward under a status distribution and a Gaussian pos.

    status_probs [..., 6] over PREDICTED_STATUSES; pos_mean, pos_var [...].
    E[r] = sum_s p_s m_s with m_valid = 0.5 + 0.5 E[pos]; Var by total variance:
    sum_s p_s (m_s^2 + v_s) - E[r]^2 with v_valid = 0.25 Var[pos], v_s = 0 otherwise.
    """
    base = LADDER_BASE.to(status_probs)
    m = base.expand_as(status_probs).clone()
    m[..., VALID_INDEX] = 0.5 + 0.5 * pos_mean
    v = torch.zeros_like(status_probs)
    v[..., VALID_INDEX] = 0.25 * pos_var
    mean = (status_probs * m).sum(-1)
    var = (status_probs * (m * m + v)).sum(-1) - mean * mean
    return mean, var.clamp_min(0.0)


@dataclass
class WMPrediction:
    """Predicted outcomes of a batch of queries; every tensor is [B] unless noted."""

    status_probs: torch.Tensor  # [B, 6] over PREDICTED_STATUSES
    pos_mean: torch.Tensor  # predicted leaderboard position if valid (0 where the precheck decided)
    pos_std: torch.Tensor  # its total std: aleatoric + ensemble spread
    reward_mean: torch.Tensor  # E[ladder reward]
    reward_var: torch.Tensor  # Var[ladder reward]: total variance + ensemble disagreement
    value_mean: torch.Tensor  # predicted task metric if valid; NaN where unknown
    tasks: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)  # metric names, per query
    prechecked: torch.Tensor | None = None  # [B] bool; status decided by the deterministic check
    errors: list[str] = field(default_factory=list)  # predicted error line per query ("" for none), as stderr shows it
    malformed: torch.Tensor | None = None  # [B] bool: an LM's answer could not be parsed (None: no answers parsed)

    def __len__(self) -> int:
        return int(self.reward_mean.shape[0])

    @property
    def status(self) -> list[Status]:
        """The predicted status (argmax) of each query."""
        return [PREDICTED_STATUSES[i] for i in self.status_probs.argmax(-1).tolist()]

    def outcome(self, i: int) -> Outcome:
        """Query i's predicted outcome, as an `Outcome` (reward = the predicted mean)."""
        status = PREDICTED_STATUSES[int(self.status_probs[i].argmax())]
        value = pos = None
        if status is Status.VALID:
            pos = float(self.pos_mean[i].clamp(0.0, 1.0))
            v = float(self.value_mean[i])
            value = None if math.isnan(v) else v
        return Outcome(task=self.tasks[i] if self.tasks else "", status=status,
                       metric=self.metrics[i] if self.metrics else "", value=value, pos=pos,
                       reward=float(self.reward_mean[i]), stderr_tail=self.errors[i] if self.errors else "")

    def outcomes(self) -> list[Outcome]:
        return [self.outcome(i) for i in range(len(self))]

    def observations(self, metric_names: Sequence[str] | None = None, turn: int | None = None) -> list[str]:
        """The predicted outcomes rendered exactly like real feedback (`render_observation`)."""
        obs = []
        for i in range(len(self)):
            o = self.outcome(i)
            if metric_names is not None and metric_names[i]:
                o.metric = metric_names[i]
            obs.append(render_observation(o, turn=turn))
        return obs

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("status_probs", "pos_mean", "pos_std", "reward_mean",
                                               "reward_var", "value_mean")}


@runtime_checkable
class WorldModel(Protocol):
    """Predicts execution outcomes; optionally learns from real executions."""

    def predict(self, queries: list[WMQuery]) -> WMPrediction: ...

    def update(self, examples: list[tuple[WMQuery, Outcome]]) -> dict[str, float]: ...

    def value_at(self, task: str, pos: float) -> float:
        """The task metric's value at a leaderboard position (NaN when unknown for this task)."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...

    def save(self, path: str) -> None: ...


def prechecked_prediction(status: Status) -> tuple[torch.Tensor, float]:
    """One-hot status probabilities and the exact reward of a deterministically decided program."""
    probs = torch.zeros(N_STATUS)
    probs[PREDICTED_STATUSES.index(status)] = 1.0
    return probs, LADDER[status]


def precheck_queries(queries: Sequence[WMQuery]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[str]]:
    """The deterministic checks over a batch, before any model is asked: (status probabilities [B, S], exact
    reward [B], decided [B] bool, error line per query). Undecided rows are zeros, False and ""."""
    b = len(queries)
    probs, reward = torch.zeros(b, N_STATUS), torch.zeros(b)
    decided, errors = torch.zeros(b, dtype=torch.bool), [""] * b
    for i, q in enumerate(queries):
        status, detail = decided_status(q.program, q.interface)  # syntax, malformed, names, imports
        if status is not None:  # exact, zero variance
            probs[i], reward[i] = prechecked_prediction(status)
            decided[i], errors[i] = True, error_line(detail)
    return probs, reward, decided, errors


VALUE_POINTS = 256  # (pos, value) pairs kept per task to show a predicted position as a metric value


class ValueTable:
    """Per task, the metric's name and recent (leaderboard position, metric value) points of real valid
    executions: what turns a predicted position into a metric value shown to the agent. Both world
    models keep one."""

    def __init__(self) -> None:
        self.values: dict[str, deque] = {}
        self.metric_names: dict[str, str] = {}

    def learn(self, q: WMQuery, o: Outcome) -> None:
        if o.metric:
            self.metric_names[q.task] = o.metric
        if o.status is Status.VALID and o.value is not None and o.pos is not None and math.isfinite(o.value):
            self.values.setdefault(q.task, deque(maxlen=VALUE_POINTS)).append((float(o.pos), float(o.value)))

    def value_at(self, task: str, pos: float) -> float:
        """Metric value at a leaderboard position, interpolated from this task's real executions; NaN without."""
        points = self.values.get(task)
        if not points:
            return math.nan
        arr = np.array(sorted(points))
        return float(np.interp(pos, arr[:, 0], arr[:, 1]))

    def shown(self, queries: Sequence[WMQuery], pos_mean: torch.Tensor) -> tuple[list[str], torch.Tensor]:
        """Each query's metric name and the metric value at its predicted position."""
        metrics = [q.metric or self.metric_names.get(q.task, "") for q in queries]
        return metrics, torch.tensor([self.value_at(q.task, float(pos_mean[i])) for i, q in enumerate(queries)])

    def state_dict(self) -> dict:
        return {"values": {k: [list(p) for p in v] for k, v in self.values.items()}, "metric_names": dict(self.metric_names)}

    def load_state_dict(self, state: dict) -> None:
        self.values = {k: deque((tuple(p) for p in v), maxlen=VALUE_POINTS) for k, v in state["values"].items()}
        self.metric_names = dict(state["metric_names"])
