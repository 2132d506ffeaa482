"""`python train.py experiment=smoke` end to end: every stage, MLflow, checkpoints, kill and resume."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
COST_METRICS = ["time/generation_s", "time/env_real_s", "time/env_wm_s", "time/wm_train_s", "time/policy_train_s",
                "time/step_s", "time/eval_s", "cost/real_executions", "cost/sandbox_slot_s", "reward/train_mean",
                "reward/wm_raw_mean", "reward/real_mean", "eval/real_reward", "eval/valid_rate"]


def _args(tmp: Path, cache: Path, *extra: str) -> list[str]:
    return [sys.executable, str(ROOT / "train.py"), "experiment=smoke", f"run_dir={tmp}/runs",
            f"logger.tracking_uri=sqlite:///{tmp}/mlruns.db", f"task.cache_dir={cache}", "trainer.progress_bar=false",
            *extra]


def _run(tmp, cache, *extra, timeout=900):
    r = subprocess.run(_args(tmp, cache, *extra), cwd=tmp, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-4000:]
    return r


def _client(tmp):
    return mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{tmp}/mlruns.db")


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, session_cache):
    tmp = tmp_path_factory.mktemp("smoke")
    t0 = time.perf_counter()
    r = _run(tmp, session_cache, "trainer.progress_bar=true")  # stdout is a pipe: one plain line per step
    wall = time.perf_counter() - t0
    (tmp / "console.txt").write_text(r.stdout + r.stderr)
    run_dir = next((tmp / "runs").iterdir())
    return tmp, run_dir, json.loads((run_dir / "summary.json").read_text()), wall


def test_smoke_logs_every_cost_metric_to_mlflow(smoke_run):
    tmp, run_dir, summary, wall = smoke_run
    client = _client(tmp)
    run = client.get_run(summary["mlflow_run_id"])
    missing = [m for m in COST_METRICS if m not in run.data.metrics]
    assert missing == []
    assert any(k.startswith("wm/") for k in run.data.metrics)
    assert any(k.startswith("debias/") for k in run.data.metrics)
    assert any(k.startswith("denoise/") for k in run.data.metrics)
    steps = client.get_metric_history(run.info.run_id, "time/step_s")
    assert sorted(m.step for m in steps) == [1, 2, 3, 4]
    assert run.data.params["rl.steps"] == "4" and run.data.params["env.mode"] == "wm"


def test_smoke_saves_config_samples_and_checkpoint_artifacts(smoke_run):
    tmp, run_dir, summary, wall = smoke_run
    client = _client(tmp)
    names = {a.path for a in client.list_artifacts(summary["mlflow_run_id"])}
    assert {"config.yaml", "samples", "checkpoints"} <= names
    samples = client.list_artifacts(summary["mlflow_run_id"], "samples")
    assert len(samples) >= 2  # at start and at each evaluation
    assert (run_dir / "checkpoints" / "last.ckpt").exists()


def test_smoke_uses_the_world_model_and_fewer_real_executions(smoke_run):
    tmp, run_dir, summary, wall = smoke_run
    from wmrl.domains.research.sandbox import read_log

    log = read_log(run_dir / "executions.sqlite")
    train = [r for r in log if r["meta"].get("purpose") == "train"]
    # smoke: 4 steps x 2 groups x 4 samples x 2 turns = 64 programs; warm-up (1 step) executes all 16,
    # then one anchor group of two per step executes 8
    assert len(train) == 16 + 3 * 8
    assert summary["cost/real_executions"] == sum(r["outcome"]["attempts"] > 0 for r in train)
    assert {r["meta"]["step"] for r in train} == {0, 1, 2, 3}
    # anchors of steps 1 and 2 ran in the background; both trained in the last step (env.anchor_lag 2:
    # step 1's is due at step 3, the last; the last step takes step 2's too)
    deferred = [r for r in train if r["meta"].get("deferred")]
    assert {r["meta"]["step"] for r in deferred} == {1, 2}
    assert all(r["meta"]["rank"] == 0 for r in deferred)  # what a resumed run's rewind tells them apart by
    history = _client(tmp).get_metric_history(summary["mlflow_run_id"], "rollout/deferred_anchors")
    assert {m.step: m.value for m in history} == {1: 0.0, 2: 0.0, 3: 0.0, 4: 8.0}


def test_smoke_finishes_quickly(smoke_run):
    *_, wall = smoke_run
    print(f"smoke wall time: {wall:.1f}s")
    assert wall < 600  # generous: the first run also builds leaderboards, tokenizer and warm start


def test_smoke_console_shows_header_steps_and_summary_not_lightning_banners(smoke_run):
    tmp, run_dir, summary, wall = smoke_run
    out = (tmp / "console.txt").read_text()
    assert f"wmrl smoke · run dir {run_dir}" in out and summary["mlflow_run_id"] in out.split("\n")[
        next(i for i, line in enumerate(out.split("\n")) if line.startswith("wmrl smoke"))]
    assert [f"step {i}/4 · train reward" in out for i in (1, 2, 3, 4)] == [True] * 4
    assert "wmrl summary: smoke, 4/4 RL steps" in out
    assert f"mlflow ui --backend-store-uri sqlite:///{tmp.resolve()}/mlruns.db" in out
    for banner in ("GPU available", "TPU available", "litlogger", "v_num", "Epoch 0"):
        assert banner not in out
    assert (run_dir / "summary.txt").read_text().strip() in out


def _history(client, run_id, key):
    return {m.step: m.value for m in client.get_metric_history(run_id, key)}


def test_smoke_summary_equals_the_logged_metrics(smoke_run):
    tmp, run_dir, summary, wall = smoke_run
    client = _client(tmp)
    rid = summary["mlflow_run_id"]
    s = summary["summary"]
    assert s["train_cost_s"] == pytest.approx(sum(_history(client, rid, "time/step_s").values()))
    assert s["cost_split_s"]["generation"] == pytest.approx(sum(_history(client, rid, "time/generation_s").values()))
    assert s["cost_split_s"]["update"] == pytest.approx(sum(_history(client, rid, "time/policy_train_s").values()))
    assert s["real_executions"] == summary["cost/real_executions"] == max(_history(client, rid, "cost/real_executions").values())
    evals = _history(client, rid, "eval/real_reward")
    assert (s["eval_start"]["step"], s["eval_end"]["step"]) == (0, 4)
    assert (s["eval_start"]["reward"], s["eval_end"]["reward"]) == (evals[0], evals[4])
    spearman = list(_history(client, rid, "wm/spearman").values())
    assert s["fidelity"]["wm/spearman"] == pytest.approx(sum(spearman) / len(spearman))
    assert s["sandbox_only_executions"] == 4 * 2 * 4 * 2
    assert s["checkpoint"] == str(run_dir / "checkpoints" / "last.ckpt")


def _assert_report(run_dir: Path, out: Path) -> None:
    """Every figure of the report is a non-empty image, and the figures show this run's curves."""
    import matplotlib.image

    from wmrl.report import figures, load_run, write_report

    run = load_run(run_dir)
    write_report(run, out)
    for name in figures.FIGURES:
        img = matplotlib.image.imread(out / f"{name}.png")
        assert img.shape[0] > 100 and img.std() > 0, name
    by_step = figures.reward(run).axes[0]
    assert by_step.get_xlabel() == "RL step"
    assert list(by_step.containers[0].lines[0].get_xdata()) == sorted(run.series("eval/real_reward"))
    assert len(figures.cost(run).axes[0].containers[0].patches) == len(run.series("time/step_s"))
    if run.anchor_pairs:
        assert figures.divergence(run).axes[0].images, "anchor pairs but no heatmap"


def test_smoke_report_is_written_and_logged_to_mlflow(smoke_run):
    tmp, run_dir, summary, wall = smoke_run
    assert (run_dir / "report" / "index.html").exists()
    logged = {a.path for a in _client(tmp).list_artifacts(summary["mlflow_run_id"], "report")}
    assert {"report/reward.png", "report/cost.png", "report/fidelity.png", "report/divergence.png",
            "report/anchors.png", "report/index.html"} <= logged
    _assert_report(run_dir, tmp / "rerendered")


def _final_params(run_dir: Path) -> dict:
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    return {k: v for k, v in ckpt["state_dict"].items()}, ckpt


def _checkpoint_at(proc: subprocess.Popen, tmp: Path, step: int) -> Path:
    """The run's last.ckpt once it holds `step` steps, the run still going."""
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        found = list((tmp / "runs").glob("*/checkpoints/last.ckpt")) if (tmp / "runs").exists() else []
        if found:
            try:
                if torch.load(found[0], map_location="cpu", weights_only=False)["wmrl"]["rl_step"] >= step:
                    return found[0]
            except Exception:
                pass  # being written
        time.sleep(0.2)
    raise AssertionError("the run ended before it could be stopped")


def test_sigterm_stops_a_run_with_143_marks_it_killed_and_it_resumes(tmp_path, session_cache):
    """Lightning's own SIGTERM stop exited 0 and left the MLflow run FAILED: a scheduler could not tell a
    stopped run from a finished one."""
    steps = "rl.steps=5"
    proc = subprocess.Popen(_args(tmp_path, session_cache, steps), cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    ckpt = _checkpoint_at(proc, tmp_path, 1)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    assert time.monotonic() - t0 < 60  # the benchmark's grace period before SIGKILL
    assert "stopped by SIGTERM at step" in err and "resume=last" in err
    client = _client(tmp_path)
    [run] = client.search_runs([client.get_experiment_by_name("wmrl").experiment_id])
    assert run.info.status == "KILLED" and run.data.tags["wmrl.stopped"].startswith("SIGTERM at step")
    _run(tmp_path, session_cache, steps, "resume=last")
    [run] = client.search_runs([client.get_experiment_by_name("wmrl").experiment_id])
    assert run.info.status == "FINISHED"
    assert torch.load(ckpt, map_location="cpu", weights_only=False)["wmrl"]["rl_step"] == 5


def test_killed_run_resumes_to_the_same_end(tmp_path, session_cache):
    steps = "rl.steps=5"
    ref_tmp = tmp_path / "ref"
    ref_tmp.mkdir()
    _run(ref_tmp, session_cache, steps)
    ref_dir = next((ref_tmp / "runs").iterdir())

    tmp = tmp_path / "killed"
    tmp.mkdir()
    proc = subprocess.Popen(_args(tmp, session_cache, steps), cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    ckpt = _checkpoint_at(proc, tmp, 2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = torch.load(ckpt, map_location="cpu", weights_only=False)["wmrl"]["rl_step"]
    assert killed_at < 5
    # the report of the killed run, from what it logged before the kill
    _assert_report(ckpt.parent.parent, tmp / "killed-report")
    from wmrl import summary as summary_
    from wmrl.report import load_run

    killed = summary_.summarize(load_run(ckpt.parent.parent))
    assert killed["status"] == "RUNNING" and killed_at <= killed["steps"] < 5
    # Lightning's own key for the datamodule's state is Lightning's to rename: the resume must not depend on it
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    state["RolloutDataModule.renamed"] = state.pop("RolloutDataModule")
    torch.save(state, ckpt)

    _run(tmp, session_cache, steps, "resume=last")
    run_dir = ckpt.parent.parent
    ref, ref_ckpt = _final_params(ref_dir)
    got, got_ckpt = _final_params(run_dir)
    assert got_ckpt["wmrl"]["rl_step"] == ref_ckpt["wmrl"]["rl_step"] == 5
    for name, value in ref.items():
        assert torch.allclose(value, got[name], atol=1e-5), name
    totals = [c["callbacks"]["CostCallback"]["totals"]["cost/real_executions"] for c in (got_ckpt, ref_ckpt)]
    assert totals[0] == totals[1] > 0
    # the same MLflow run continues: one run, every step logged once
    client = _client(tmp)
    runs = client.search_runs([client.get_experiment_by_name("wmrl").experiment_id])
    assert len(runs) == 1
    history = client.get_metric_history(runs[0].info.run_id, "time/step_s")
    assert sorted({m.step for m in history}) == [1, 2, 3, 4, 5]
    from wmrl.domains.research.sandbox import read_log

    def train_rows(d):
        return sorted((r["meta"]["step"], r["program"]) for r in read_log(d / "executions.sqlite") if r["meta"]["purpose"] == "train")

    assert train_rows(run_dir) == train_rows(ref_dir)  # each execution logged once, as in the uninterrupted run

    # a checkpoint without the project's rollout state cannot rewind the log: the resume refuses, changing nothing
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    del state["wmrl"]["rollout"]
    torch.save(state, ckpt)
    before = (run_dir / "executions.sqlite").read_bytes()
    r = subprocess.run(_args(tmp, session_cache, "rl.steps=6", "resume=last"), cwd=tmp, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1 and "holds no rollout state" in r.stderr, r.stderr[-3000:]
    assert (run_dir / "executions.sqlite").read_bytes() == before
