"""Held-out evaluation: the policy on tasks it never trains on, executed for real on their hidden
test split. Its time is logged as `time/eval_s` and never counted as training cost.

Besides the mean over every held-out task, each family of tasks (`TaskSpec.task_family`: arrays, tables,
scripts, or the family a task file names) gets its own mean and 95 % interval, `eval/family/<name>`: a
policy that learned what the training tasks reward shows it on families the training set lacks. How a family's
programs end, as shares of its turns (`eval/status/<family>/<status>`), shows where two policies diverge. With
`eval.train_prompts`, the training tasks' own hidden split is scored too (`eval/train_prompts`): what the policy
learnt where it trained, against what it carried elsewhere."""
from __future__ import annotations

import math
from collections import defaultdict

from wmrl.rollout.collect import Rollout


def stratified_mean_ci(per_task: dict, z: float = 1.96) -> tuple[float, float]:
    """Mean over tasks of each task's mean reward, and the half-width of its 95 % interval.

    The tasks are fixed strata with equal weight 1/T, the samples of one task are i.i.d. draws of
    that task's reward: Var = sum_t s_t^2 / n_t / T^2 (s_t^2 the unbiased within-task variance).
    Pooling all samples into one variance would count the spread *between* task means as noise;
    the interval is about this task set, not about tasks in general. A task with fewer than two
    samples makes the width unknown (NaN).
    """
    means, var = [], 0.0
    for rewards in per_task.values():
        n = len(rewards)
        m = sum(rewards) / n
        means.append(m)
        var += sum((r - m) ** 2 for r in rewards) / (n - 1) / n if n > 1 else math.nan
    if not means:
        return math.nan, math.nan
    return sum(means) / len(means), z * math.sqrt(var) / len(means)


class Evaluator:
    """`eval_tasks`: the held-out suite (`eval/real_reward` and the rates are theirs). `transfer_tasks`: held-out
    tasks of other kinds, evaluated in the same batch and reported per task and per family only."""

    def __init__(self, rollout: Rollout, eval_tasks: list, eval_cfg, samples_to_keep: int = 16,
                 transfer_tasks: list = (), train_tasks: list = ()):
        self.rollout, self.tasks, self.cfg, self.keep = rollout, list(eval_tasks), eval_cfg, samples_to_keep
        self.transfer, self.train = list(transfer_tasks), list(train_tasks)

    def run(self, step: int) -> tuple[dict, list[dict]]:
        """(metrics, sample trajectories as plain dicts) of one evaluation after `step` RL steps."""
        batch = self.rollout.collect_eval(step, self.tasks, self.cfg.samples_per_task, self.cfg.split,
                                          self.cfg.temperature)
        batches = [batch]
        if self.transfer:  # its own stream: the suite's evaluation is the same with or without it
            batches.append(self.rollout.collect_eval(step, self.transfer, self.cfg.samples_per_task, self.cfg.split,
                                                     self.cfg.temperature, purpose="transfer"))
        trained, executions = {}, 0.0
        if self.train:  # the prompts it trained on, on their hidden split: its own stream
            b = self.rollout.collect_eval(step, self.train, self.cfg.train_prompts, self.cfg.split,
                                          self.cfg.temperature, purpose="train_prompts")
            trained["eval/train_prompts"], trained["eval/train_prompts_ci95"] = stratified_mean_ci(_per_task(b))
            executions = float(b.stats["cost/real_executions"])
        suite = {t.name for t in self.tasks}
        family_of = {t.name: t.family for t in self.tasks + self.transfer}
        per_task: dict[str, list[float]] = defaultdict(list)
        statuses = []
        family_statuses: dict[str, list[str]] = defaultdict(list)
        for b in batches:
            for i, rec in enumerate(b.records):
                if not bool(b.valid[i]):
                    continue
                per_task[rec.task].append(float(b.real_reward[i]))
                turns = [t.judgement.real.status.value for t in rec.turns]
                family_statuses[family_of[rec.task]] += turns
                if rec.task in suite:
                    statuses += turns
        task_means = {t: sum(v) / len(v) for t, v in per_task.items()}
        mean, half_width = stratified_mean_ci({t: v for t, v in per_task.items() if t in suite})
        metrics = {
            "eval/real_reward": mean,
            "eval/real_reward_ci95": half_width,  # half-width of the 95 % interval (task-stratified)
            "eval/samples": float(sum(len(v) for t, v in per_task.items() if t in suite)),
            "eval/valid_rate": statuses.count("valid") / len(statuses) if statuses else math.nan,
            "eval/invalid_rate": 1 - statuses.count("valid") / len(statuses) if statuses else math.nan,
            "eval/executions": executions + float(sum(b.stats["cost/real_executions"] for b in batches)),
            **trained,
            **{f"eval/task/{t}": m for t, m in task_means.items()},
        }
        families: dict[str, dict[str, list[float]]] = defaultdict(dict)
        for t in self.tasks + self.transfer:
            if t.name in per_task:
                families[t.family][t.name] = per_task[t.name]
        for family, tasks in sorted(families.items()):
            metrics[f"eval/family/{family}"], metrics[f"eval/family/{family}_ci95"] = stratified_mean_ci(tasks)
        for family, seen in sorted(family_statuses.items()):  # what the policy writes there: eval/status/<family>/<status>
            for status in sorted(set(seen)):
                metrics[f"eval/status/{family}/{status}"] = seen.count(status) / len(seen)
        return metrics, [r.to_dict() for r in batch.records[: self.keep]]


def _per_task(batch) -> dict[str, list[float]]:
    """Each task's real rewards in an evaluation batch (its valid rows)."""
    out: dict[str, list[float]] = defaultdict(list)
    for i, rec in enumerate(batch.records):
        if bool(batch.valid[i]):
            out[rec.task].append(float(batch.real_reward[i]))
    return out
