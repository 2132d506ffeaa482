"""A world model with a known class-correlated error: the benchmarks' correlated scenario.

Wraps any world model and adds `bias[class]` to the predicted reward of every program whose
action class (the estimator family `build()` returns) is in `bias`: the error one global
debiasing map cannot undo, since inside a GRPO group it reorders siblings. Installed around the
real world model by `benchmarks/train_biased.py`; the trainer itself never knows it is there.
"""
from __future__ import annotations

import torch

from wmrl.domains.research.outcome import Outcome
from wmrl.domains.research.tasks.action import action_class
from wmrl.domains.research.world_model.base import WMPrediction, WMQuery, WorldModel


class BiasedWorldModel:
    def __init__(self, inner: WorldModel, bias: dict[str, float]):
        self.inner, self.bias = inner, dict(bias)

    def predict(self, queries: list[WMQuery]) -> WMPrediction:
        pred = self.inner.predict(queries)
        offset = torch.tensor([self.bias.get(action_class(q.program), 0.0) for q in queries], dtype=pred.reward_mean.dtype)
        pred.reward_mean = pred.reward_mean + offset
        return pred

    def update(self, examples: list[tuple[WMQuery, Outcome]]) -> dict[str, float]:
        return self.inner.update(examples)

    def value_at(self, task: str, pos: float) -> float:
        return self.inner.value_at(task, pos)

    def state_dict(self) -> dict:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.inner.load_state_dict(state)

    def save(self, path: str) -> None:
        self.inner.save(path)
