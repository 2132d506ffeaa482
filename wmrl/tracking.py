"""Metrics to the experiment tracker, indexed by RL step (not Lightning's optimizer-step counter)."""
from __future__ import annotations

import math
from typing import Iterable

from lightning.pytorch.loggers import Logger


def log_metrics(loggers: Iterable[Logger], metrics: dict, step: int) -> None:
    """Floats only; None and NaN (undefined this step) are left out rather than logged."""
    clean = {k: float(v) for k, v in metrics.items() if v is not None and not (isinstance(v, float) and math.isnan(v))}
    for logger in loggers:
        logger.log_metrics(clean, step=step)
