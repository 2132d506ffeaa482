"""The step's `cost` stage (`wmrl.step`), its last: what the step cost (collection, corrections, update, world-model
training) and the run's cumulative real executions, sandbox slot-seconds and training seconds."""
from __future__ import annotations

import time
from lightning.pytorch import Callback

from wmrl import distributed
from wmrl.rollout import RolloutBatch

CUMULATIVE = ("cost/real_executions", "cost/sandbox_slot_s")


class CostCallback(Callback):
    """The last stage of `wmrl.step.Step` (`__call__`, returns its metrics). `time/step_s` = collection wall
    time + wall time from the end of collection to here; evaluation and checkpointing are not training cost.

    Returns every rollout measurement of the batch (`time/generation_s`, `time/env_real_s`, ...),
    `time/step_s`, `throughput/steps_per_s` and the cumulative totals `cost/real_executions`,
    `cost/sandbox_slot_s`, `cost/train_s`. Under DDP the step is every rank's: counts and slot-seconds are
    summed over ranks, component times are the slowest rank's, rates are recomputed from the summed counts, a
    metric a rank lacks is combined over the others (`ddp/missing_metrics` counts it), and `time/step_s` is rank
    0's (it waits for the others at every gather; another rank's would also count its wait for rank 0's evaluation)."""

    def __init__(self):
        self.totals = {**{k: 0.0 for k in CUMULATIVE}, "cost/train_s": 0.0}

    def __call__(self, batch: RolloutBatch) -> dict[str, float]:
        step_s = batch.stats["time/rollout_s"] + (time.perf_counter() - batch.collected_at)
        ranks = distributed.gather({**batch.stats, "time/step_s": step_s})
        stats = distributed.combine_stats(ranks)  # explicit rules per metric (distributed.RATES); none is lost
        step_s = ranks[0]["time/step_s"]
        del stats["time/step_s"]
        for k in CUMULATIVE:
            self.totals[k] += stats.pop(k)
        self.totals["cost/train_s"] += step_s
        return {**stats, **self.totals, "time/step_s": step_s, "throughput/steps_per_s": 1.0 / max(step_s, 1e-9)}

    def state_dict(self) -> dict:
        return {"totals": dict(self.totals)}

    def load_state_dict(self, state_dict: dict) -> None:
        self.totals = dict(state_dict["totals"])
