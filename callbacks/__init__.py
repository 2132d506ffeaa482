"""Lightning callbacks: the corrections (removing one from the config removes it from training),
world-model training, the anchor budget, step cost accounting and held-out evaluation."""
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

__all__ = ["AnchorBudgetCallback", "CostCallback", "DebiasCallback", "DenoiseCallback", "EvaluationCallback", "WorldModelCallback",
           "correction_callbacks"]


def correction_callbacks(cfg: Any) -> tuple[Debiaser | None, list[Callback]]:
    """The `callbacks` config section as (the debiaser, the correction callbacks in the order they
    must run: debias, then denoise). The debias callback trains the debiaser; the environment uses
    the same one for the score it shows the agent; denoising reads what debiasing wrote into the
    batch (`reward_var`, `wm_corrected`)."""
    debiaser = Debiaser.from_config(cfg.debias) if cfg.debias is not None else None
    out: list[Callback] = []
    if debiaser is not None:
        out.append(DebiasCallback(debiaser, table_every=cfg.debias.table_every))
    if cfg.denoise is not None:
        out.append(DenoiseCallback.from_config(cfg.denoise))
    return debiaser, out
