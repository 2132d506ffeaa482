"""The one place a `world_model` config section becomes a world model."""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

import torch

from wmrl.domains.research.world_model.base import WorldModel
from wmrl.domains.research.world_model.ensemble import LearnedEnsembleWM, world_model_config
from wmrl.domains.research.world_model.prompted import PromptedLMWM

# the `kind` a saved state records -> its class
WORLD_MODELS = {LearnedEnsembleWM.kind: LearnedEnsembleWM, PromptedLMWM.kind: PromptedLMWM}


def load_world_model(path: str, wm_cfg: Any = None) -> WorldModel:
    """A saved world model; the running config may change its non-architecture keys (lr, replay, ...)."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    kind = state.get("kind", LearnedEnsembleWM.kind)
    if kind not in WORLD_MODELS:
        raise ValueError(f"{path}: unknown world model kind {kind!r}; known: {', '.join(WORLD_MODELS)}")
    overrides = None
    if wm_cfg is not None:
        overrides = {k: v for k, v in asdict(world_model_config(wm_cfg)).items() if k != "init"}
    return WORLD_MODELS[kind].from_state(state, overrides)


def make_world_model(wm_cfg: Any, seed: int, base_model: str | None = None) -> WorldModel:
    """`world_model.kind=learned`: a fresh learned ensemble from `wm_cfg` (its initial weights a function of
    `seed`), or the saved model at `wm_cfg.init`. `kind=prompted`: the frozen LM at `wm_cfg.model`, else at
    `base_model` (the policy's own checkpoint, loaded apart from the policy so that it stays frozen)."""
    cfg = world_model_config(wm_cfg)
    if cfg.kind == "prompted":
        return PromptedLMWM.from_config(cfg, base_model)
    if cfg.init:
        return load_world_model(cfg.init, cfg)
    return LearnedEnsembleWM(cfg, seed=seed)
