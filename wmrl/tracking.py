"""Metrics to the experiment tracker, indexed by RL step (not Lightning's optimizer-step counter)."""
from __future__ import annotations

import math
from typing import Iterable

from lightning.pytorch.loggers import Logger


def log_metrics(loggers: Iterable[Logger], metrics: dict, step: int) -> None:
    """Floats only; None, NaN and infinities (undefined this step, e.g. an interval on too few pairs)
    are left out rather than logged (MLflow would store an infinity as ±1.8e308)."""
    clean = {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}
    for logger in loggers:
        logger.log_metrics(clean, step=step)
