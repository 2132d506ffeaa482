"""The speedup benchmark's arithmetic on fixed inputs (hand-computed), and its orchestration end to end
with a fake `train.py` (no training)."""
import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

from wmrl.benchmark import render, stats
from wmrl.benchmark import targets as tg
from wmrl.benchmark.format import fmt_ci

ROOT = Path(__file__).resolve().parent.parent


def _run(arm, step_s, gen, train, evals, execs, slot_s, seed=0, fidelity=None):
    steps = range(1, len(step_s) + 1)
    hist = {"time/step_s": dict(zip(steps, step_s)), "time/generation_s": dict(zip(steps, gen)),
            "time/policy_train_s": dict(zip(steps, train)), "eval/real_reward": dict(evals)}
    hist.update(fidelity or {})
    return {"arm": arm, "seed": seed, "status": "ok", "error": None, "history": hist,
            "summary": {"cost/real_executions": execs, "cost/sandbox_slot_s": slot_s}}


SANDBOX = _run("sandbox_rl", [10, 10, 10, 10], [2] * 4, [1] * 4, {0: 0.4, 2: 0.6, 4: 0.8}, 256, 300.0)
WMRL = _run("wmrl", [4, 4, 4, 4], [2] * 4, [1] * 4, {0: 0.4, 2: 0.78, 4: 0.85}, 64, 75.0,
            fidelity={"wm/spearman": {2: 0.5, 3: 0.7}, "wm/mae": {2: 0.1, 3: 0.2}, "wm/coverage_2sigma": {2: 0.9, 3: 1.0}})


def test_t_interval_matches_hand_computation_and_needs_two_seeds():
    ci = stats.t_interval([1.0, 2.0, 3.0])  # sd 1, se 1/sqrt(3), t_0.975,2 = 4.302653
    assert ci["mean"] == pytest.approx(2.0)
    assert ci["hi"] - 2.0 == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5)
    assert ci["lo"] == pytest.approx(2.0 - 4.302653 / math.sqrt(3), rel=1e-5)
    one = stats.t_interval([0.7])
    assert one == {"mean": 0.7, "lo": None, "hi": None, "n": 1}
    assert fmt_ci(one) == "0.700 [n/a]"
    assert stats.t_interval([])["mean"] is None


def test_cumulative_cost_and_time_to_target():
    cum = stats.cumulative_cost({2: 3.0, 1: 2.0, 3: 5.0})
    assert cum == {0: 0.0, 1: 2.0, 2: 5.0, 3: 10.0}
    evals = {0: 0.3, 2: 0.5, 3: 0.7}
    assert stats.time_to_target(evals, cum, 0.6) == 10.0
    assert stats.time_to_target(evals, cum, 0.5) == 5.0  # "at or above"
    assert stats.time_to_target(evals, cum, 0.2) == 0.0  # the warm start already reaches it
    assert stats.time_to_target(evals, cum, 0.8) is None  # not reached
    assert stats.time_to_target(evals, cum, None) is None


def test_ratio_refuses_missing_or_zero_baseline():
    assert stats.ratio(1.0, 4.0) == 0.25
    assert stats.ratio(1.0, 0.0) is None and stats.ratio(None, 1.0) is None and stats.ratio(1.0, float("nan")) is None


def test_report_rows_ratios_time_to_target_and_ideal_speedup():
    r = stats.build_report([SANDBOX, WMRL], ["sandbox_rl", "wmrl"])
    assert r["target_reward"] == pytest.approx(0.4 + 0.5 * 0.4)  # warm start + half the baseline's gain
    base, w = r["rows"]
    assert base["gain"]["mean"] == pytest.approx(0.4) and w["gain"]["mean"] == pytest.approx(0.45)
    assert base["train_cost_s"] == 40 and w["train_cost_s"] == 16
    assert base["time_to_target_s"] == 20.0  # step 2: 0.6 >= 0.6, after 2 steps of 10 s
    assert w["time_to_target_s"] == 8.0  # step 2: 0.78 >= 0.6, after 2 steps of 4 s
    assert w["ratio"]["train_cost"] == pytest.approx(0.4)
    assert w["ratio"]["real_executions"] == pytest.approx(0.25)
    assert w["ratio"]["sandbox_slot_s"] == pytest.approx(0.25)
    assert w["ratio"]["final_eval"] == pytest.approx(0.85 / 0.8)
    assert w["speedup"]["actual"] == pytest.approx(2.5)  # 40 / 16
    assert w["speedup"]["ideal"] == pytest.approx(10 / 3)  # sandbox step 10 s / (gen 2 + train 1)
    assert w["speedup"]["realised"] == pytest.approx(0.75)
    assert w["speedup"]["time_to_target"] == pytest.approx(2.5)
    assert w["fidelity"] == pytest.approx({"wm/spearman": 0.6, "wm/mae": 0.15, "wm/coverage_2sigma": 0.95})
    assert base["fidelity"]["wm/spearman"] is None and w["ratio"]["wm/spearman"] is None  # no WM in the baseline
    assert base["ratio"]["train_cost"] == 1.0 and base["speedup"]["ideal"] is None


def _seeds(arm, evals_by_seed, step_s=10.0):
    return [_run(arm, [step_s] * 4, [2] * 4, [1] * 4, ev, 256 if arm == "sandbox_rl" else 64, 300.0, seed=i)
            for i, ev in enumerate(evals_by_seed)]


def _targets(runs):
    return {t["target"].split(" ")[0] + ":" + t["target"].split(" ")[1]: t for t in
            tg.check(stats.build_report(runs, ["sandbox_rl", "wmrl"]))}


def test_targets_of_issue_13_pass_and_fail_as_measured():
    base = _seeds("sandbox_rl", [{0: 0.50, 2: 0.55, 4: 0.60}, {0: 0.52, 2: 0.56, 4: 0.61}, {0: 0.48, 2: 0.55, 4: 0.59}])
    good = _seeds("wmrl", [{0: 0.50, 2: 0.56, 4: 0.61}, {0: 0.52, 2: 0.57, 4: 0.60}, {0: 0.48, 2: 0.56, 4: 0.59}], 3.0)
    t = tg.check(stats.build_report(base + good, ["sandbox_rl", "wmrl"]))
    # gain 0.10 +- 0.025 in every seed; wmrl 0.600 vs 0.600; never below; cost 0.3; target 0.55 at step 2: 20/6;
    # realised: ideal 10/3, actual 10/3
    assert [x["passed"] for x in t] == [True, True, True, True, True, True]
    assert "(not significant)" in t[1]["measured"]
    flat = _seeds("sandbox_rl", [{0: 0.50, 4: 0.60}, {0: 0.52, 4: 0.50}, {0: 0.48, 4: 0.55}])  # one seed loses
    assert tg.check(stats.build_report(flat, ["sandbox_rl"]))[0]["passed"] is False
    worse = _seeds("wmrl", [{0: 0.50, 2: 0.50, 4: 0.56}, {0: 0.52, 2: 0.51, 4: 0.57}, {0: 0.48, 2: 0.49, 4: 0.55}], 5.0)
    t = tg.check(stats.build_report(base + worse, ["sandbox_rl", "wmrl"]))
    passed = [x["passed"] for x in t]
    # 0.56 < 0.60 - 0.02; below at step 2 and 4; cost 0.5 > 0.4; target 0.55 first met at step 4 (20 s): 20/20 = 1
    assert passed[1:5] == [False, False, False, False]
    assert "below at steps 2, 4" in t[2]["measured"] and "(significant)" in t[1]["measured"]


def test_time_to_target_not_reached_is_reported_and_fails():
    slow = _run("wmrl", [2, 2, 2, 2], [1] * 4, [0.5] * 4, {0: 0.4, 2: 0.5, 4: 0.55}, 64, 75.0)
    r = stats.build_report([SANDBOX, slow], ["sandbox_rl", "wmrl"])
    assert r["rows"][1]["time_to_target_s"] is None and r["rows"][1]["speedup"]["time_to_target"] is None
    ttt = next(t for t in tg.check(r) if t["target"].startswith("time to target"))
    assert ttt["measured"] == "not reached" and ttt["passed"] is False
    assert "not reached" in render.render_markdown(r)


def test_no_time_to_target_when_the_baseline_did_not_gain():
    lost = _run("sandbox_rl", [10] * 4, [2] * 4, [1] * 4, {0: 0.6, 4: 0.55}, 256, 300.0)
    r = stats.build_report([lost, WMRL], ["sandbox_rl", "wmrl"])
    assert r["target_reward"] is None
    ttt = next(t for t in tg.check(r) if t["target"].startswith("time to target"))
    assert ttt["passed"] is None and "did not gain" in ttt["measured"]


def test_quality_within_the_margin_needs_overlapping_intervals():
    base = [_run("sandbox_rl", [10] * 4, [2] * 4, [1] * 4, {4: v}, 256, 300.0, seed=s) for s, v in enumerate([0.8, 0.9])]
    b = stats.build_report(base, ["sandbox_rl"])["rows"][0]["final_eval"]
    assert b["mean"] == pytest.approx(0.85)
    assert b["hi"] - 0.85 == pytest.approx(12.706205 * 0.05, rel=1e-5)  # sd 0.0707, se 0.05, t_0.975,1

    def quality(finals):
        wm = [_run("wmrl", [2] * 4, [1] * 4, [0.5] * 4, {4: v}, 64, 75.0, seed=s) for s, v in enumerate(finals)]
        return next(t for t in tg.check(stats.build_report(base + wm, ["sandbox_rl", "wmrl"])) if "final eval >=" in t["target"])

    assert quality([0.83, 0.84])["passed"] is True  # 0.835: within 0.02, intervals overlap
    assert quality([0.75, 0.80])["passed"] is False  # intervals overlap but 0.775 trails by 0.075


def test_paired_difference_removes_the_seed_spread():
    base = [_run("sandbox_rl", [1], [1], [0], {1: v}, 1, 1.0, seed=s) for s, v in enumerate([0.4, 0.6, 0.8])]
    wm = [_run("wmrl", [1], [1], [0], {1: v + 0.02 + 0.005 * (s % 2)}, 1, 1.0, seed=s) for s, v in enumerate([0.4, 0.6, 0.8])]
    d = stats.paired_difference(wm, base)
    assert d["mean"] == pytest.approx(0.065 / 3) and d["significant"] is True  # +0.02, +0.025, +0.02
    row = stats.build_report(base + wm, ["sandbox_rl", "wmrl"])["rows"][1]
    assert stats.intervals_overlap(row["final_eval"], stats.build_report(base, ["sandbox_rl"])["rows"][0]["final_eval"])


def test_failed_seed_is_left_out_and_counted():
    failed = {"arm": "wmrl", "seed": 1, "status": "failed", "error": "boom", "history": {}, "summary": {}}
    r = stats.build_report([SANDBOX, WMRL, failed], ["sandbox_rl", "wmrl"])
    assert r["rows"][1]["seeds"] == 1 and r["rows"][1]["failed_seeds"] == [1]
    assert "1 (1 failed)" in render.render_markdown(r)


def test_ablation_order_against_the_paper():
    runs = [_run(a, [1] * 2, [1] * 2, [0] * 2, {2: v}, 1, 1.0) for a, v in
            [("sandbox_rl", 0.5), ("wm_raw", 0.4), ("wmrl_no_debias", 0.45), ("wmrl_no_denoise", 0.5), ("wmrl", 0.6)]]
    arms = ["sandbox_rl", "wm_raw", "wmrl_no_debias", "wmrl_no_denoise", "wmrl"]
    abl = stats.build_report(runs, arms)["ablation"]
    assert abl["order"] == ["wmrl", "wmrl_no_denoise", "wmrl_no_debias", "wm_raw"] and abl["matches_paper"]
    runs[1]["history"]["eval/real_reward"] = {2: 0.7}  # wm_raw best
    abl = stats.build_report(runs, arms)["ablation"]
    assert abl["order"][0] == "wm_raw" and abl["matches_paper"] is False


def test_ablation_order_of_a_subset_is_not_judged():
    """Two of the paper's four arms in the paper's order neither match nor contradict it: the table must not say "no"."""
    runs = [_run(a, [1] * 2, [1] * 2, [0] * 2, {2: v}, 1, 1.0) for a, v in [("sandbox_rl", 0.5), ("wm_raw", 0.4), ("wmrl", 0.6)]]
    report = stats.build_report(runs, ["sandbox_rl", "wm_raw", "wmrl"])
    assert report["ablation"]["order"] == ["wmrl", "wm_raw"] and report["ablation"]["matches_paper"] is None
    text = render.render_markdown(report)
    assert "matches: not judged, 2 of its 4 arms measured" in text and "matches: no)" not in text
    assert [t["passed"] for t in tg.check(report) if t["target"].startswith("ablation ordering")] == [None]


def test_stratum_table_bias_and_spread_per_task_and_class():
    pairs = [{"task": "wine", "action_class": "forest", "wm_reward": 0.8, "wm_var": 0.01, "real_reward": 0.5},
             {"task": "wine", "action_class": "forest", "wm_reward": 0.9, "wm_var": 0.03, "real_reward": 0.4},
             {"task": "wine", "action_class": "linear", "wm_reward": 0.5, "wm_var": 0.04, "real_reward": 0.6},
             {"task": "wine", "action_class": "linear", "wm_reward": None, "wm_var": None, "real_reward": 0.6}]
    rows = stats.stratum_table(pairs)
    assert [(r["task"], r["action_class"], r["n"]) for r in rows] == [("wine", "forest", 2), ("wine", "linear", 1)]
    assert rows[0]["bias"] == pytest.approx(0.4) and rows[0]["spread"] == pytest.approx(math.sqrt(0.02))
    assert rows[0]["wm_std"] == pytest.approx(math.sqrt(0.02)) and rows[0]["real_mean"] == pytest.approx(0.45)
    assert rows[1]["bias"] == pytest.approx(-0.1) and rows[1]["spread"] is None


def test_recovery_under_correlated_error():
    glob = _run("wmrl_global", [2] * 4, [1] * 4, [0.5] * 4, {4: 0.6}, 64, 75.0)
    strat = _run("wmrl_stratified", [2] * 4, [1] * 4, [0.5] * 4, {4: 0.79}, 64, 75.0)
    r = stats.build_report([SANDBOX, glob, strat], ["sandbox_rl", "wmrl_global", "wmrl_stratified"])
    rec = {x["arm"]: x["recovers"] for x in stats.recovery(r, ["wmrl_global", "wmrl_stratified"])}
    assert rec == {"wmrl_global": False, "wmrl_stratified": True}  # target 0.76


# ---- orchestration with a fake train.py ------------------------------------------------------

def _load_speedup():
    spec = importlib.util.spec_from_file_location("speedup", ROOT / "benchmarks" / "speedup.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fake_train(args, log_path, bias):
    """Logs a plausible child run to MLflow, writes summary.json and anchor pairs; wmrl_no_debias crashes."""
    from mlflow.tracking import MlflowClient

    a = dict(x.split("=", 1) for x in args)
    log_path.write_text("fake\n")
    if a["experiment"] == "wmrl_no_debias":
        raise RuntimeError("train.py exited with 1:\nTraceback ... ValueError: boom")
    client = MlflowClient(tracking_uri=a["logger.tracking_uri"])
    exp = client.get_experiment_by_name(a["logger.experiment_name"])
    run = client.create_run(exp.experiment_id, run_name=a["logger.run_name"],
                            tags={"mlflow.parentRunId": a["logger.parent_run_id"]})
    rid = run.info.run_id
    real = a["experiment"] == "sandbox_rl"
    step = 10.0 if real else 3.0
    for s in (1, 2, 3, 4):
        client.log_metric(rid, "time/step_s", step, step=s)
        client.log_metric(rid, "time/generation_s", 2.0, step=s)
        client.log_metric(rid, "time/policy_train_s", 0.5, step=s)
        if not real:
            client.log_metric(rid, "wm/spearman", 0.5, step=s)
    seed = int(a["seed"])
    evals = {0: 0.3 + 0.01 * seed, 2: 0.6 if real else 0.7, 4: 0.8}
    if a.get("eval.at_start") == "false":  # train.py then skips the warm start's evaluation
        del evals[0]
    for s, v in evals.items():
        client.log_metric(rid, "eval/real_reward", v, step=s)
        client.log_metric(rid, "eval/real_reward_ci95", 0.02, step=s)
    client.set_terminated(rid)
    run_dir = Path(a["run_dir"]) / f"{a['experiment']}-x"
    run_dir.mkdir(parents=True)
    if not real:
        (run_dir / "anchor_pairs.jsonl").write_text("".join(json.dumps(
            {"step": 2, "task": "wine", "action_class": "forest", "wm_reward": 0.9, "wm_var": 0.01, "real_reward": 0.6,
             "real_status": "valid", "wm_status": "valid"}) + "\n" for _ in range(3)))
    summary = {"run_dir": str(run_dir), "mlflow_run_id": rid, "steps": 4, "eval/real_reward": 0.8,
               "cost/real_executions": 256.0 if real else 64.0, "cost/sandbox_slot_s": 100.0 if real else 25.0,
               "cost/train_s": 4 * step}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return summary


def test_benchmark_orchestration_end_to_end_with_a_fake_train(tmp_path):
    from mlflow.tracking import MlflowClient

    speedup = _load_speedup()
    out = tmp_path / "bench"
    results = speedup.run_benchmark(out, "default", seeds=1, overrides=["rl.steps=4"], train_fn=_fake_train)
    assert [r["status"] for r in results["runs"]] == ["ok", "ok", "failed", "ok", "ok"]
    assert all("rl.steps=4" in r["args"] for r in results["runs"])
    table = (out / "table.md").read_text()
    assert "wmrl_no_debias seed 0 FAILED" in table and "ValueError: boom" in table
    assert "| wmrl | 1 | 12.0 (0.30x) | 64 (0.25x) |" in table
    assert "| wine | forest | 9 | 0.300 |" in table  # anchor pairs of the three successful WM arms
    assert (out / "cost_vs_reward.png").stat().st_size > 1000
    saved = json.loads((out / "results.json").read_text())
    assert saved["report"]["rows"][-1]["speedup"]["ideal"] == pytest.approx(10 / 2.5)
    client = MlflowClient(tracking_uri=f"sqlite:///{out}/mlruns.db")
    parent = client.get_run(results["mlflow"]["parent_run_id"])
    assert parent.info.status == "FAILED"  # one arm failed
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} >= {"table.md", "results.json", "cost_vs_reward.png"}
    children = client.search_runs([parent.info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert sorted(c.info.run_name for c in children) == ["sandbox_rl-seed0", "wm_raw-seed0", "wmrl-seed0",
                                                        "wmrl_no_denoise-seed0"]
    (out / "table.md").unlink()
    assert speedup.main(["--report", str(out)]) == 0  # re-render from results.json alone
    assert (out / "table.md").read_text() == table


def test_a_stopped_benchmark_keeps_the_report_of_its_finished_trainings(tmp_path):
    speedup = _load_speedup()
    out = tmp_path / "bench"

    def stopped_at_the_third(args, log_path, bias):
        if "seed=1" in args and "experiment=sandbox_rl" in args:
            raise KeyboardInterrupt  # Ctrl-C (or SIGTERM) while the third training runs
        return _fake_train(args, log_path, bias)

    with pytest.raises(KeyboardInterrupt):
        speedup.run_benchmark(out, "default", seeds=2, only=["sandbox_rl", "wmrl"], train_fn=stopped_at_the_third)
    saved = json.loads((out / "results.json").read_text())
    assert [(r["arm"], r["seed"]) for r in saved["runs"]] == [("sandbox_rl", 0), ("wmrl", 0)] and not saved["complete"]
    assert "| wmrl | 1 | 12.0 (0.30x) |" in (out / "table.md").read_text()


def test_correlated_scenario_arms_install_the_bias_and_compare_global_with_stratified():
    speedup = _load_speedup()
    arms = {label: (preset, o, b) for label, preset, o, b in speedup.arms_of("correlated", {"forest": 0.3})}
    assert list(arms) == ["sandbox_rl", "wm_raw", "wmrl_global", "wmrl_stratified"]
    assert arms["sandbox_rl"][2] == {} and all(arms[a][2] == {"forest": 0.3} for a in list(arms)[1:])
    assert "callbacks.debias.stratify_by=[]" in arms["wmrl_global"][1]
    assert "callbacks.debias.stratify_by=[action_class]" in arms["wmrl_stratified"][1]
    assert speedup.train_command(["x=1"], {})[1].endswith("train.py")
    assert speedup.train_command(["x=1"], {"forest": 0.3})[1:3] == [str(ROOT / "benchmarks" / "train_biased.py"),
                                                                  "--bias=forest=0.3"]
    from wmrl.config import load_config

    cfg = load_config([f"experiment={arms['wmrl_global'][0]}", *arms["wmrl_global"][1]])
    assert list(cfg.callbacks.debias.stratify_by) == []


def test_the_biased_world_model_adds_the_offset_to_its_class_only():
    from wmrl.domains.research.world_model import LearnedEnsembleWM, WMQuery
    from wmrl.domains.research.world_model.biased import BiasedWorldModel

    inner = LearnedEnsembleWM({"members": 1, "d_model": 16, "layers": 1, "heads": 2}, seed=0)
    forest = "from sklearn.ensemble import RandomForestClassifier\ndef build():\n    return RandomForestClassifier()\n"
    linear = "from sklearn.linear_model import LogisticRegression\ndef build():\n    return LogisticRegression()\n"
    queries = [WMQuery("wine", "task=wine", forest), WMQuery("wine", "task=wine", linear)]
    raw, biased = inner.predict(queries), BiasedWorldModel(inner, {"forest": 0.3}).predict(queries)
    assert (biased.reward_mean - raw.reward_mean).tolist() == pytest.approx([0.3, 0.0])
    assert torch.equal(biased.reward_var, raw.reward_var)


def test_config_drift_flags_changed_defaults_but_not_what_defines_an_arm():
    params = {"sandbox_rl-seed0": {"name": "sandbox_rl", "env.mode": "sandbox", "callbacks.debias": "None",
                                   "rl.lr": "0.0002", "logger.run_name": "a", "seed": "0"},
              "wmrl-seed0": {"name": "wmrl", "env.mode": "wm", "callbacks.debias.method": "isotonic",
                             "rl.lr": "0.0005", "logger.run_name": "b", "seed": "0"}}
    drift = stats.config_drift(params)
    assert drift == {"rl.lr": {"sandbox_rl-seed0": "0.0002", "wmrl-seed0": "0.0005"}}
    r = stats.build_report([SANDBOX, WMRL], ["sandbox_rl", "wmrl"])
    assert "WARNING" not in render.render_markdown(r)
    r["config_drift"] = drift
    assert "WARNING" in render.render_markdown(r) and "`rl.lr`" in render.render_markdown(r)


def test_config_drift_leaves_out_what_the_benchmark_itself_set_for_some_arms():
    params = {"sandbox_rl-seed0": {"env.warmup_steps": "2", "world_model.init": "None", "eval.at_start": "True",
                                   "env.anchor_lag": "1"},
              "wmrl-seed0": {"env.warmup_steps": "0", "world_model.init": "/cache/wm.pt", "eval.at_start": "False",
                             "env.anchor_lag": "3"}}
    args = ["env.warmup_steps=0", "world_model.init=/cache/wm.pt", "eval.at_start=false", "seed=0"]
    drift = stats.config_drift(params, set_by_benchmark={a.split("=", 1)[0] for a in args})
    assert drift == {"env.anchor_lag": {"sandbox_rl-seed0": "1", "wmrl-seed0": "3"}}  # a default that changed


def test_pretraining_cost_is_charged_to_one_run_and_amortised():
    c = stats.with_pretrain_cost(40.0, 100.0, pretrain_s=20.0, runs=4)
    assert c == {"charged": 60.0, "charged_ratio": 0.6, "amortised": 45.0, "amortised_ratio": 0.45}


def test_world_model_arms_start_from_the_pretrained_model_and_the_table_shows_its_cost(tmp_path):
    speedup = _load_speedup()
    pretrained = {"path": "/x/wm.pt", "executions": 120, "sandbox_slot_s": 30.0, "wall_s": 48.0}
    results = speedup.run_benchmark(tmp_path / "b", "default", seeds=1, only=["sandbox_rl", "wmrl"],
                                    train_fn=_fake_train, pretrained=pretrained)
    args = {r["arm"]: r["args"] for r in results["runs"]}
    assert "world_model.init=/x/wm.pt" in args["wmrl"] and not any("world_model.init" in a for a in args["sandbox_rl"])
    assert "env.warmup_steps=0" in args["wmrl"] and "env.warmup_steps=0" not in args["sandbox_rl"]  # the informed world model replaces the real warm-up steps
    table = (tmp_path / "b" / "table.md").read_text()
    assert "120 real executions" in table and "| wmrl | 12.0 | 60.0 (1.50x) | 60.0 (1.50x) |" in table


def test_cost_vs_reward_bands_span_the_seeds_interval():
    seeds = [_run("wmrl", [4, 4], [2] * 2, [1] * 2, {0: 0.4, 2: v}, 64, 75.0, seed=i) for i, v in enumerate((0.7, 0.9))]
    bands = render.eval_bands(seeds, "wmrl")
    assert bands[0] == (0.0, 0.4, pytest.approx(0.4), pytest.approx(0.4))  # same start: zero-width interval
    x, m, lo, hi = bands[1]
    assert (x, m) == (8.0, pytest.approx(0.8))
    assert hi - m == pytest.approx(12.7062047 * 0.1)  # t_0.975,1 · sd/√n = t · 0.1414/1.414
    report = stats.build_report([SANDBOX, *seeds], ["sandbox_rl", "wmrl"])
    ax = render.cost_vs_reward_figure(report, [SANDBOX, *seeds]).axes[0]
    assert len(ax.collections) == 1  # a band for wmrl (two seeds), none for the one-seed baseline
    verts = ax.collections[0].get_paths()[0].vertices
    assert verts[:, 1].max() == pytest.approx(hi) and ax.get_xlabel() == "cumulative training cost (s)"


def test_benchmark_report_links_each_runs_report(tmp_path):
    runs = []
    for arm in ("sandbox_rl", "wmrl"):
        run_dir = tmp_path / "runs" / arm
        (run_dir / "report").mkdir(parents=True)
        (run_dir / "report" / "index.html").write_text("<html></html>")
        runs.append({"arm": arm, "seed": 0, "summary": {"run_dir": str(run_dir)}})
    runs.append({"arm": "wm_raw", "seed": 0, "summary": {}})  # failed: no run, no link
    section = render.run_reports_section(runs, tmp_path)
    assert "- sandbox_rl seed 0: [run report](runs/sandbox_rl/report/index.html)" in section
    assert "- wmrl seed 0: [run report](runs/wmrl/report/index.html)" in section and "wm_raw" not in section


def test_eval_difference_adds_the_two_evaluations_half_widths_in_quadrature():
    a = {"history": {"eval/real_reward": {0: 0.4, 24: 0.60}, "eval/real_reward_ci95": {0: 0.02, 24: 0.03}}}
    b = {"history": {"eval/real_reward": {0: 0.4, 24: 0.55}, "eval/real_reward_ci95": {0: 0.02, 24: 0.04}}}
    d = stats.eval_difference(a, b)
    assert d["mean"] == pytest.approx(0.05) and d["hi"] - d["mean"] == pytest.approx(0.05)  # hypot(0.03, 0.04)
    assert d["significant"] is False  # 0.05 is not more than its half-width 0.05
    b["history"]["eval/real_reward"][24] = 0.54
    assert stats.eval_difference(a, b)["significant"] is True


def test_ablations_are_compared_with_wmrl_paired_over_seeds_and_per_seed():
    runs = []
    for seed, (w, r) in enumerate([(0.60, 0.50), (0.62, 0.55), (0.58, 0.52)]):
        for arm, v in (("sandbox_rl", 0.6), ("wmrl", w), ("wm_raw", r)):
            runs.append({"arm": arm, "seed": seed, "status": "ok", "summary": {},
                         "history": {"eval/real_reward": {0: 0.4, 24: v}, "eval/real_reward_ci95": {0: 0.02, 24: 0.02}}})
    report = stats.build_report(runs, ["sandbox_rl", "wm_raw", "wmrl"])
    row = next(r for r in report["rows"] if r["arm"] == "wm_raw")
    assert row["vs_wmrl"]["seeds"]["mean"] == pytest.approx(-0.23 / 3) and row["vs_wmrl"]["seeds"]["significant"]
    assert row["vs_wmrl"]["by_seed"][1]["mean"] == pytest.approx(-0.07) and row["vs_wmrl"]["by_seed"][1]["significant"]
    assert all("vs_wmrl" not in r for r in report["rows"] if r["arm"] != "wm_raw")
    md = render.render_markdown(report)
    assert "| wm_raw | -0.077 [" in md and "| seed 0 | seed 1 | seed 2 |" in md and "-0.070 [-0.098, -0.042]*" in md


def test_selection_arms_run_only_when_named_and_unknown_arms_are_refused():
    speedup = _load_speedup()
    default = [a[0] for a in speedup.select_arms("default", {}, None)]
    assert default == ["sandbox_rl", "wm_raw", "wmrl_no_debias", "wmrl_no_denoise", "wmrl"]
    named = {a[0]: a for a in speedup.select_arms("default", {}, ["wmrl", "wmrl_uncertainty", "wmrl_advantage"])}
    assert named["wmrl_uncertainty"][1:3] == ("wmrl", ["env.anchor_selection=uncertainty"])
    assert named["wmrl_advantage"][2] == ["env.anchor_selection=advantage"]
    with pytest.raises(ValueError, match="wmrl_uncertanty"):
        speedup.select_arms("default", {}, ["wmrl_uncertanty"])
    with pytest.raises(SystemExit):  # the command line says so before anything trains
        speedup.main(["--arms", "sandbox_rl,wmrl_typo", "--out", "/nonexistent"])


def test_a_variant_is_a_wmrl_arm_with_its_own_overrides_trained_beside_the_others(tmp_path):
    speedup = _load_speedup()
    variant = speedup.parse_variant("wmrl_rate33  env.anchor_rate=0.33 rl.lr=0.0002")
    assert variant == ("wmrl_rate33", ["env.anchor_rate=0.33", "rl.lr=0.0002"])
    arms = speedup.select_arms("default", {}, ["sandbox_rl"], [variant])
    assert arms == [("sandbox_rl", "sandbox_rl", [], {}), ("wmrl_rate33", "wmrl", ["env.anchor_rate=0.33", "rl.lr=0.0002"], {})]
    biased = speedup.select_arms("correlated", {"dummy": 0.4}, ["sandbox_rl"], [variant])
    assert biased[-1][3] == {"dummy": 0.4}  # a variant of the correlated scenario sees its world-model error too
    for bad in ("wmrl_rate33", "env.anchor_rate=0.3", "lbl rl.lr"):
        with pytest.raises(ValueError, match="--variant"):
            speedup.parse_variant(bad)
    with pytest.raises(ValueError, match="already name an arm"):
        speedup.select_arms("default", {}, None, [("wmrl", ["rl.lr=0.1"])])
    for argv in (["--variant", "v env.anchor_rat=0.3"], ["--variant", "wmrl_no_debias rl.lr=0.1"], ["--variant", "v"]):
        with pytest.raises(SystemExit):  # refused before anything trains (an unknown key, a clash, no override)
            speedup.main([*argv, "--out", str(tmp_path / "never")])
    assert not (tmp_path / "never").exists()
    results = speedup.run_benchmark(tmp_path / "b", "default", seeds=1, only=["sandbox_rl"], train_fn=_fake_train,
                                    variants=[variant])
    run = next(r for r in results["runs"] if r["arm"] == "wmrl_rate33")
    assert run["status"] == "ok" and "experiment=wmrl" in run["args"] and "env.anchor_rate=0.33" in run["args"]
    saved = json.loads((tmp_path / "b" / "results.json").read_text())
    assert [r["arm"] for r in saved["report"]["rows"]] == ["sandbox_rl", "wmrl_rate33"]


def test_warm_eval_key_ignores_what_only_training_reads_and_keeps_what_the_first_evaluation_reads():
    speedup = _load_speedup()
    key = speedup.warm_eval_key
    base = key(["experiment=wmrl", "seed=1"])
    assert base == key(["experiment=sandbox_rl", "seed=1", "rl.lr=0.001", "env.anchor_selection=advantage",
                        "run_dir=/elsewhere", "logger.run_name=x"])
    for other in ("seed=2", "policy.seed=3", "eval.samples_per_task=8", "generation.temperature=0.7", "task.eval=[iris]"):
        assert key(["experiment=wmrl", "seed=1", other]) != base, other
    assert key(["experiment=wmrl", "eval.at_start=false"]) is None


def test_the_warm_start_is_evaluated_once_per_seed_and_shared_by_the_later_arms(tmp_path):
    from mlflow.tracking import MlflowClient

    speedup = _load_speedup()
    results = speedup.run_benchmark(tmp_path / "b", "default", seeds=2, only=["sandbox_rl", "wmrl"], train_fn=_fake_train)
    runs = {(r["arm"], r["seed"]): r for r in results["runs"]}
    for seed in (0, 1):
        base, wm = runs[("sandbox_rl", seed)], runs[("wmrl", seed)]
        assert "eval.at_start=false" not in base["args"] and "eval.at_start=false" in wm["args"]
        assert wm["history"]["eval/real_reward"][0] == pytest.approx(0.3 + 0.01 * seed)  # its own seed's warm start
        assert wm["warm_eval_from"] == f"sandbox_rl-seed{seed}"
        client = MlflowClient(tracking_uri=results["mlflow"]["tracking_uri"])
        logged = client.get_metric_history(wm["summary"]["mlflow_run_id"], "eval/real_reward")
        assert {m.step: m.value for m in logged}[0] == pytest.approx(0.3 + 0.01 * seed)
    saved = json.loads((tmp_path / "b" / "results.json").read_text())
    row = next(r for r in saved["report"]["rows"] if r["arm"] == "wmrl")
    assert row["gains"] == pytest.approx([0.5, 0.49])  # final 0.8 minus each seed's shared warm-start evaluation
    alone = speedup.run_benchmark(tmp_path / "c", "default", seeds=1, only=["sandbox_rl", "wmrl"], train_fn=_fake_train,
                                  share_warm_eval_runs=False)
    assert all("eval.at_start=false" not in r["args"] for r in alone["runs"])


def test_reuse_takes_finished_trainings_with_the_same_arguments_and_trains_the_rest(tmp_path):
    speedup = _load_speedup()
    first = tmp_path / "first"
    speedup.run_benchmark(first, "default", seeds=1, overrides=["rl.steps=4"], only=["sandbox_rl", "wmrl"],
                          train_fn=_fake_train)
    trained = []

    def recording(args, log_path, bias):
        trained.append(next(a for a in args if a.startswith("experiment=")))
        return _fake_train(args, log_path, bias)

    out = tmp_path / "more"
    results = speedup.run_benchmark(out, "default", seeds=1, overrides=["rl.steps=4"],
                                    only=["sandbox_rl", "wm_raw", "wmrl"], train_fn=recording, reuse=[first])
    assert trained == ["experiment=wm_raw"]
    assert [(r["arm"], r.get("reused_from")) for r in results["runs"]] == [
        ("sandbox_rl", str(first)), ("wm_raw", None), ("wmrl", str(first))]
    assert "eval.at_start=false" in results["runs"][1]["args"]  # the reused baseline's warm-start evaluation
    saved = json.loads((out / "results.json").read_text())
    assert saved["complete"] and next(r for r in saved["report"]["rows"] if r["arm"] == "wm_raw")["vs_wmrl"]
    assert "| wm_raw |" in (out / "table.md").read_text() and "WARNING" not in (out / "table.md").read_text()
    trained.clear()
    speedup.run_benchmark(tmp_path / "other", "default", seeds=1, overrides=["rl.steps=5"], only=["sandbox_rl"],
                          train_fn=recording, reuse=[first])
    assert trained == ["experiment=sandbox_rl"]  # other arguments: trained again
    trained.clear()
    speedup.run_benchmark(tmp_path / "biased", "correlated", seeds=1, overrides=["rl.steps=4"],
                          only=["sandbox_rl", "wm_raw"], train_fn=recording, reuse=[out])
    assert trained == ["experiment=wm_raw"]  # the same arguments but a biased world model: trained again


def test_a_stopped_benchmark_kills_a_training_that_ignores_sigterm_and_stops(tmp_path, monkeypatch):
    """SIGTERM's SystemExit must end the benchmark even when the training outlives its grace period (the
    TimeoutExpired of the wait used to replace the stop: the arm read as failed and the next one started)."""
    import subprocess
    import sys
    import time

    speedup = _load_speedup()
    stubborn = [sys.executable, "-c", "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                      "open('started', 'w').close()\ntime.sleep(600)"]
    monkeypatch.setattr(speedup, "train_command", lambda args, bias: stubborn)
    monkeypatch.setattr(speedup, "ROOT", tmp_path)
    monkeypatch.setattr(speedup, "TERMINATE_GRACE_S", 0.5, raising=False)  # the code before it waited 60 s, then raised
    children = []
    real_wait = subprocess.Popen.wait

    def wait(self, timeout=None):
        if timeout is None:  # the benchmark's own wait: SIGTERM arrives while the training runs
            children.append(self)
            while not (tmp_path / "started").exists():
                time.sleep(0.05)
            raise SystemExit(143)
        return real_wait(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", wait)
    with pytest.raises(SystemExit):
        speedup.subprocess_train([f"run_dir={tmp_path}/run"], tmp_path / "log.txt", {})
    assert children and real_wait(children[0], timeout=5) == -9  # killed, not left running


def test_each_task_family_gets_its_final_gain_and_paired_difference_in_the_table():
    """A family the training set lacks (`eval/family/tables` here) is where a world-model-trained policy can fall
    behind while the overall held-out reward hides it: the report says so per family, with intervals over seeds."""
    def arm(name, seed, arrays, tables):
        r = _run(name, [10] * 4, [2] * 4, [1] * 4, {0: 0.4, 4: (arrays + tables) / 2}, 64, 75.0, seed=seed)
        r["history"].update({"eval/family/arrays": {0: 0.4, 4: arrays}, "eval/family/tables": {0: 0.2, 4: tables},
                             "eval/family/tables_ci95": {0: 0.05, 4: 0.05}})
        return r

    runs = [arm("sandbox_rl", s, 0.6, 0.5 + 0.02 * s) for s in range(3)] + [arm("wmrl", s, 0.6, 0.25 + 0.01 * s) for s in range(3)]
    report = stats.build_report(runs, ["sandbox_rl", "wmrl"])
    wm = next(r for r in report["rows"] if r["arm"] == "wmrl")
    assert sorted(wm["families"]) == ["arrays", "tables"]  # a _ci95 key is not a family
    tables = wm["families"]["tables"]
    assert tables["gain"]["mean"] == pytest.approx(0.06) and tables["gain_ratio"] == pytest.approx(0.06 / 0.32)
    assert tables["vs_baseline"]["mean"] == pytest.approx(-0.26) and tables["vs_baseline"]["significant"]
    assert wm["families"]["arrays"]["vs_baseline"]["significant"] is False  # the same reward on every seed
    text = render.render_markdown(report)
    assert "| tables | wmrl | 0.260 [" in text and "| arrays | sandbox_rl |" in text


def test_how_programs_end_per_family_and_over_training_with_intervals_and_a_figure(tmp_path):
    """Issue 27: where a world-model policy diverges (malformed programs on tables) is a table row and a bar."""
    def arm(name, seed, malformed):
        r = _run(name, [10] * 4, [2] * 4, [1] * 4, {0: 0.4, 4: 0.5}, 64, 75.0, seed=seed)
        r["history"].update({
            "eval/status/tables/malformed": {0: 0.5, 4: malformed}, "eval/status/tables/valid": {0: 0.5, 4: 1 - malformed},
            # training counts: step 1 all valid, step 4 one malformed of four; a status missing at a step is 0
            "train/status/valid": {1: 4.0, 2: 4.0, 3: 4.0, 4: 3.0}, "train/status/malformed": {4: 1.0},
            "proxy/wm_mean": {1: 0.6, 2: 0.7}, "proxy/real_mean": {1: 0.5, 2: 0.5}})
        return r

    runs = [arm("sandbox_rl", s, 0.10) for s in range(3)] + [arm("wmrl", s, 0.40 + 0.01 * s) for s in range(3)]
    shares = stats.status_shares(runs[0]["history"])
    assert shares["training"][1] == {"malformed": 0.0, "valid": 1.0}
    assert shares["training"][4] == {"malformed": 0.25, "valid": 0.75}
    rows = stats.status_rows(runs, ["sandbox_rl", "wmrl"])
    assert [(r["family"], r["arm"]) for r in rows] == [("tables", "sandbox_rl"), ("tables", "wmrl"),
                                                        ("training", "sandbox_rl"), ("training", "wmrl")]
    wm = rows[1]
    assert wm["first"]["malformed"]["mean"] == pytest.approx(0.5) and wm["last"]["malformed"]["mean"] == pytest.approx(0.41)
    assert wm["last"]["malformed"]["lo"] < 0.41 < wm["last"]["malformed"]["hi"]
    assert rows[3]["last"]["malformed"]["mean"] == pytest.approx(0.25) and rows[3]["first"]["malformed"]["mean"] == 0.0
    text = "\n".join(render.status_section(rows))
    assert "| tables | wmrl | 0.50 → 0.41 [" in text and "| tables | sandbox_rl | 0.50 → 0.10 |" not in text
    curves = stats.proxy_curves(runs, "wmrl")
    assert curves["proxy/wm_mean"][2]["mean"] == pytest.approx(0.7) and curves["proxy/real_mean"][1]["mean"] == 0.5
    render.plot_programs(rows, stats.build_report(runs, ["sandbox_rl", "wmrl"]), runs, tmp_path / "programs.png")
    assert (tmp_path / "programs.png").stat().st_size > 10000
