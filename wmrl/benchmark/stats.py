"""The statistics of the speedup benchmark, as pure functions on plain data (no MLflow, no training).

A run is a dict: {"arm", "seed", "status": "ok" | "failed", "error", "summary": {...},
"history": {metric: {step: value}}} with the per-step `time/*`, cumulative `cost/*`,
`eval/real_reward` (step 0 = warm start) and `wm/*` metrics of one training.
Training cost of a run = sum of `time/step_s` (warm-up and world-model training included,
evaluation excluded), as defined in WMRL.md "Cost accounting".
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Iterable, Sequence

from wmrl.strata import stratum_keys

BASELINE = "sandbox_rl"


# The paper's ablation: each correction helps, debiasing more than denoising, both best.
PAPER_ORDER = ("wmrl", "wmrl_no_denoise", "wmrl_no_debias", "wm_raw")


FIDELITY = ("wm/spearman", "wm/mae", "wm/coverage_2sigma")


# Time to target (issue 13): training cost until the first evaluation at or above the baseline's warm start
# plus this share of its mean gain over the warm start; undefined when the baseline did not gain.
TARGET_GAIN_SHARE = 0.5
RECOVERY_FRACTION = 0.95  # correlated scenario: an arm recovers at this share of the baseline's final reward


# Keys that define an arm (or name a run); any other resolved config key must be equal across all runs.
ARM_KEYS = ("name", "seed", "run_dir", "resume", "env.mode", "callbacks.", "logger.")


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def mean(values: Iterable[float]) -> float | None:
    vals = [float(v) for v in values if _finite(v)]
    return sum(vals) / len(vals) if vals else None


def t_interval(values: Sequence[float], confidence: float = 0.95) -> dict:
    """Mean and two-sided Student-t interval over seeds; lo/hi are None with fewer than 2 values."""
    vals = [float(v) for v in values if _finite(v)]
    n = len(vals)
    if n == 0:
        return {"mean": None, "lo": None, "hi": None, "n": 0}
    m = sum(vals) / n
    if n < 2:
        return {"mean": m, "lo": None, "hi": None, "n": n}
    from scipy.stats import t

    half = float(t.ppf(0.5 + confidence / 2, n - 1)) * statistics.stdev(vals) / math.sqrt(n)
    return {"mean": m, "lo": m - half, "hi": m + half, "n": n}


def intervals_overlap(a: dict, b: dict) -> bool | None:
    """Whether two t_interval results overlap; None when either has no interval."""
    if None in (a.get("lo"), a.get("hi"), b.get("lo"), b.get("hi")):
        return None
    return a["lo"] <= b["hi"] and b["lo"] <= a["hi"]


def ratio(x: float | None, base: float | None) -> float | None:
    if not _finite(x) or not _finite(base) or base == 0:
        return None
    return x / base


def cumulative_cost(step_s: dict[int, float]) -> dict[int, float]:
    """step -> training cost spent up to and including that step; step 0 (before training) costs 0."""
    out, total = {0: 0.0}, 0.0
    for step in sorted(step_s):
        total += step_s[step]
        out[step] = total
    return out


def time_to_target(evals: dict[int, float], cum_cost: dict[int, float], target: float | None) -> float | None:
    """Cumulative training cost at the first evaluation whose reward is >= target; None = not reached."""
    if target is None:
        return None
    for step in sorted(evals):
        if _finite(evals[step]) and evals[step] >= target - 1e-9 and step in cum_cost:  # "at", up to rounding
            return cum_cost[step]
    return None


def mean_curve(curves: Sequence[dict[int, float]]) -> dict[int, float]:
    """Pointwise mean over seeds, on the steps every seed has."""
    if not curves:
        return {}
    steps = set.intersection(*(set(c) for c in curves))
    return {s: sum(c[s] for c in curves) / len(curves) for s in sorted(steps)}


def run_cost(run: dict) -> float | None:
    step_s = run["history"].get("time/step_s") or {}
    if step_s:
        return float(sum(step_s.values()))
    return run.get("summary", {}).get("cost/train_s")


EVAL = "eval/real_reward"  # every held-out task; a family's is f"{FAMILY}{name}"
FAMILY = "eval/family/"


def final_eval(run: dict, key: str = EVAL) -> float | None:
    evals = run["history"].get(key) or {}
    if evals:
        return evals[max(evals)]
    return run.get("summary", {}).get(key)


def warm_start_eval(run: dict, key: str = EVAL) -> float | None:
    """The evaluation before the first update (step 0)."""
    return (run["history"].get(key) or {}).get(0)


def gain(run: dict, key: str = EVAL) -> float | None:
    """Final eval reward minus the warm start's, in one run (None without both)."""
    first, last = warm_start_eval(run, key), final_eval(run, key)
    return last - first if _finite(first) and _finite(last) else None


def families(runs: Sequence[dict]) -> list[str]:
    """The task families the runs' evaluations reported (`eval/family/<name>`)."""
    return sorted({k[len(FAMILY):] for r in runs for k in r["history"] if k.startswith(FAMILY) and not k.endswith("_ci95")})


def eval_points(runs: Sequence[dict]) -> dict[int, dict]:
    """step -> t_interval over seeds of eval/real_reward, on the steps every run evaluated."""
    curves = [r["history"].get("eval/real_reward") or {} for r in runs]
    if not curves:
        return {}
    steps = set.intersection(*(set(c) for c in curves))
    return {s: t_interval([c[s] for c in curves]) for s in sorted(steps)}


def paired_difference(runs: Sequence[dict], other: Sequence[dict], key: str = EVAL) -> dict:
    """t_interval of final eval(run) - final eval(other) over the seeds both have (same seed = same warm start
    and tasks, so the pairing removes the seed-to-seed spread); `significant` when the interval excludes 0."""
    mine = {r["seed"]: final_eval(r, key) for r in runs if r.get("status") == "ok"}
    theirs = {r["seed"]: final_eval(r, key) for r in other if r.get("status") == "ok"}
    diffs = [mine[s] - theirs[s] for s in sorted(set(mine) & set(theirs)) if _finite(mine[s]) and _finite(theirs[s])]
    ci = t_interval(diffs)
    ci["significant"] = None if ci["lo"] is None else (ci["lo"] > 0 or ci["hi"] < 0)
    return ci


def eval_difference(run: dict, other: dict) -> dict:
    """Final eval of `run` minus `other`'s, one seed, with the 95 % interval of the two evaluations' sampling
    noise (independent evaluations: the half-widths of `eval/real_reward_ci95` add in quadrature). It says whether
    these two trained policies differ, not whether the arms do: RL's seed-to-seed spread is not in it."""
    a, b = final_eval(run), final_eval(other)
    if not (_finite(a) and _finite(b)):
        return {"mean": None, "lo": None, "hi": None, "significant": None}
    widths = [(r["history"].get("eval/real_reward_ci95") or {}) for r in (run, other)]
    steps = [max((r["history"].get("eval/real_reward") or {0: None})) for r in (run, other)]
    h = [w.get(s) for w, s in zip(widths, steps)]
    if not all(_finite(x) for x in h):
        return {"mean": a - b, "lo": None, "hi": None, "significant": None}
    half = math.hypot(*h)
    return {"mean": a - b, "lo": a - b - half, "hi": a - b + half, "significant": abs(a - b) > half}


def versus(runs: Sequence[dict], other: Sequence[dict]) -> dict:
    """An arm against another: the difference paired by seed (t over seeds) and, per seed, `eval_difference`."""
    theirs = {r["seed"]: r for r in other if r.get("status") == "ok"}
    by_seed = {r["seed"]: eval_difference(r, theirs[r["seed"]]) for r in runs
               if r.get("status") == "ok" and r["seed"] in theirs}
    return {"seeds": paired_difference(runs, other), "by_seed": dict(sorted(by_seed.items()))}


def per_step_mean(run: dict, metrics: Sequence[str]) -> float | None:
    """Mean over steps of the sum of the given per-step `time/*` metrics (a missing metric counts 0)."""
    steps = sorted(run["history"].get("time/step_s") or {})
    if not steps:
        return None
    return sum(sum((run["history"].get(m) or {}).get(s, 0.0) for m in metrics) for s in steps) / len(steps)


def ideal_speedup(baseline_step_s: float | None, arm_gen_plus_train_s: float | None) -> float | None:
    """Speedup if world-model inference, anchors, warm-up executions and WM training cost nothing:
    the baseline's mean step cost over the arm's mean (generation + policy update) time per step."""
    return ratio(baseline_step_s, arm_gen_plus_train_s)


def arm_row(arm: str, runs: Sequence[dict]) -> dict:
    """One arm's measurements, aggregated over its successful seeds."""
    ok = [r for r in runs if r.get("status") == "ok"]
    finals = [final_eval(r) for r in ok]
    fidelity = {m: mean(mean((r["history"].get(m) or {}).values()) for r in ok) for m in FIDELITY}
    curves = [r["history"].get("eval/real_reward") or {} for r in ok]
    costs = [cumulative_cost(r["history"].get("time/step_s") or {}) for r in ok]
    return {
        "arm": arm, "seeds": len(ok), "failed_seeds": [r["seed"] for r in runs if r.get("status") != "ok"],
        "train_cost_s": mean(run_cost(r) for r in ok),
        "real_executions": mean(r["summary"].get("cost/real_executions") for r in ok),
        "sandbox_slot_s": mean(r["summary"].get("cost/sandbox_slot_s") for r in ok),
        "final_eval": t_interval(finals),
        "warm_start": t_interval([warm_start_eval(r) for r in ok]),
        "gain": t_interval([gain(r) for r in ok]),
        "gains": [gain(r) for r in ok],
        "eval_points": eval_points(ok),
        "fidelity": fidelity,
        "step_s": mean(per_step_mean(r, ["time/step_s"]) for r in ok),
        "gen_plus_train_s": mean(per_step_mean(r, ["time/generation_s", "time/policy_train_s"]) for r in ok),
        "eval_curve": mean_curve(curves),
        "cost_curve": mean_curve(costs),
        "families": {name: {"final_eval": t_interval([final_eval(r, FAMILY + name) for r in ok]),
                            "warm_start": t_interval([warm_start_eval(r, FAMILY + name) for r in ok]),
                            "gain": t_interval([gain(r, FAMILY + name) for r in ok])} for name in families(ok)},
    }


def ablation_order(rows: Sequence[dict], arms: Sequence[str] = PAPER_ORDER) -> dict:
    """Measured order of the world-model arms by mean final eval reward, and whether it is the paper's: None (not
    judged) unless every arm of the paper's order was measured, since a subset's order says nothing about the rest."""
    present = [r for r in rows if r["arm"] in arms and r["final_eval"]["mean"] is not None]
    order = [r["arm"] for r in sorted(present, key=lambda r: -r["final_eval"]["mean"])]
    expected = [a for a in arms if a in order]
    return {"order": order, "expected": expected, "matches_paper": order == expected if len(order) == len(arms) else None}


def build_report(runs: Sequence[dict], arms: Sequence[str], baseline: str = BASELINE, wmrl: str = "wmrl",
                 target_gain_share: float = TARGET_GAIN_SHARE) -> dict:
    """Every number of the tables: rows with ratios to the baseline, time to target, ideal speedup."""
    by_arm: dict[str, list[dict]] = defaultdict(list)
    for r in runs:
        by_arm[r["arm"]].append(r)
    rows = [arm_row(a, by_arm.get(a, [])) for a in arms]
    base = next((r for r in rows if r["arm"] == baseline), None)
    base_final = base["final_eval"]["mean"] if base else None
    base_gain, base_warm = (base["gain"]["mean"], base["warm_start"]["mean"]) if base else (None, None)
    target = base_warm + target_gain_share * base_gain if _finite(base_gain) and base_gain > 0 else None
    for row in rows:
        row["time_to_target_s"] = time_to_target(row["eval_curve"], row["cost_curve"], target)
    for row in rows:
        b = base or {}
        row["ratio"] = {
            "train_cost": ratio(row["train_cost_s"], b.get("train_cost_s")),
            "real_executions": ratio(row["real_executions"], b.get("real_executions")),
            "sandbox_slot_s": ratio(row["sandbox_slot_s"], b.get("sandbox_slot_s")),
            "final_eval": ratio(row["final_eval"]["mean"], base_final),
            "time_to_target": ratio(row["time_to_target_s"], b.get("time_to_target_s")),
            **{m: ratio(row["fidelity"][m], (b.get("fidelity") or {}).get(m)) for m in FIDELITY},
        }
        row["vs_baseline"] = paired_difference(by_arm.get(row["arm"], []), by_arm.get(baseline, []))
        for name, fam in row["families"].items():
            fam["vs_baseline"] = paired_difference(by_arm.get(row["arm"], []), by_arm.get(baseline, []), FAMILY + name)
            base_gain = ((b.get("families") or {}).get(name) or {}).get("gain", {}).get("mean")
            fam["gain_ratio"] = ratio(fam["gain"]["mean"], base_gain) if _finite(base_gain) and base_gain > 0 else None
        if row["arm"] not in (baseline, wmrl) and by_arm.get(wmrl):  # ablations and anchor selections
            row["vs_wmrl"] = versus(by_arm.get(row["arm"], []), by_arm[wmrl])
        actual = ratio(b.get("train_cost_s"), row["train_cost_s"])  # speedup = baseline cost / arm cost
        ideal = ideal_speedup(b.get("step_s"), row["gen_plus_train_s"]) if row["arm"] != baseline else None
        row["speedup"] = {"actual": actual, "ideal": ideal, "realised": ratio(actual, ideal),
                          "time_to_target": ratio(b.get("time_to_target_s"), row["time_to_target_s"])}
    return {"baseline": baseline, "wmrl_arm": wmrl, "target_gain_share": target_gain_share, "target_reward": target,
            "recovery_reward": RECOVERY_FRACTION * base_final if _finite(base_final) else None,
            "rows": rows, "ablation": ablation_order(rows)}


def recovery(report: dict, wm_arms: Sequence[str]) -> list[dict]:
    """Correlated-error scenario: which world-model arm recovers the real-execution (baseline) quality."""
    rows = {r["arm"]: r for r in report["rows"]}
    b = rows.get(report["baseline"])
    out = []
    for arm in wm_arms:
        r = rows.get(arm)
        if r is None or b is None:
            continue
        f = r["final_eval"]
        reached = report["recovery_reward"] is not None and f["mean"] is not None and f["mean"] >= report["recovery_reward"]
        out.append({"arm": arm, "final_eval": f, "ratio": r["ratio"]["final_eval"],
                    "overlaps_baseline": intervals_overlap(f, b["final_eval"]), "recovers": reached})
    return out


def config_drift(params: dict[str, dict[str, str]], arm_keys: Sequence[str] = ARM_KEYS,
                 set_by_benchmark: Iterable[str] = ()) -> dict[str, dict]:
    """{key: {run: value}} for every non-arm config key whose value differs between runs (e.g. the code's
    defaults changed while the benchmark ran): those arms are not comparable. `set_by_benchmark`: keys
    the benchmark's own arguments set for some runs (an arm's selection, a pretrained world model, a
    shared warm-start evaluation), by design different."""
    keys = set().union(*(set(p) for p in params.values())) if params else set()
    arm_keys = (*arm_keys, *set_by_benchmark)
    out = {}
    for key in sorted(keys):
        if any(key == a or (a.endswith(".") and key.startswith(a)) or key.startswith(a + ".") for a in arm_keys):
            continue
        values = {run: p.get(key) for run, p in params.items()}
        if len(set(values.values())) > 1:
            out[key] = values
    return out


def stratum_table(pairs: Iterable[dict], keys: Sequence[str] = ("task", "action_class")) -> list[dict]:
    """World model against real execution per stratum, from anchor pairs (one dict per anchored program
    with wm_reward and real_reward): n, bias = mean(wm - real), spread = std(wm - real), mean WM std."""
    kept = [p for p in pairs if _finite(p.get("wm_reward")) and _finite(p.get("real_reward"))]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for key, p in zip(stratum_keys({k: [p.get(k, "") for p in kept] for k in keys}, keys) or [], kept):
        groups[key].append(p)
    out = []
    for key in sorted(groups):
        ps = groups[key]
        err = [p["wm_reward"] - p["real_reward"] for p in ps]
        var = [p["wm_var"] for p in ps if _finite(p.get("wm_var"))]
        out.append({**dict(zip(keys, key)), "n": len(ps), "bias": sum(err) / len(err),
                    "spread": statistics.stdev(err) if len(err) >= 2 else None,
                    "wm_std": math.sqrt(max(0.0, sum(var) / len(var))) if var else None,
                    "real_mean": sum(p["real_reward"] for p in ps) / len(ps)})
    return out


def with_pretrain_cost(cost: float | None, baseline_cost: float | None, pretrain_s: float, runs: int) -> dict:
    """A world-model arm's training cost with the one-time world-model pretraining added: all of it
    (charged to one run) and 1/runs of it (amortised over the runs that started from it)."""
    if cost is None:
        return {"charged": None, "charged_ratio": None, "amortised": None, "amortised_ratio": None}
    charged, amortised = cost + pretrain_s, cost + pretrain_s / max(runs, 1)
    return {"charged": charged, "charged_ratio": ratio(charged, baseline_cost),
            "amortised": amortised, "amortised_ratio": ratio(amortised, baseline_cost)}


STATUS = "eval/status/"  # eval/status/<family>/<status>: shares of a family's turns at one evaluation
TRAIN_STATUS = "train/status/"  # train/status/<status>: counts of one step's turns
TRAINING = "training"  # the pseudo-family of `status_shares` that holds the training turns


def status_shares(history: dict[str, dict[int, float]]) -> dict[str, dict[int, dict[str, float]]]:
    """How programs ended, from one run's history: {family: {step: {status: share}}} for each evaluated family
    (eval/status/*) and, under TRAINING, each training step's turns (train/status/* counts as shares). A status
    a step did not log had no turns there (share 0)."""
    out: dict[str, dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for key, series in history.items():
        if key.startswith(STATUS):
            family, status = key[len(STATUS):].rsplit("/", 1)
        elif key.startswith(TRAIN_STATUS):
            family, status = TRAINING, key[len(TRAIN_STATUS):]
        else:
            continue
        for step, value in series.items():
            out[family][step][status] = value
    shares = {}
    for family, steps in out.items():
        statuses = sorted({s for by in steps.values() for s in by})
        shares[family] = {}
        for step, by in sorted(steps.items()):
            total = sum(by.values()) if family == TRAINING else 1.0
            shares[family][step] = {s: by.get(s, 0.0) / total if total else 0.0 for s in statuses}
    return shares


def status_rows(runs: Sequence[dict], arms: Sequence[str]) -> list[dict]:
    """Per family and arm: each status's share at the warm start and at the final evaluation (training: over the
    first and the last quarter of the steps), as t-intervals over seeds. Where a world-model policy's programs
    diverge from a real-execution one's shows here first."""
    per_run = {id(r): status_shares(r["history"]) for r in runs if r.get("status") == "ok"}
    rows = []
    for family in sorted({f for s in per_run.values() for f in s}, key=lambda f: (f == TRAINING, f)):
        for arm in arms:
            mine = [per_run[id(r)][family] for r in runs
                    if r["arm"] == arm and id(r) in per_run and family in per_run[id(r)]]
            if not mine:
                continue
            statuses = sorted({s for by_step in mine for by in by_step.values() for s in by})
            ends = [_ends(by_step, family == TRAINING) for by_step in mine]
            rows.append({"family": family, "arm": arm, "statuses": statuses,
                         **{k: {s: t_interval([e[k].get(s, math.nan) for e in ends]) for s in statuses}
                            for k in ("first", "last")}})
    return rows


def _ends(by_step: dict[int, dict[str, float]], training: bool) -> dict[str, dict[str, float]]:
    """{"first", "last"}: status shares at a run's warm-start and final evaluation (none without a step-0 one) or,
    for training, averaged over the first and the last quarter of its steps."""
    steps = sorted(by_step)
    if training:
        k = max(1, len(steps) // 4)
        return {name: {s: sum(by_step[t].get(s, 0.0) for t in chosen) / len(chosen) for s in by_step[steps[0]]}
                for name, chosen in (("first", steps[:k]), ("last", steps[-k:]))}
    return {"first": by_step[0] if steps[0] == 0 else {}, "last": by_step[steps[-1]]}


def proxy_curves(runs: Sequence[dict], arm: str) -> dict[str, dict[int, dict]]:
    """proxy/wm_mean and proxy/real_mean of `arm`'s anchors per step: t-interval over its seeds at each step
    every seed logged (what the policy trained on against what real execution said)."""
    ok = [r for r in runs if r["arm"] == arm and r.get("status") == "ok"]
    out = {}
    for key in ("proxy/wm_mean", "proxy/real_mean"):
        series = [r["history"].get(key) or {} for r in ok]
        steps = sorted(set.intersection(*(set(s) for s in series))) if series and all(series) else []
        out[key] = {st: t_interval([s[st] for s in series]) for st in steps}
    return out
