"""Held-out evaluation: the policy on tasks it never trains on, executed for real on their hidden
test split. Its time is logged as `time/eval_s` and never counted as training cost."""
from __future__ import annotations

import math
from collections import defaultdict

from wmrl.rollout.collect import Rollout


class Evaluator:
    def __init__(self, rollout: Rollout, eval_tasks: list, eval_cfg, samples_to_keep: int = 16):
        self.rollout, self.tasks, self.cfg, self.keep = rollout, eval_tasks, eval_cfg, samples_to_keep

    def run(self, step: int) -> tuple[dict, list[dict]]:
        """(metrics, sample trajectories as plain dicts) of one evaluation after `step` RL steps."""
        batch = self.rollout.collect_eval(step, self.tasks, self.cfg.samples_per_task, self.cfg.split,
                                          self.cfg.temperature)
        per_task: dict[str, list[float]] = defaultdict(list)
        statuses = []
        for i, rec in enumerate(batch.records):
            if not bool(batch.valid[i]):
                continue
            per_task[rec.task].append(float(batch.real_reward[i]))
            statuses += [t.judgement.real.status.value for t in rec.turns]
        task_means = {t: sum(v) / len(v) for t, v in per_task.items()}
        metrics = {
            "eval/real_reward": sum(task_means.values()) / len(task_means) if task_means else math.nan,
            "eval/valid_rate": statuses.count("valid") / len(statuses) if statuses else math.nan,
            "eval/invalid_rate": 1 - statuses.count("valid") / len(statuses) if statuses else math.nan,
            "eval/executions": float(batch.stats["cost/real_executions"]),
            **{f"eval/task/{t}": m for t, m in task_means.items()},
        }
        return metrics, [r.to_dict() for r in batch.records[: self.keep]]
