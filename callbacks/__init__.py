"""The corrections as Lightning callbacks. Removing one from the config removes it from training."""
from __future__ import annotations

from typing import Any

from lightning.pytorch import Callback

from callbacks.debias import DebiasCallback
from callbacks.denoise import DenoiseCallback

__all__ = ["DebiasCallback", "DenoiseCallback", "correction_callbacks"]


def correction_callbacks(cfg: Any) -> list[Callback]:
    """The `callbacks` config section as callbacks, in the order they must run: debias, then denoise."""
    out: list[Callback] = []
    if cfg.debias is not None:
        out.append(DebiasCallback.from_config(cfg.debias))
    if cfg.denoise is not None:
        out.append(DenoiseCallback.from_config(cfg.denoise))
    return out
