"""Held-out evaluation reports every family of tasks on its own (`eval/family/<name>`)."""
import math
from types import SimpleNamespace

import pytest
import torch

from wmrl.evaluate import Evaluator, stratified_mean_ci
from wmrl.domains.research.tasks.spec import TaskSpec


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

    def collect_eval(self, step, tasks, samples, split, temperature, purpose="eval"):
        self.purposes = getattr(self, "purposes", []) + [purpose]
        names = {t.name for t in tasks}
        rows = [(t, r) for t, rs in self.rewards.items() if t in names for r in rs]
        def real(r):  # a zero reward is a malformed program
            return SimpleNamespace(status=SimpleNamespace(value="valid" if r > 0 else "malformed"))
        records = [SimpleNamespace(task=t, turns=[SimpleNamespace(judgement=SimpleNamespace(real=real(r)))],
                                   to_dict=lambda: {}) for t, r in rows]
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
    from wmrl.domains.research.tasks.spec import TaskError
    from wmrl.domains.research.tasks.task_file import load_task_file

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


def test_the_built_in_table_tasks_are_a_held_out_family_of_dataframes_with_blanks(tmp_path):
    """loan_table and house_table: what no training task is (a DataFrame with categorical columns and empty
    cells, ROC AUC and RMSE), optional and held out, reported as eval/family/tables."""
    from wmrl.config import load_config
    from wmrl.domains.research.tasks import load_suite

    cfg = load_config(["task.eval=[loan_table,house_table]", f"task.cache_dir={tmp_path}", "task.secret_seed=s"])
    suite = load_suite(cfg.task)
    for task in suite.eval_tasks():
        assert task.family == "tables" and task.held_out
        X = task.splits().X_train
        import pandas as pd

        categorical = [c for c in X.columns if not pd.api.types.is_numeric_dtype(X[c])]
        assert hasattr(X, "columns") and X.isna().any().any() and categorical
    default = load_suite(load_config([f"task.cache_dir={tmp_path}", "task.secret_seed=s"]).task)
    assert not {"loan_table", "house_table"} & {t.name for t in default.eval_tasks() + default.train_tasks()}


def test_transfer_tasks_are_evaluated_beside_the_suite_and_kept_out_of_its_reward():
    rewards = {"iris": [0.8, 0.6], "churn": [0.1, 0.3]}
    cfg = SimpleNamespace(samples_per_task=2, split="test", temperature=1.0)
    rollout = FakeRollout(rewards)
    metrics, _ = Evaluator(rollout, [SimpleNamespace(name="iris", family="arrays")], cfg,
                           transfer_tasks=[SimpleNamespace(name="churn", family="tables")]).run(1)
    assert rollout.purposes == ["eval", "transfer"]  # its own stream: the suite evaluates the same without it
    assert metrics["eval/real_reward"] == pytest.approx(0.7) and metrics["eval/samples"] == 2  # the suite's alone
    assert metrics["eval/family/tables"] == pytest.approx(0.2) and metrics["eval/task/churn"] == pytest.approx(0.2)


def test_a_transfer_task_may_not_be_trained_on_or_in_the_suite(tmp_path):
    from wmrl.config import load_config
    from wmrl.domains.research.tasks import load_suite
    from wmrl.domains.research.tasks.spec import TaskError

    base = [f"task.cache_dir={tmp_path}", "task.secret_seed=s"]
    assert [t.name for t in load_suite(load_config(base + ["task.transfer=[loan_table]"]).task).transfer_tasks()] == ["loan_table"]
    with pytest.raises(TaskError, match="task.transfer"):
        load_suite(load_config(base + ["task.eval=[iris]", "task.transfer=[iris]"]).task)


def test_each_family_reports_how_its_programs_ended_transfer_tasks_included():
    """eval/status/<family>/<status>: the share of a family's turns with that status; a transfer family's
    programs count there (and not in the suite's valid rate)."""
    rewards = {"iris": [0.8, 0.6, 0.0, 0.5], "churn": [0.0, 0.0, 0.0, 0.3]}
    cfg = SimpleNamespace(samples_per_task=4, split="test", temperature=1.0)
    metrics, _ = Evaluator(FakeRollout(rewards), [SimpleNamespace(name="iris", family="arrays")], cfg,
                           transfer_tasks=[SimpleNamespace(name="churn", family="tables")]).run(0)
    assert metrics["eval/status/arrays/valid"] == pytest.approx(0.75)
    assert metrics["eval/status/arrays/malformed"] == pytest.approx(0.25)
    assert metrics["eval/status/tables/malformed"] == pytest.approx(0.75)
    assert metrics["eval/valid_rate"] == pytest.approx(0.75)  # the suite's own


def test_training_prompts_are_scored_on_their_hidden_split_only_when_asked():
    """eval/train_prompts: the real reward where the policy trained, on its own stream, apart from the held-out
    mean (a policy that learnt the training tasks but not research shows a gap between the two)."""
    rewards = {"iris": [0.8, 0.6], "digits": [0.9, 0.7], "wine": [0.5, 0.5]}
    cfg = SimpleNamespace(samples_per_task=2, split="test", temperature=1.0, train_prompts=2)
    rollout = FakeRollout(rewards)
    trained = [SimpleNamespace(name="digits", family="arrays"), SimpleNamespace(name="wine", family="arrays")]
    metrics, _ = Evaluator(rollout, [SimpleNamespace(name="iris", family="arrays")], cfg, train_tasks=trained).run(0)
    assert metrics["eval/train_prompts"] == pytest.approx(0.65) and metrics["eval/real_reward"] == pytest.approx(0.7)
    assert metrics["eval/family/arrays"] == pytest.approx(0.7)  # training prompts are no held-out family
    assert rollout.purposes == ["eval", "train_prompts"] and metrics["eval/executions"] == 6
    plain, _ = Evaluator(FakeRollout(rewards), [SimpleNamespace(name="iris", family="arrays")], cfg).run(0)
    assert "eval/train_prompts" not in plain
