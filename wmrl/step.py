"""One RL step, top to bottom.

    collect        the DataModule: weight sync, rollouts (real, world model, anchors)   time/rollout_s
    debias         RolloutBatch -> RolloutBatch: corrected WM rewards and their variance  time/debias_s
    denoise        RolloutBatch -> RolloutBatch: per-trajectory loss weights              time/denoise_s
    update         GRPO on the batch                                                     time/policy_train_s
    world_model    the world model learns from the step's executions, fidelity measured  time/wm_train_s
    anchor_budget  the next step's anchor rate and guard flags from this step's anchors  time/anchor_budget_s
    cost           the step's cost and the run's totals (last: it times the whole step)

`Step` runs the stages after collection in this order, whatever order the callbacks were given in; a stage
that is None (its callback dropped, e.g. `callbacks.debias=null`) is skipped. Every metric of the step is
returned in one dict, which the module logs once at the RL step (`rl_step` = step + 1).

What a step hands the next one (the back-edges) is `Step.handoff`, a `Handoff` the DataModule passes, by
name, to the next collection (`Rollout.collect_train(..., handoff=)` -> `Environment`): the debiaser the
debias stage fitted corrects the scores the world model's feedback shows the agent, the world model the
world_model stage trained scores the next rollouts, the anchor budget the anchor_budget stage updated decides
the next rollouts' anchors. Nothing else crosses from one step to the next.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from wmrl.rollout import RolloutBatch

if TYPE_CHECKING:
    from wmrl.anchoring import AnchorBudget
    from wmrl.corrections import Debiaser
    from wmrl.domain import WorldModel

STAGES = ("collect", "debias", "denoise", "update", "world_model", "anchor_budget", "cost")
TIMERS = {"debias": "time/debias_s", "denoise": "time/denoise_s", "update": "time/policy_train_s",
          "world_model": "time/wm_train_s", "anchor_budget": "time/anchor_budget_s"}

Transform = Callable[[RolloutBatch], "tuple[RolloutBatch, dict[str, float]]"]  # a correction: new batch, metrics
Observer = Callable[[RolloutBatch], "dict[str, float]"]  # a stage that learns from the batch: its metrics


@dataclass
class Handoff:
    """What a step leaves the next step's collection, each part updated in place by the stage named."""

    world_model: "WorldModel | None" = None  # world_model stage -> scores the next rollouts (None: all executed)
    budget: "AnchorBudget | None" = None  # anchor_budget stage -> the next rollouts' anchors and guard flags
    debiaser: "Debiaser | None" = None  # debias stage -> corrects the scores shown in predicted feedback


@dataclass
class Step:
    update: Observer
    debias: Transform | None = None
    denoise: Transform | None = None
    world_model: Observer | None = None
    anchor_budget: Observer | None = None
    cost: Observer | None = None
    handoff: Handoff = field(default_factory=Handoff)  # what this step leaves the next collection

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, dict[str, float]]:
        """The stages after collection on one batch: (the batch the update trained on, every metric)."""
        metrics: dict[str, float] = {}
        self.ran: list[str] = ["collect"]
        batch = self._transform("debias", self.debias, batch, metrics)
        batch = self._transform("denoise", self.denoise, batch, metrics)
        self._observe("update", self.update, batch, metrics)
        self._observe("world_model", self.world_model, batch, metrics)
        self._observe("anchor_budget", self.anchor_budget, batch, metrics)
        self._observe("cost", self.cost, batch, metrics)  # last: the step's wall time ends here
        return batch, metrics

    def _transform(self, name: str, stage: Transform | None, batch: RolloutBatch, metrics: dict) -> RolloutBatch:
        if stage is None:
            return batch
        t0 = time.perf_counter()
        batch, out = stage(batch)
        metrics.update(out)
        metrics[TIMERS[name]] = time.perf_counter() - t0
        self.ran.append(name)
        return batch

    def _observe(self, name: str, stage: Observer | None, batch: RolloutBatch, metrics: dict) -> None:
        if stage is None:
            return
        t0 = time.perf_counter()
        metrics.update(stage(batch))
        if name in TIMERS:
            metrics[TIMERS[name]] = time.perf_counter() - t0
        self.ran.append(name)
