"""Held-out evaluation on a schedule: before the first step, every N steps and after the last."""
from __future__ import annotations

import json
import math
import time
from typing import Any

from lightning.pytorch import Callback
from lightning.pytorch.loggers import MLFlowLogger

from wmrl.evaluate import Evaluator
from wmrl.generation import WeightSync
from wmrl.tracking import log_metrics


class EvaluationCallback(Callback):
    """Runs `evaluator` with the policy's current weights (pushed to the generator by `sync`) and
    logs `eval/...` and `time/eval_s` at the RL step; sample trajectories go to MLflow as
    samples/eval_step_N.json. Comes after the cost callback: evaluation is not training cost."""

    def __init__(self, evaluator: Evaluator, sync: WeightSync, every_n_steps: int, steps: int, at_start: bool):
        self.evaluator, self.sync = evaluator, sync
        self.every_n_steps, self.steps, self.at_start = every_n_steps, steps, at_start
        self.last = math.nan  # eval/real_reward of the latest evaluation
        self.metrics, self.last_step = {}, None  # the latest evaluation's metrics and step (progress bar)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.at_start and pl_module.rl_step == 0:
            self.evaluate(trainer, 0)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = pl_module.rl_step
        if step % self.every_n_steps == 0 or step == self.steps:
            self.evaluate(trainer, step)

    def evaluate(self, trainer: Any, step: int) -> None:
        t0 = time.perf_counter()
        self.sync(step)
        metrics, samples = self.evaluator.run(step)
        metrics["time/eval_s"] = time.perf_counter() - t0
        self.last = metrics["eval/real_reward"]
        self.metrics, self.last_step = dict(metrics), step
        log_metrics(trainer.loggers, metrics, step=step)
        for logger in trainer.loggers:
            if isinstance(logger, MLFlowLogger):
                logger.experiment.log_text(logger.run_id, json.dumps(samples, indent=1), f"samples/eval_step_{step:05d}.json")

    def state_dict(self) -> dict:
        return {"last": self.last}

    def load_state_dict(self, state_dict: dict) -> None:
        self.last = state_dict["last"]
