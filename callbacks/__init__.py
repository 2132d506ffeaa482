"""Lightning callbacks: the faces of the step's stages (`wmrl.step`: debias, denoise, world-model training,
the anchor budget, cost; each keeps its state in checkpoints, and removing one removes its stage), held-out
evaluation after the step, and the per-step checkpoint."""
from __future__ import annotations

from typing import Any

from lightning.pytorch import Callback

from callbacks.budget import AnchorBudgetCallback
from callbacks.cost import CostCallback
from callbacks.debias import DebiasCallback
from callbacks.denoise import DenoiseCallback
from callbacks.evaluation import EvaluationCallback
from callbacks.world_model import WorldModelCallback
from wmrl.corrections import Debiaser
from wmrl.step import Handoff, Observer, Step

__all__ = ["AnchorBudgetCallback", "CostCallback", "DebiasCallback", "DenoiseCallback", "EvaluationCallback", "WorldModelCallback",
           "correction_callbacks", "step_of"]

STAGE_CALLBACKS = {"debias": DebiasCallback, "denoise": DenoiseCallback, "world_model": WorldModelCallback,
                   "anchor_budget": AnchorBudgetCallback, "cost": CostCallback}


def correction_callbacks(cfg: Any) -> tuple[Debiaser | None, list[Callback]]:
    """The `callbacks` config section as (the debiaser, the correction callbacks). The debias callback trains the debiaser; the environment uses
    the same one for the score it shows the agent; denoising reads what debiasing wrote into the
    batch (`reward_var`, `wm_corrected`)."""
    debiaser = Debiaser.from_config(cfg.debias) if cfg.debias is not None else None
    out: list[Callback] = []
    if debiaser is not None:
        out.append(DebiasCallback(debiaser, table_every=cfg.debias.table_every,
                                   correct_decided=cfg.debias.correct_decided))
    if cfg.denoise is not None:
        out.append(DenoiseCallback.from_config(cfg.denoise))
    return debiaser, out


def step_of(callbacks: list, update: Observer, handoff: Handoff | None = None) -> Step:
    """The step made of `callbacks` (those the trainer runs): each stage is the callback of its kind, if there
    is one (at most one of each); the order is the step's, whatever the list's. `handoff`: what it leaves the
    next collection (the objects those callbacks update)."""
    found: dict[str, Any] = {}
    for cb in callbacks:
        for name, kind in STAGE_CALLBACKS.items():
            if isinstance(cb, kind):
                if name in found:
                    raise ValueError(f"two {kind.__name__}s among the callbacks: a step has one {name} stage")
                found[name] = cb
    return Step(update=update, handoff=handoff or Handoff(), **found)
