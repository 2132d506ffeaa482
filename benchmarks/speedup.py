"""WMRL against real-execution GRPO and its ablations: training cost, real executions, held-out reward.

    python benchmarks/speedup.py [--quick] [--seeds N] [--out DIR] [--scenario default|correlated]
                                 [--bias CLASS=OFFSET,...] [--arms a,b,...] [key=value ...]
    python benchmarks/speedup.py --report DIR      re-render DIR/table.md etc. from DIR/results.json

Trains every arm (config presets `experiment=NAME`) with the same tasks, seeds and step count, back to
back on this machine, each in its own `python train.py` subprocess (a crashing arm is recorded as
failed with its stderr tail; the others still run). `key=value` overrides go to every arm.
Writes to DIR (default results/speedup-<time>/): table.md, results.json, cost_vs_reward.png, one log
per training under logs/, and to MLflow (DIR/mlruns.db): a parent run with the tables and one child
run per arm and seed.

Scenarios:
- default: sandbox_rl, wm_raw, wmrl_no_debias, wmrl_no_denoise, wmrl.
- correlated: the world model gets a class-correlated reward error (its world-model arms run
  `benchmarks/train_biased.py`, which wraps the world model in `wmrl.domains.research.world_model.biased`);
  sandbox_rl (the real-execution reference), wm_raw, and wmrl with the paper's single global
  isotonic map (wmrl_global: callbacks.debias.stratify_by=[]) against per-action-class debiasing
  (wmrl_stratified: stratify_by=[action_class]).
The report's statistics live in `wmrl.benchmark.stats`, its targets in `wmrl.benchmark.targets`,
its rendering in `wmrl.benchmark.render` (tested on fixed inputs).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from wmrl.benchmark import render, stats  # noqa: E402
from wmrl.benchmark import targets as tg  # noqa: E402
from wmrl.benchmark.format import fmt  # noqa: E402

# --quick: one seed, about 25 minutes on a 2-core CPU (96-sample evaluations at 0, 4, 8, 12); warm-up kept at about the
# default's share of the run (3 of 30 steps).
QUICK = ["rl.steps=12", "rollout.groups_per_step=4", "eval.every_n_steps=4", "env.warmup_steps=1"]
# --standard: 3 seeds, long enough for sandbox_rl's gain over its warm start to stand out of its interval
# (issue 13). Measured on the idle 2-core machine: sandbox_rl 12 min per seed (train 7.5 min, two 96-sample-per-task
# evaluations), wmrl 7 min (its warm-start evaluation shared), 57 min for both arms and 3 seeds once the one warm
# start (4 min) is cached. Evaluations at the warm start and the end only: a mid-run one costs as much as 6 steps.
# One warm start (policy.seed=0) for every seed: with a warm start of its own per seed, held-out reward at step 0
# was 0.360 / 0.488 / 0.198 and the gains' spread was the warm starts', not RL's (the bar could not be read).
STANDARD = ["rl.steps=24", "rollout.groups_per_step=6", "eval.every_n_steps=24", "env.warmup_steps=2", "policy.seed=0"]
# A weak class made to look strong: a valid dummy ranks near the bottom of every leaderboard (reward ~0.5-0.6),
# +0.4 lifts it above real forests inside a group, the error a policy can exploit and one global map cannot undo.
DEFAULT_BIAS = {"dummy": 0.4}
EXPERIMENT = "wmrl-speedup"
# metrics kept whatever their names: per task family and status at evaluation, per status over training, proxy vs real
PER_KIND_EVAL = ("eval/family/", "eval/status/", "eval/train_prompts")
PER_KIND = (*PER_KIND_EVAL, "train/status/", "proxy/", "debias/decided_", "denoise/weight_")
HISTORY = ["time/step_s", "time/generation_s", "time/policy_train_s", "time/env_real_s", "time/env_wm_s",
           "time/wm_train_s", "time/eval_s", "cost/real_executions", "cost/sandbox_slot_s", "eval/real_reward", "eval/real_reward_ci95",
           "reward/train_mean", "reward/real_mean", *stats.FIDELITY]


# Arms of the default scenario that run only when --arms names them: wmrl with its anchors chosen where the world
# model is least sure, or where the update would push hardest, instead of whole random groups.
SELECTION_ARMS = {"wmrl_uncertainty": "uncertainty", "wmrl_advantage": "advantage"}


def arms_of(scenario: str, bias: dict[str, float]) -> list[tuple[str, str, list[str], dict[str, float]]]:
    """(label, preset, overrides, world-model bias) of every arm the scenario knows; the first is the baseline."""
    if scenario == "default":
        return [*((a, a, [], {}) for a in ("sandbox_rl", "wm_raw", "wmrl_no_debias", "wmrl_no_denoise", "wmrl")),
                *((label, "wmrl", [f"env.anchor_selection={sel}"], {}) for label, sel in SELECTION_ARMS.items())]
    return [("sandbox_rl", "sandbox_rl", [], {}), ("wm_raw", "wm_raw", [], bias),
            ("wmrl_global", "wmrl", ["callbacks.debias.stratify_by=[]"], bias),
            ("wmrl_stratified", "wmrl", ["callbacks.debias.stratify_by=[action_class]"], bias)]


def train_command(args: list[str], bias: dict[str, float]) -> list[str]:
    """`python train.py ARGS`, or the biased-world-model entry point when the arm has a bias."""
    if not bias:
        return [sys.executable, str(ROOT / "train.py"), *args]
    spec = ",".join(f"{k}={v}" for k, v in bias.items())
    return [sys.executable, str(ROOT / "benchmarks" / "train_biased.py"), f"--bias={spec}", *args]


TERMINATE_GRACE_S = 60.0  # a stopped benchmark's training gets this long to exit on SIGTERM, then SIGKILL


def subprocess_train(args: list[str], log_path: Path, bias: dict[str, float]) -> dict:
    """Runs one training (`train_command`), output to log_path; the run's summary.json, or RuntimeError with the tail."""
    run_root = Path(next(a.split("=", 1)[1] for a in args if a.startswith("run_dir=")))
    with open(log_path, "w") as log:
        proc = subprocess.Popen(train_command(args, bias), cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT, env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
        try:
            rc = proc.wait()
        finally:  # a stopped benchmark must not leave its training running, nor go on to the next one
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=TERMINATE_GRACE_S)
                except subprocess.TimeoutExpired:  # raised here, it would replace the stop and read as a failed arm
                    proc.kill()
                    proc.wait()
    summaries = sorted(run_root.glob("*/summary.json"))
    if rc != 0 or not summaries:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"train.py exited with {rc}:\n{tail}")
    return json.loads(summaries[-1].read_text())


def metric_history(client, run_id: str) -> dict[str, dict[int, float]]:
    out = {}
    logged = client.get_run(run_id).data.metrics  # the families a run's evaluations reported are its own
    for key in HISTORY + sorted(k for k in logged if k.startswith(PER_KIND)):
        hist = client.get_metric_history(run_id, key)
        if hist:
            out[key] = {int(m.step): float(m.value) for m in sorted(hist, key=lambda m: (m.step, m.timestamp))}
    return out


# What a training runs: everything train.py imports or reads, not the benchmark's own report code.
TRAINING_CODE = ("train.py", "conf", "callbacks", "datamodules", "wmrl", "benchmarks/train_biased.py")
REPORT_CODE = "wmrl/benchmark/"


def code_version(commit: str = "HEAD") -> str:
    """The training code of `commit` (hash of its files' blob ids), plus a hash of uncommitted changes to it at
    HEAD: arms must all train with the same code; a change to the report alone keeps earlier trainings comparable."""
    import hashlib

    def git(*a):
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout

    tree = [line for line in git("ls-tree", "-r", commit, "--", *TRAINING_CODE).splitlines()
            if not line.split("\t", 1)[-1].startswith(REPORT_CODE)]
    if not tree:
        return "unknown"
    version = "train." + hashlib.sha1("\n".join(tree).encode()).hexdigest()[:10]
    if commit != "HEAD":
        return version
    diff = git("diff", "HEAD", "--", *TRAINING_CODE, f":(exclude){REPORT_CODE}")
    return version + (f"+dirty.{hashlib.sha1(diff.encode()).hexdigest()[:8]}" if diff else "")


def read_anchor_pairs(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "anchor_pairs.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def parse_variant(spec: str) -> tuple[str, list[str]]:
    """--variant "LABEL key=value ...": a wmrl arm with its own overrides (ValueError when malformed)."""
    label, *overrides = spec.split()
    if not label or "=" in label or not overrides:
        raise ValueError(f"--variant {spec!r}: expected 'LABEL key=value [key=value ...]'")
    bad = [o for o in overrides if "=" not in o or o.startswith("-")]
    if bad:
        raise ValueError(f"--variant {label}: {bad[0]!r} is not a key=value override")
    return label, overrides


def select_arms(scenario: str, bias: dict[str, float], only: list[str] | None,
                variants: list[tuple[str, list[str]]] = ()):
    """The arms to run: those --arms names (an unknown name is an error), else the scenario's default set; then
    each variant, a wmrl arm with its own overrides (with the scenario's world-model bias)."""
    known = arms_of(scenario, bias)
    clash = [v[0] for v in variants if v[0] in {a[0] for a in known}] + [
        v[0] for i, v in enumerate(variants) if v[0] in {w[0] for w in variants[:i]}]
    if clash:
        raise ValueError(f"variant label(s) {clash} already name an arm")
    extra = [(label, "wmrl", list(o), {} if scenario == "default" else dict(bias)) for label, o in variants]
    if only is None:
        return [a for a in known if a[0] not in SELECTION_ARMS] + extra
    unknown = [o for o in only if o not in {a[0] for a in known}]
    if unknown:
        raise ValueError(f"unknown arm(s) {unknown} in scenario {scenario!r}; known: {[a[0] for a in known]}")
    return [a for a in known if a[0] in only] + extra


# Arguments that name a run's place and records, or only say whether it evaluates at step 0 itself.
RUN_SPECIFIC = ("run_dir=", "logger.", "eval.at_start=")


def comparable(args: list[str]) -> tuple[str, ...]:
    """A training's arguments without the run-specific ones: equal = the same training."""
    return tuple(a for a in args if not a.startswith(RUN_SPECIFIC))


def warm_eval_key(args: list[str]) -> str | None:
    """What a training's evaluation before step 1 depends on: its resolved config without what only RL, the
    world model, the corrections or the run's records read (held-out evaluation executes for real in every
    mode, from its own seeded stream). None when the training does not evaluate at step 0."""
    from omegaconf import OmegaConf

    from wmrl.config import load_config

    cfg = load_config([a for a in args if not a.startswith(("run_dir=", "logger."))])
    if not cfg.eval.at_start:
        return None
    plain = OmegaConf.to_container(cfg, resolve=True)
    for key in ("name", "run_dir", "resume", "logger", "rl", "env", "world_model", "callbacks"):
        plain.pop(key)
    plain["trainer"].pop("progress_bar")
    return json.dumps(plain, sort_keys=True, default=str)


def finished_runs(dirs: list[Path]) -> dict[tuple, dict]:
    """(arm, seed, comparable args, world-model bias) -> each successful training of earlier benchmarks in `dirs`, its history
    read again from that benchmark's MLflow store (metrics added to HISTORY since are then there too)."""
    from mlflow.tracking import MlflowClient

    found = {}
    for d in dirs:
        path = Path(d) / "results.json"
        if not path.exists():
            raise FileNotFoundError(f"--reuse {d}: no results.json there")
        results = json.loads(path.read_text())
        client = MlflowClient(tracking_uri=results["mlflow"]["tracking_uri"])
        for r in _int_keys(results["runs"]):
            if r["status"] != "ok":
                continue
            try:
                r["history"] = {**r["history"], **metric_history(client, r["summary"]["mlflow_run_id"])}
            except Exception as e:  # the store moved or is gone: the saved history is still the run's
                print(f"[speedup] {r['arm']}-seed{r['seed']} from {d}: saved history ({type(e).__name__})", flush=True)
            if r.get("code") and not r["code"].startswith(("train.", "unknown")) and "+dirty" not in r["code"]:
                r["code"] = code_version(r["code"])  # recorded as a commit by earlier versions of this script
            found[(r["arm"], r["seed"], comparable(r["args"]), json.dumps(r.get("bias") or {}, sort_keys=True))] = {
                **r, "reused_from": str(d)}
    return found


def share_warm_eval(run: dict, source: dict, client) -> None:
    """Give `run` (trained with eval.at_start=false) the step-0 evaluation of `source`: the same policy before
    step 1, evaluated on the same stream, so the same numbers; recorded in the run and in its MLflow run."""
    for key in ("eval/real_reward", "eval/real_reward_ci95", *sorted(k for k in source["history"] if k.startswith(PER_KIND_EVAL))):
        if 0 in (source["history"].get(key) or {}):
            run["history"].setdefault(key, {})[0] = source["history"][key][0]
            client.log_metric(run["summary"]["mlflow_run_id"], key, source["history"][key][0], step=0)
    run["warm_eval_from"] = f"{source['arm']}-seed{source['seed']}"
    client.set_tag(run["summary"]["mlflow_run_id"], "wmrl.warm_eval_from", run["warm_eval_from"])


def run_benchmark(out: Path, scenario: str = "default", seeds: int = 1, overrides: list[str] = (),
                  bias: dict[str, float] | None = None, only: list[str] | None = None,
                  train_fn: Callable[[list[str], Path, dict], dict] = subprocess_train, note: str = "",
                  pretrained: dict | None = None, reuse: list[Path] = (), share_warm_eval_runs: bool = True,
                  variants: list[tuple[str, list[str]]] = ()) -> dict:
    """Trains every (arm, seed) back to back, collects MLflow histories, writes the report files.
    `pretrained`: a `wmrl.domains.research.world_model.pretrain` result every world-model arm starts from, with no real warm-up steps.
    `reuse`: earlier benchmark directories whose successful trainings with the same arguments are taken as they
    are instead of trained again (a stopped benchmark resumes; arms are added to a finished one).
    `share_warm_eval_runs`: a training whose evaluation at step 0 would repeat an earlier one of this benchmark
    (`warm_eval_key`) skips it and takes that one's numbers.
    `variants`: (label, overrides) of extra wmrl arms (`select_arms`)."""
    from mlflow.tracking import MlflowClient

    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    uri = f"sqlite:///{out.resolve()}/mlruns.db"
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(EXPERIMENT)
    exp_id = exp.experiment_id if exp else client.create_experiment(EXPERIMENT)
    bias = dict(DEFAULT_BIAS if bias is None else bias)
    arms = select_arms(scenario, bias, only, variants)
    earlier = finished_runs(list(reuse))
    parent = client.create_run(exp_id, run_name=f"speedup-{scenario}-{out.name}")
    pid = parent.info.run_id
    for k, v in {"scenario": scenario, "seeds": seeds, "overrides": " ".join(overrides),
                 "arms": ",".join(a[0] for a in arms), "bias": json.dumps(bias) if scenario == "correlated" else ""}.items():
        client.log_param(pid, k, str(v)[:500])

    def results_of(runs: list[dict]) -> dict:
        return {"scenario": scenario, "seeds": seeds, "overrides": list(overrides), "bias": bias if scenario == "correlated" else {},
                "arms": [a[0] for a in arms], "command": " ".join(["python", "benchmarks/speedup.py", *sys.argv[1:]]),
                "note": note, "mlflow": {"tracking_uri": uri, "parent_run_id": pid}, "runs": runs,
                "pretrained": pretrained, "complete": len(runs) == seeds * len(arms)}

    runs, warm_evals = [], {}  # warm_evals: warm_eval_key -> the first finished run that evaluated at step 0
    for seed in range(seeds):
        for label, preset, arm_overrides, arm_bias in arms:
            name = f"{label}-seed{seed}"
            args = [f"experiment={preset}", f"seed={seed}", f"run_dir={out.resolve()}/runs/{name}",
                    f"logger.tracking_uri={uri}", f"logger.experiment_name={EXPERIMENT}", f"logger.parent_run_id={pid}",
                    f"logger.run_name={name}", "trainer.progress_bar=false", *arm_overrides, *overrides]
            if pretrained is not None and label != stats.BASELINE:  # an informed world model replaces the real warm-up
                args += [f"world_model.init={pretrained['path']}", "env.warmup_steps=0"]
            key = warm_eval_key(args) if share_warm_eval_runs else None
            done = earlier.get((label, seed, comparable(args), json.dumps(arm_bias, sort_keys=True)))
            if done is not None:
                print(f"[speedup] {name}: taken from {done['reused_from']} (same arguments)", flush=True)
                runs.append(done)
                if key is not None and 0 in (done["history"].get("eval/real_reward") or {}):
                    warm_evals.setdefault(key, done)
                write_report(out, results_of(runs))
                continue
            source = warm_evals.get(key) if key is not None else None
            if source is not None:
                args.append("eval.at_start=false")
            print(f"[speedup] {name}: {' '.join(train_command(args, arm_bias)[1:])}"
                  + (f" (step-0 evaluation from {source['arm']}-seed{source['seed']})" if source else ""), flush=True)
            t0 = time.perf_counter()
            run = {"arm": label, "seed": seed, "args": args, "bias": arm_bias, "status": "ok", "error": None, "summary": {}, "history": {},
                   "anchor_pairs": [], "params": {}, "code": code_version()}
            try:
                run["summary"] = train_fn(args, out / "logs" / f"{name}.log", arm_bias)
                run["history"] = metric_history(client, run["summary"]["mlflow_run_id"])
                run["params"] = client.get_run(run["summary"]["mlflow_run_id"]).data.params
                run["anchor_pairs"] = read_anchor_pairs(run["summary"]["run_dir"])
                if source is not None:
                    share_warm_eval(run, source, client)
                elif key is not None and 0 in (run["history"].get("eval/real_reward") or {}):
                    warm_evals.setdefault(key, run)
            except Exception as e:  # one failed arm is a row of the report, not the end of the benchmark
                run["status"], run["error"] = "failed", f"{type(e).__name__}: {e}"[-3000:]
            run["wall_s"] = time.perf_counter() - t0
            print(f"[speedup] {name}: {run['status']} in {run['wall_s']:.0f}s "
                  f"(eval {fmt(stats.final_eval(run)) if run['status'] == 'ok' else '-'})", flush=True)
            runs.append(run)
            write_report(out, results_of(runs))  # a stopped benchmark keeps every finished training's numbers

    results = results_of(runs)
    rendered = write_report(out, results)
    for k, v in rendered["metrics"].items():
        client.log_metric(pid, k, v)
    for name in ("table.md", "results.json", "cost_vs_reward.png", "programs.png"):
        if (out / name).exists():
            client.log_artifact(pid, str(out / name))
    failed = any(r["status"] != "ok" for r in runs)
    client.set_terminated(pid, "FAILED" if failed else "FINISHED")
    return results


def write_report(out: Path, results: dict) -> dict:
    """results.json -> table.md, cost_vs_reward.png; returns the report and flat metrics for MLflow."""
    arms, runs = results["arms"], results["runs"]
    wmrl_arm = "wmrl_stratified" if results["scenario"] == "correlated" else "wmrl"
    report = stats.build_report(runs, arms, wmrl=wmrl_arm)
    ok = [r for r in runs if r["status"] == "ok"]
    report["config_drift"] = stats.config_drift({f"{r['arm']}-seed{r['seed']}": r.get("params", {}) for r in ok},
                                                set_by_benchmark={a.split("=", 1)[0] for r in ok for a in r.get("args", [])})
    report["code_versions"] = {f"{r['arm']}-seed{r['seed']}": r.get("code", "unknown") for r in runs}
    pairs = [p for r in runs if r["arm"] != stats.BASELINE and r["status"] == "ok" for p in r.get("anchor_pairs", [])]
    strata = stats.stratum_table(pairs)
    recovered = stats.recovery(report, [a for a in arms if a != stats.BASELINE]) if results["scenario"] == "correlated" else []
    header = (f"# Speedup benchmark ({results['scenario']})\n\n`{results['command']}` — {results['seeds']} seed(s); "
              f"overrides: `{' '.join(results['overrides']) or 'none'}`"
              + (f"; injected WM bias: `{json.dumps(results['bias'])}`" if results["bias"] else "") + "\n")
    failures = [f"- {r['arm']} seed {r['seed']} FAILED: ```{r['error'][-800:]}```" for r in runs if r["status"] != "ok"]
    if failures:
        header += "\n" + "\n".join(failures) + "\n"
    if results.get("pretrained"):
        wm_runs = sum(r["arm"] != stats.BASELINE and r["status"] == "ok" for r in runs)
        header += render.pretrain_section(report, results["pretrained"], wm_runs)
    md = render.render_markdown(report, strata, recovered, header=header, show_targets=results["scenario"] == "default")
    programs = stats.status_rows(ok, arms)
    md += "\n".join(render.status_section(programs)) + ("\n\n![programs](programs.png)\n" if programs else "")
    md += render.run_reports_section(runs, out)
    (out / "table.md").write_text(md)
    results = {**results, "report": report, "programs": programs,
               "targets": tg.check(report) if results["scenario"] == "default" else [],
               "recovery": recovered, "strata": strata}
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    render.plot_cost_vs_reward(report, out / "cost_vs_reward.png", runs)
    if programs:
        render.plot_programs(programs, report, ok, out / "programs.png")
    metrics = {}
    for row in report["rows"]:
        for k, v in {"train_cost_s": row["train_cost_s"], "final_eval": row["final_eval"]["mean"],
                     "real_executions": row["real_executions"], "speedup": row["speedup"]["actual"],
                     "realised": row["speedup"]["realised"]}.items():
            if v is not None:
                metrics[f"{row['arm']}/{k}"] = float(v)
    return {"report": report, "markdown": md, "metrics": metrics}


def _int_keys(runs: list[dict]) -> list[dict]:
    """JSON turned the step keys of histories into strings; turn them back."""
    for r in runs:
        r["history"] = {m: {int(s): v for s, v in h.items()} for m, h in r.get("history", {}).items()}
    return runs


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds, so the running arm is terminated too
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help=f"one seed and a short run: {' '.join(QUICK)}")
    p.add_argument("--standard", action="store_true", help=f"3 seeds, a run that can show learning: {' '.join(STANDARD)}")
    p.add_argument("--seeds", type=int, default=None, help="seeds per arm (default 3, 1 with --quick)")
    p.add_argument("--out", type=Path, default=None, help="results directory (default results/speedup-<time>)")
    p.add_argument("--scenario", choices=["default", "correlated"], default="default")
    p.add_argument("--bias", default=None, help="correlated scenario: CLASS=OFFSET,... added to WM rewards "
                                                f"(default {','.join(f'{k}={v}' for k, v in DEFAULT_BIAS.items())})")
    p.add_argument("--arms", default=None, help="comma-separated subset of the scenario's arms")
    p.add_argument("--variant", action="append", default=[], metavar="'LABEL key=value ...'",
                   help="an extra wmrl arm with its own overrides, run beside the others (repeatable), e.g. "
                        "--variant 'wmrl_rate33 env.anchor_rate=0.33'")
    p.add_argument("--report", type=Path, default=None, help="only re-render the report of an existing DIR")
    p.add_argument("--reuse", type=Path, action="append", default=[], metavar="DIR",
                   help="take the successful trainings of an earlier benchmark DIR that had the same arguments "
                        "instead of training them again (repeatable; DIR = --out resumes a stopped benchmark)")
    p.add_argument("--no-share-warm-eval", action="store_true",
                   help="every training evaluates its warm start itself (default: one evaluation per warm start)")
    p.add_argument("--pretrain-wm", action="store_true",
                   help="world-model arms start from a world model pretrained on the training tasks, with no real "
                        "warm-up steps (its one-time cost reported)")
    args, rest = p.parse_known_args(argv)
    bad = [a for a in rest if "=" not in a or a.startswith("-")]
    if bad:
        p.error(f"unrecognised argument {bad[0]!r} (config overrides are key=value)")
    if args.report is not None:
        results = json.loads((args.report / "results.json").read_text())
        results["runs"] = _int_keys(results["runs"])
        print(write_report(args.report, results)["markdown"])
        return 0
    bias = None
    if args.bias:
        bias = {k.strip(): float(v) for k, v in (kv.split("=", 1) for kv in args.bias.split(","))}
    seeds = args.seeds or (1 if args.quick else 3)
    out = args.out or ROOT / "results" / f"speedup-{time.strftime('%Y%m%d-%H%M%S')}"
    if args.quick and args.standard:
        p.error("--quick and --standard are exclusive")
    overrides = [*(QUICK if args.quick else STANDARD if args.standard else []), *rest]
    t0 = time.perf_counter()
    only = args.arms.split(",") if args.arms else None
    try:
        variants = [parse_variant(v) for v in args.variant]
        select_arms(args.scenario, DEFAULT_BIAS if bias is None else bias, only, variants)
        from wmrl.config import ConfigError, load_config
        for label, o in variants:  # a broken override fails here, not after the other arms have trained
            try:
                load_config(["experiment=wmrl", *o, *overrides])
            except ConfigError as e:
                raise ValueError(f"--variant {label}: {e}") from e
    except ValueError as e:
        p.error(str(e))
    missing = [str(d) for d in args.reuse if not (d / "results.json").exists()]
    if missing:
        p.error(f"--reuse: no results.json in {', '.join(missing)}")
    pretrained = None
    if args.pretrain_wm:
        from wmrl.config import load_config
        from wmrl.domains.research.world_model.pretrain import pretrain

        pretrained = pretrain(load_config(["experiment=wmrl", *overrides]))
        print(f"[speedup] pretrained world model: {json.dumps(pretrained)}", flush=True)
    results = run_benchmark(out, args.scenario, seeds, overrides, bias, only, pretrained=pretrained, reuse=args.reuse,
                            share_warm_eval_runs=not args.no_share_warm_eval, variants=variants)
    print((out / "table.md").read_text())
    print(f"[speedup] {len(results['runs'])} trainings in {time.perf_counter() - t0:.0f}s; results in {out}")
    return 1 if any(r["status"] != "ok" for r in results["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
