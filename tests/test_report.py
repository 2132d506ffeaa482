"""The end-of-run summary, the run report's figures and the step progress line, on a hand-made run
history (hand-computed numbers); the same on real runs is in test_train_e2e.py."""
import io
import json
from types import SimpleNamespace

import matplotlib.image
import pytest

from callbacks.cost import CostCallback
from callbacks.evaluation import EvaluationCallback
from callbacks.progress import StepProgressBar
from wmrl import summary
from wmrl.report import write_report
from wmrl.report import figures
from wmrl.report.data import RunData, absolute_tracking_uri, eval_ci, eval_interval

CFG = {"name": "t", "rl": {"steps": 2}, "rollout": {"groups_per_step": 2, "group_size": 4, "turns": 2}}
HISTORY = {
    "time/step_s": {1: 10.0, 2: 6.0}, "time/generation_s": {1: 2.0, 2: 2.0}, "time/env_real_s": {1: 4.0, 2: 1.0},
    "time/env_wm_s": {1: 0.0, 2: 0.5}, "time/wm_train_s": {1: 1.0, 2: 1.0}, "time/policy_train_s": {1: 2.0, 2: 1.0},
    "cost/real_executions": {1: 16.0, 2: 20.0}, "cost/sandbox_slot_s": {1: 5.0, 2: 6.0},
    "eval/real_reward": {0: 0.4, 2: 0.6}, "eval/task/a": {0: 0.3, 2: 0.5}, "eval/task/b": {0: 0.5, 2: 0.7},
    "reward/train_mean": {1: 0.2, 2: 0.3},
    "wm/spearman": {1: 0.6, 2: 0.8}, "wm/mae": {1: 0.2, 2: 0.1}, "wm/coverage_2sigma": {1: 0.5, 2: 1.0},
    "env/anchor_rate": {1: 0.5, 2: 0.25}, "guard/flagged": {1: 0.0, 2: 1.0},
}
PAIRS = [{"task": "a", "action_class": "svm", "wm_reward": 0.9, "real_reward": 0.5},
         {"task": "a", "action_class": "svm", "wm_reward": 0.7, "real_reward": 0.5},
         {"task": "b", "action_class": "knn", "wm_reward": 0.4, "real_reward": 0.5}]
T_975_1 = 12.7062047  # Student t, 0.975 quantile, 1 degree of freedom


def _run(history=HISTORY, pairs=PAIRS):
    return RunData("rid", "sqlite:////x/ml.db", None, CFG, history, "FINISHED", pairs)


def test_held_out_interval_prefers_the_logged_half_width_else_spans_the_tasks():
    assert eval_ci({"eval/real_reward": 0.6, "eval/real_reward_ci95": 0.05}) == pytest.approx((0.55, 0.65))
    lo, hi = eval_interval(_run(), 2)  # tasks 0.5 and 0.7: sd 0.1414, se 0.1
    assert (lo, hi) == pytest.approx((0.6 - T_975_1 * 0.1, 0.6 + T_975_1 * 0.1))
    assert eval_ci({"eval/real_reward": 0.6, "eval/task/a": 0.6}) is None  # one task: no interval


def test_summary_adds_up_the_logged_cost_and_estimates_the_sandbox_only_run():
    s = summary.summarize(_run(), checkpoint="/r/last.ckpt")
    assert s["train_cost_s"] == 16.0
    assert s["cost_split_s"] == pytest.approx({"generation": 4.0, "real execution": 5.0, "world model": 2.5,
                                              "update": 3.0, "other": 1.5})
    assert s["real_executions"] == 20.0 and s["sandbox_slot_s"] == 6.0
    assert s["sandbox_only_executions"] == 2 * 2 * 4 * 2  # steps × groups × samples × turns
    assert s["per_execution_s"] == pytest.approx(5.0 / 20)  # no warm-up: the whole run's
    assert s["sandbox_only_cost_s"] == pytest.approx(16.0 - 5.0 - 2.5 + 0.25 * 32)
    warm = summary.summarize(RunData("rid", "u", None, {**CFG, "env": {"mode": "wm", "warmup_steps": 1}}, HISTORY))
    assert warm["per_execution_s"] == pytest.approx(4.0 / 16)  # step 1: 4 s of synchronous execution, 16 executions
    assert s["eval_start"]["reward"] == 0.4 and s["eval_end"]["reward"] == 0.6 and s["eval_end"]["step"] == 2
    assert s["eval_end"]["ci95"] == pytest.approx([0.6 - T_975_1 * 0.1, 0.6 + T_975_1 * 0.1])
    assert s["fidelity"] == pytest.approx({"wm/spearman": 0.7, "wm/mae": 0.15, "wm/coverage_2sigma": 0.75})
    text = summary.render(s)
    assert "0.400 [" in text and "→ 0.600 [" in text
    assert "mlflow ui --backend-store-uri sqlite:////x/ml.db" in text and "/r/last.ckpt" in text
    assert "20 vs ≤32" in text


def test_summary_says_when_every_group_was_tied_and_what_the_programs_did():
    """A run whose programs all fail alike has no advantage anywhere: the summary must not read as normal."""
    tied = {**HISTORY, "rl/tied_groups": {1: 2.0, 2: 2.0}, "rl/groups": {1: 2.0, 2: 2.0},
            "train/status/malformed": {1: 16.0, 2: 15.0}, "train/status/syntax_error": {2: 1.0}}
    s = summary.summarize(_run(tied))
    assert s["signal"] == {"tied_groups": 4.0, "groups": 4.0, "tied_steps": 2, "top_status": "malformed",
                           "top_status_share": pytest.approx(31 / 32)}
    text = summary.render(s)
    assert "4/4 groups tied (no advantage), 2/2 steps with every group tied" in text
    assert "NOTHING WAS LEARNT on those steps; most frequent outcome: malformed in 97% of turns" in text
    learning = summary.summarize(_run({**tied, "rl/tied_groups": {1: 1.0, 2: 0.0}}))
    assert learning["signal"]["tied_steps"] == 0 and "NOTHING" not in summary.render(learning)
    assert "learning signal" not in summary.render(summary.summarize(_run()))  # nothing logged: no line


def test_relative_sqlite_store_is_made_absolute_for_the_mlflow_ui_command(tmp_path):
    assert absolute_tracking_uri("sqlite:///ml.db", tmp_path) == f"sqlite:///{tmp_path.resolve()}/ml.db"
    assert absolute_tracking_uri("sqlite:////abs/ml.db", tmp_path) == "sqlite:////abs/ml.db"


def test_reward_figure_plots_held_out_reward_against_step_and_cost_with_intervals():
    fig = figures.reward(_run())
    by_step, by_cost = fig.axes
    assert by_step.get_xlabel() == "RL step" and by_cost.get_xlabel() == "cumulative training cost (s)"
    held_out = by_step.containers[0]  # the errorbar
    assert list(held_out.lines[0].get_ydata()) == [0.4, 0.6]
    assert list(by_cost.containers[0].lines[0].get_xdata()) == [0.0, 16.0]  # cumulative Σ step_s at steps 0, 2
    bars = held_out.lines[2][0].get_segments()  # the interval bars span the t-interval over tasks
    assert bars[1][:, 1] == pytest.approx([0.6 - T_975_1 * 0.1, 0.6 + T_975_1 * 0.1])


def test_cost_figure_stacks_each_part_of_every_step():
    ax = figures.cost(_run()).axes[0]
    parts = {c.get_label(): [p.get_height() for p in c.patches] for c in ax.containers}
    assert parts == pytest.approx({"generation": [2, 2], "real execution": [4, 1], "world model": [1, 1.5],
                                   "update": [2, 1], "other": [1, 0.5]})
    assert ax.get_ylabel() == "seconds"


def test_fidelity_and_anchor_figures_show_their_series():
    fid = figures.fidelity(_run())
    assert [a.get_ylabel() for a in fid.axes] == ["Spearman", "MAE", "2σ coverage"]
    assert list(fid.axes[0].lines[0].get_ydata()) == [0.6, 0.8]
    anchors = figures.anchors(_run())
    assert [a.get_title() for a in anchors.axes] == ["Anchor rate", "Guard flags"]
    assert list(anchors.axes[1].lines[0].get_ydata()) == [0.0, 1.0]


def test_divergence_heatmap_holds_the_mean_gap_per_task_and_class_with_counts():
    fig = figures.divergence(_run())
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["knn", "svm"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    grid = ax.images[0].get_array()
    assert grid[0][1] == pytest.approx(0.3) and grid[1][0] == pytest.approx(-0.1)  # a/svm: (0.4 + 0.2) / 2
    assert grid.mask[0][0] and grid.mask[1][1]  # no pairs there
    texts = [t.get_text() for t in ax.texts]
    assert any(t.startswith("+0.30\nn=2\n[") for t in texts) and "-0.10\nn=1" in texts


def test_report_writes_non_empty_pngs_and_a_page_with_config_and_summary(tmp_path):
    page = write_report(_run(), tmp_path)
    for name in figures.FIGURES:
        img = matplotlib.image.imread(tmp_path / f"{name}.png")
        assert img.shape[0] > 100 and img.shape[1] > 100 and img.std() > 0  # not a blank canvas
        assert f'src="{name}.png"' in page.read_text()
    assert "group_size: 4" in page.read_text() and "wmrl summary" in page.read_text()
    assert json.loads((tmp_path / "summary.json").read_text())["train_cost_s"] == 16.0


def test_report_of_a_run_without_world_model_still_renders(tmp_path):
    history = {k: v for k, v in HISTORY.items() if not k.startswith(("wm/", "env/", "guard/"))}
    write_report(_run(history, pairs=[]), tmp_path)
    assert "no anchor pairs logged" in [t.get_text() for t in figures.divergence(_run(history, [])).axes[0].texts]
    assert (tmp_path / "divergence.png").stat().st_size > 0


def test_progress_line_shows_step_rewards_executions_and_seconds_per_step():
    cost = CostCallback()
    cost.totals.update({"cost/real_executions": 16.0, "cost/train_s": 20.0})
    evaluation = EvaluationCallback(None, None, 2, 2, at_start=True)
    evaluation.metrics, evaluation.last_step = {"eval/real_reward": 0.6, "eval/real_reward_ci95": 0.05}, 2
    out = io.StringIO()  # not a terminal: one plain line per step
    bar = StepProgressBar(4, {}, cost, evaluation, stream=out)
    trainer = SimpleNamespace(progress_bar_metrics={"reward": 0.5})
    bar.on_train_batch_end(trainer, SimpleNamespace(rl_step=2), None, None, 1)
    assert out.getvalue() == ("step 2/4 · train reward 0.500 · held-out 0.600 [0.55, 0.65] @2 · real execs 16 · "
                              "s/step 10.0\n")
    out.truncate(0), out.seek(0)
    bar.on_train_batch_end(trainer, SimpleNamespace(rl_step=3, tied_streak=1), None, None, 2)
    assert "WARNING" not in out.getvalue()  # one tied step is noise
    bar.on_train_batch_end(trainer, SimpleNamespace(rl_step=4, tied_streak=2), None, None, 3)
    assert "WARNING no learning signal for 2 steps: every group's rewards tied" in out.getvalue()
    quiet = io.StringIO()
    StepProgressBar(4, {}, cost, evaluation, enabled=False, stream=quiet).on_train_batch_end(
        trainer, SimpleNamespace(rl_step=2), None, None, 1)
    assert quiet.getvalue() == ""


def test_report_command_reads_a_run_by_its_mlflow_id(tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    from wmrl.report.__main__ import main

    uri = f"sqlite:///{tmp_path}/ml.db"
    client = MlflowClient(tracking_uri=uri)
    rid = client.create_run(client.create_experiment("e")).info.run_id  # left RUNNING, as a killed run is
    for key, series in HISTORY.items():
        for step, value in series.items():
            client.log_metric(rid, key, value, step=step)
    assert main([rid, "--tracking-uri", uri, "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "training cost     16.0s" in printed and "[run running: from what was logged]" in printed
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["eval_end"]["reward"] == 0.6
    assert (tmp_path / "out" / "reward.png").stat().st_size > 10000


def test_a_sandbox_only_run_is_not_compared_with_itself():
    run = RunData("rid", "sqlite:////x/ml.db", None, {**CFG, "env": {"mode": "sandbox"}}, HISTORY, "FINISHED", [])
    s = summary.summarize(run)
    assert s["sandbox_only_executions"] is None and s["sandbox_only_cost_s"] is None
    assert "real executions   20, 6.0 sandbox slot-s" in summary.render(s)


def test_the_programs_and_proxy_figures_plot_what_the_run_logged():
    """Issue 27: how programs end (training per step, each evaluated family first and last) and the proxy
    (corrected world-model reward on anchors) against the real reward, with its interval."""
    history = {**HISTORY, "train/status/valid": {1: 6.0, 2: 2.0}, "train/status/malformed": {1: 2.0, 2: 6.0},
               "eval/status/tables/valid": {0: 0.4, 2: 0.9}, "eval/status/tables/malformed": {0: 0.6, 2: 0.1},
               "proxy/wm_mean": {1: 0.6, 2: 0.8}, "proxy/wm_mean_ci95": {1: 0.1, 2: 0.1},
               "proxy/real_mean": {1: 0.5, 2: 0.5}}
    fig = figures.programs(_run(history))
    train_ax, tables_ax = fig.axes[:2]
    malformed, valid = train_ax.collections[:2]  # stacked in status order: malformed under valid
    assert malformed.get_paths()[0].vertices[:, 1].max() == pytest.approx(0.75)  # 6 of 8 turns at step 2
    heights = sorted(round(p.get_height(), 6) for p in tables_ax.patches)
    assert heights == [0.1, 0.4, 0.6, 0.9] and "tables" in tables_ax.get_title()
    ax = figures.proxy(_run(history)).axes[0]
    assert [list(c.lines[0].get_ydata()) for c in ax.containers] == [[0.6, 0.8], [0.5, 0.5]]
    assert [c.get_label() for c in ax.containers] == ["corrected world model (trained on)", "real execution"]
