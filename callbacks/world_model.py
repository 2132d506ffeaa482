"""World-model training on the side of RL: after each step, the world model learns from the
step's newly executed programs and is scored against real execution on its anchors."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback

from wmrl.outcome import Status
from wmrl.rollout import RolloutBatch, TrajectoryRecord
from wmrl.tracking import log_metrics
from wmrl.world_model import WMQuery, WorldModel, reward_fidelity


class WorldModelCallback(Callback):
    """After the policy update of each batch: `world_model.update` on every executed program
    (warm-up, sandbox and anchor groups; infra errors left out), then fidelity on the anchored
    programs (`wm/spearman`, `wm/mae`, `wm/coverage_2sigma`, `wm/status_acc`), each anchored turn
    appended to `anchor_log` (jsonl) for reports. Logs `time/wm_train_s`, `wm/new_examples` and
    the world model's own training stats. The world model's state goes into checkpoints."""

    def __init__(self, world_model: WorldModel, suite, anchor_log: Path | None = None):
        self.world_model, self.suite, self.anchor_log = world_model, suite, anchor_log

    def examples(self, records: list[TrajectoryRecord]) -> list:
        """[(WMQuery, Outcome)] of every executed program, with the history its trajectory had."""
        out = []
        for rec in records:
            if not rec.executed:
                continue
            task = self.suite.get(rec.task)
            history = ""
            for turn in rec.turns:
                o = turn.judgement.real
                if o.status is not Status.INFRA_ERROR:
                    out.append((WMQuery(task.name, task.descriptor(), turn.program, history, task.metric), o))
                history = (history + "\n" + turn.judgement.observation).strip()
        return out

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: RolloutBatch, batch_idx: int) -> None:
        t0 = time.perf_counter()
        examples = self.examples(batch.records)
        stats = {"wm/new_examples": float(len(examples))}
        if examples:
            stats.update({k if k.startswith("wm/") else f"wm/{k}": float(v)
                          for k, v in self.world_model.update(examples).items()})
        stats.update(self.fidelity(batch))
        stats["time/wm_train_s"] = time.perf_counter() - t0
        log_metrics(trainer.loggers, stats, step=pl_module.rl_step)

    def fidelity(self, batch: RolloutBatch) -> dict:
        """The world model against real execution on every anchored program of the batch."""
        anchored = [r for r, ok in zip(batch.records, batch.valid.tolist()) if r.anchor and ok]
        turns = [t for r in anchored for t in r.turns]
        if not turns:
            return {}
        if self.anchor_log is not None:
            with open(self.anchor_log, "a") as f:
                for r in anchored:
                    for t in r.turns:
                        j = t.judgement
                        f.write(json.dumps({"step": batch.step, "task": r.task, "action_class": t.action_class,
                                            "wm_reward": j.wm_reward, "wm_var": j.wm_var, "real_reward": j.real.reward,
                                            "real_status": j.real.status.value, "wm_status": j.wm_status}) + "\n")
        js = [t.judgement for t in turns]
        return reward_fidelity([j.wm_reward for j in js], [j.wm_var for j in js], [j.real.reward for j in js],
                               [j.wm_status for j in js], [j.real.status.value for j in js])

    def state_dict(self) -> dict:
        return {"world_model": self.world_model.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.world_model.load_state_dict(state_dict["world_model"])
