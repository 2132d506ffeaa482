"""The arithmetic of the speedup benchmark, as pure functions on plain data (no MLflow, no training).

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

BASELINE = "sandbox_rl"
# The paper's ablation: each correction helps, debiasing more than denoising, both best.
PAPER_ORDER = ("wmrl", "wmrl_no_denoise", "wmrl_no_debias", "wm_raw")
FIDELITY = ("wm/spearman", "wm/mae", "wm/coverage_2sigma")
TARGET_FRACTION = 0.95  # time to target: first evaluation at or above this share of the baseline's final reward


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
        if _finite(evals[step]) and evals[step] >= target and step in cum_cost:
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


def final_eval(run: dict) -> float | None:
    evals = run["history"].get("eval/real_reward") or {}
    if evals:
        return evals[max(evals)]
    return run.get("summary", {}).get("eval/real_reward")


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
        "fidelity": fidelity,
        "step_s": mean(per_step_mean(r, ["time/step_s"]) for r in ok),
        "gen_plus_train_s": mean(per_step_mean(r, ["time/generation_s", "time/policy_train_s"]) for r in ok),
        "eval_curve": mean_curve(curves),
        "cost_curve": mean_curve(costs),
    }


def ablation_order(rows: Sequence[dict], arms: Sequence[str] = PAPER_ORDER) -> dict:
    """Measured order of the world-model arms by mean final eval reward, and whether it is the paper's."""
    present = [r for r in rows if r["arm"] in arms and r["final_eval"]["mean"] is not None]
    order = [r["arm"] for r in sorted(present, key=lambda r: -r["final_eval"]["mean"])]
    expected = [a for a in arms if a in order]
    return {"order": order, "expected": expected, "matches_paper": order == expected and len(order) == len(arms)}


def build_report(runs: Sequence[dict], arms: Sequence[str], baseline: str = BASELINE, wmrl: str = "wmrl",
                 target_fraction: float = TARGET_FRACTION) -> dict:
    """Every number of the tables: rows with ratios to the baseline, time to target, ideal speedup."""
    by_arm: dict[str, list[dict]] = defaultdict(list)
    for r in runs:
        by_arm[r["arm"]].append(r)
    rows = [arm_row(a, by_arm.get(a, [])) for a in arms]
    base = next((r for r in rows if r["arm"] == baseline), None)
    base_final = base["final_eval"]["mean"] if base else None
    target = target_fraction * base_final if _finite(base_final) else None
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
        actual = ratio(b.get("train_cost_s"), row["train_cost_s"])  # speedup = baseline cost / arm cost
        ideal = ideal_speedup(b.get("step_s"), row["gen_plus_train_s"]) if row["arm"] != baseline else None
        row["speedup"] = {"actual": actual, "ideal": ideal, "realised": ratio(actual, ideal),
                          "time_to_target": ratio(b.get("time_to_target_s"), row["time_to_target_s"])}
    return {"baseline": baseline, "wmrl_arm": wmrl, "target_fraction": target_fraction, "target_reward": target,
            "rows": rows, "ablation": ablation_order(rows)}


def targets(report: dict) -> list[dict]:
    """The issue's targets, each with its measured value and pass/fail (None = could not be measured)."""
    rows = {r["arm"]: r for r in report["rows"]}
    w, b = rows.get(report["wmrl_arm"]), rows.get(report["baseline"])
    out = []
    if w is None or b is None:
        return out
    cost = w["ratio"]["train_cost"]
    wf, bf = w["final_eval"], b["final_eval"]
    overlap = intervals_overlap(wf, bf)
    quality = None if wf["mean"] is None or bf["mean"] is None else (wf["mean"] >= bf["mean"] or bool(overlap))
    out.append({"target": f"{w['arm']} training cost <= 1/4 of {b['arm']}'s, final eval reward at least as high "
                          "(mean >= or 95% intervals overlapping)",
                "measured": f"cost ratio {_fmt(cost, 3)}; eval {_fmt_ci(wf)} vs {_fmt_ci(bf)}",
                "passed": None if cost is None or quality is None else (cost <= 0.25 and quality)})
    ttt = w["speedup"]["time_to_target"]
    out.append({"target": f"time to target {b['arm']} / {w['arm']} >= 4",
                "measured": _fmt(ttt, 2) if ttt is not None else
                ("not reached" if w["time_to_target_s"] is None else "n/a"),
                "passed": None if b["time_to_target_s"] is None else (ttt is not None and ttt >= 4)})
    realised = w["speedup"]["realised"]
    out.append({"target": "realised fraction of the ideal speedup >= 0.8",
                "measured": f"{_fmt(realised, 2)} (actual {_fmt(w['speedup']['actual'], 2)}x of ideal "
                            f"{_fmt(w['speedup']['ideal'], 2)}x)",
                "passed": None if realised is None else realised >= 0.8})
    abl = report["ablation"]
    if len(abl["order"]) >= 2:
        out.append({"target": "ablation ordering as in the paper (" + " > ".join(abl["expected"]) + ")",
                    "measured": " > ".join(abl["order"]), "passed": abl["matches_paper"]})
    return out


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
        reached = report["target_reward"] is not None and f["mean"] is not None and f["mean"] >= report["target_reward"]
        out.append({"arm": arm, "final_eval": f, "ratio": r["ratio"]["final_eval"],
                    "overlaps_baseline": intervals_overlap(f, b["final_eval"]), "recovers": reached})
    return out


# Keys that define an arm (or name a run); any other resolved config key must be equal across all runs.
ARM_KEYS = ("name", "seed", "run_dir", "resume", "env.mode", "callbacks.", "logger.", "world_model.inject_bias")


def config_drift(params: dict[str, dict[str, str]], arm_keys: Sequence[str] = ARM_KEYS) -> dict[str, dict]:
    """{key: {run: value}} for every non-arm config key whose value differs between runs (e.g. the code's
    defaults changed while the benchmark ran): those arms are not comparable."""
    keys = set().union(*(set(p) for p in params.values())) if params else set()
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
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for p in pairs:
        if _finite(p.get("wm_reward")) and _finite(p.get("real_reward")):
            groups[tuple(p.get(k, "") for k in keys)].append(p)
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


# ---- rendering ---------------------------------------------------------------------------------

def _fmt(x, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}f}"


def _fmt_ci(ci: dict, digits: int = 3) -> str:
    if ci["mean"] is None:
        return "n/a"
    if ci["lo"] is None:
        return f"{ci['mean']:.{digits}f} [n/a]"
    return f"{ci['mean']:.{digits}f} [{ci['lo']:.{digits}f}, {ci['hi']:.{digits}f}]"


def _x(r) -> str:
    return f" ({_fmt(r, 2)}x)" if r is not None else ""


def render_markdown(report: dict, strata: Sequence[dict] = (), recovered: Sequence[dict] = (),
                    header: str = "", show_targets: bool = True) -> str:
    b = report["baseline"]
    lines = [header] if header else []
    drift = report.get("config_drift") or {}
    versions = sorted(set((report.get("code_versions") or {}).values()))
    if drift or len(versions) > 1:
        lines += ["**WARNING: the arms did not run the same configuration or code; they are not comparable.**", ""]
        lines += [f"- `{k}`: " + ", ".join(f"{r}={v}" for r, v in vals.items()) for k, vals in drift.items()]
        if len(versions) > 1:
            lines += ["- code versions: " + ", ".join(f"{r}={v}" for r, v in report["code_versions"].items())]
        lines.append("")
    lines += [f"Ratios in parentheses are to `{b}`. Final eval reward: mean [95% t-interval over seeds]. "
              f"Time to target: training cost until the first evaluation >= {report['target_fraction']:.0%} of "
              f"`{b}`'s final eval reward ({_fmt(report['target_reward'])}).", "",
              "| arm | seeds | training cost s | real executions | sandbox slot-s | final eval reward | "
              "time to target s | WM spearman | WM MAE | WM 2σ coverage |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        q = r["ratio"]
        seeds = str(r["seeds"]) + (f" ({len(r['failed_seeds'])} failed)" if r["failed_seeds"] else "")
        ttt = "not reached" if r["time_to_target_s"] is None and r["seeds"] else _fmt(r["time_to_target_s"], 1)
        lines.append(
            f"| {r['arm']} | {seeds} | {_fmt(r['train_cost_s'], 1)}{_x(q['train_cost'])} | "
            f"{_fmt(r['real_executions'], 0)}{_x(q['real_executions'])} | "
            f"{_fmt(r['sandbox_slot_s'], 1)}{_x(q['sandbox_slot_s'])} | "
            f"{_fmt_ci(r['final_eval'])}{_x(q['final_eval'])} | {ttt}{_x(q['time_to_target'])} | "
            + " | ".join(_fmt(r["fidelity"][m]) for m in FIDELITY) + " |")
    lines += ["", "Speedup over `" + b + "` (training cost). Ideal = its mean step cost / the arm's mean "
              "(generation + policy update) time per step, i.e. world-model inference, anchors, warm-up and "
              "world-model training for free; realised = actual / ideal.", "",
              "| arm | actual speedup | ideal speedup | realised fraction | time-to-target speedup |",
              "|---|---|---|---|---|"]
    for r in report["rows"]:
        if r["arm"] == b:
            continue
        s = r["speedup"]
        lines.append(f"| {r['arm']} | {_fmt(s['actual'], 2)} | {_fmt(s['ideal'], 2)} | {_fmt(s['realised'], 2)} | "
                     f"{_fmt(s['time_to_target'], 2)} |")
    abl = report["ablation"]
    if len(abl["order"]) >= 2:
        lines += ["", f"Ablation order by final eval reward: {' > '.join(abl['order'])} "
                      f"(paper: {' > '.join(abl['expected'])}; matches: {'yes' if abl['matches_paper'] else 'no'})."]
    tg = targets(report) if show_targets else []
    if tg:
        lines += ["", "| target | measured | result |", "|---|---|---|"]
        lines += [f"| {t['target']} | {t['measured']} | "
                  f"{'n/a' if t['passed'] is None else ('PASS' if t['passed'] else 'FAIL')} |" for t in tg]
    if recovered:
        lines += ["", "Correlated world-model error: does a world-model arm recover the real-execution quality "
                      f"(final eval >= {report['target_fraction']:.0%} of `{b}`)?", "",
                  "| arm | final eval reward | vs baseline | intervals overlap | recovers |", "|---|---|---|---|---|"]
        for r in recovered:
            ov = r["overlaps_baseline"]
            lines.append(f"| {r['arm']} | {_fmt_ci(r['final_eval'])} | {_fmt(r['ratio'], 2)}x | "
                         f"{'n/a' if ov is None else ('yes' if ov else 'no')} | {'yes' if r['recovers'] else 'no'} |")
    if strata:
        lines += ["", "World model against real execution on anchors, per stratum (bias = mean(WM − real), "
                      "spread = std(WM − real), WM σ = sqrt(mean predicted variance)):", "",
                  "| task | action class | anchors | bias | spread | WM σ | real mean |", "|---|---|---|---|---|---|---|"]
        for s in strata:
            lines.append(f"| {s['task']} | {s['action_class']} | {s['n']} | {_fmt(s['bias'])} | {_fmt(s['spread'])} | "
                         f"{_fmt(s['wm_std'])} | {_fmt(s['real_mean'])} |")
    return "\n".join(lines) + "\n"


def plot_cost_vs_reward(report: dict, path) -> None:
    """Eval reward against cumulative training cost, one line per arm (mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in report["rows"]:
        pts = [(r["cost_curve"][s], v) for s, v in r["eval_curve"].items() if s in r["cost_curve"]]
        if pts:
            ax.plot(*zip(*pts), marker="o", label=r["arm"])
    if report["target_reward"] is not None:
        ax.axhline(report["target_reward"], color="grey", ls="--", lw=1,
                   label=f"target ({report['target_fraction']:.0%} of {report['baseline']})")
    ax.set_xlabel("cumulative training cost (s)")
    ax.set_ylabel("held-out eval reward (real execution)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
