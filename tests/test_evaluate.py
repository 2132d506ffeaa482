"""Held-out evaluation reports every family of tasks on its own (`eval/family/<name>`)."""
import math
from types import SimpleNamespace

import pytest
import torch

from wmrl.evaluate import Evaluator, stratified_mean_ci
from wmrl.tasks.spec import TaskSpec


def test_a_task_family_is_named_by_its_file_or_read_from_its_form():
    assert TaskSpec("a", "bundled:iris", "classification", "accuracy").task_family == "arrays"
    assert TaskSpec("b", "/data/churn.csv", "classification", "accuracy", target="y").task_family == "tables"
    assert TaskSpec("c", "/data/x.parquet", "regression", "r2", target="y").task_family == "tables"
    assert TaskSpec("d", "/tasks/loans", "classification", "roc_auc", interface="script").task_family == "scripts"
    assert TaskSpec("e", "bundled:iris", "classification", "accuracy", family="flowers").task_family == "flowers"


class FakeRollout:
    """Stands in for the rollout: the evaluation batch of fixed rewards per task."""

    def __init__(self, rewards):
        self.rewards = rewards

    def collect_eval(self, step, tasks, samples, split, temperature):
        rows = [(t, r) for t, rs in self.rewards.items() for r in rs]
        real = SimpleNamespace(status=SimpleNamespace(value="valid"))
        records = [SimpleNamespace(task=t, turns=[SimpleNamespace(judgement=SimpleNamespace(real=real))],
                                   to_dict=lambda: {}) for t, _ in rows]
        return SimpleNamespace(records=records, valid=torch.ones(len(rows), dtype=torch.bool),
                               real_reward=torch.tensor([r for _, r in rows]), stats={"cost/real_executions": len(rows)})


def test_each_family_gets_its_own_mean_and_interval_beside_the_overall_one():
    rewards = {"iris": [0.8, 0.6], "circles": [0.4, 0.6], "churn": [0.1, 0.3], "loans": [0.0, 0.2]}
    tasks = [SimpleNamespace(name="iris", family="arrays"), SimpleNamespace(name="circles", family="arrays"),
             SimpleNamespace(name="churn", family="tables"), SimpleNamespace(name="loans", family="scripts")]
    cfg = SimpleNamespace(samples_per_task=2, split="test", temperature=1.0)
    metrics, _ = Evaluator(FakeRollout(rewards), tasks, cfg).run(3)
    assert metrics["eval/real_reward"] == pytest.approx(0.375)
    assert metrics["eval/family/arrays"] == pytest.approx(0.6) and metrics["eval/family/tables"] == pytest.approx(0.2)
    assert metrics["eval/family/scripts"] == pytest.approx(0.1)
    want = stratified_mean_ci({"iris": rewards["iris"], "circles": rewards["circles"]})[1]
    assert metrics["eval/family/arrays_ci95"] == pytest.approx(want) and not math.isnan(want)


def test_a_task_file_may_name_its_family_and_a_bad_name_is_refused(tmp_path):
    from wmrl.tasks.spec import TaskError
    from wmrl.tasks.task_file import load_task_file

    (tmp_path / "t.csv").write_text("a,b,y\n1,x,0\n2,,1\n3,y,0\n4,x,1\n" * 10)
    good = tmp_path / "good.yaml"
    good.write_text("name: churn\ndata: t.csv\ntarget: y\nkind: classification\nfamily: customer_tables\n")
    assert load_task_file(good).task_family == "customer_tables"
    plain = tmp_path / "plain.yaml"
    plain.write_text("name: churn\ndata: t.csv\ntarget: y\nkind: classification\n")
    assert load_task_file(plain).task_family == "tables"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: churn\ndata: t.csv\ntarget: y\nkind: classification\nfamily: ../up\n")
    with pytest.raises(TaskError, match="family"):
        load_task_file(bad)
