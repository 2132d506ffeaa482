"""The benchmark's targets as data (the bar of the issue being measured), and their check
against a built report. Changing a target is a change of `TARGETS` alone."""
from __future__ import annotations

from wmrl.benchmark.format import fmt, fmt_ci
from wmrl.benchmark.stats import intervals_overlap

# name -> threshold; the text of each target says what it compares (issue 13's bar)
TARGETS = {
    "baseline_gain_intervals": 2.0,  # sandbox_rl's mean gain over its warm start, in 95% half-widths
    "quality_margin": 0.02,  # wmrl's final eval may trail sandbox_rl's by this much (with overlapping intervals)
    "train_cost_ratio_max": 0.40,  # wmrl training cost / sandbox_rl's (stretch: 0.30, the paper's 3.4x)
    "time_to_target_min": 2.5,  # sandbox_rl's time to target / wmrl's
    "realised_min": 0.8,  # realised fraction of the ideal speedup
}


def _half(ci: dict) -> float | None:
    return None if ci.get("hi") is None else ci["hi"] - ci["mean"]


def check(report: dict) -> list[dict]:
    """`TARGETS`, each with its measured value and pass/fail (None = could not be measured)."""
    rows = {r["arm"]: r for r in report["rows"]}
    w, b = rows.get(report["wmrl_arm"]), rows.get(report["baseline"])
    out = []
    if b is not None:
        g, gains, k = b["gain"], b["gains"], TARGETS["baseline_gain_intervals"]
        half = _half(g)
        out.append({"target": f"{b['arm']} ends above its warm start in every seed, mean gain >= {k:g} x its 95% half-width",
                    "measured": f"gain {fmt_ci(g)}; per seed " + ", ".join(fmt(x) for x in gains),
                    "passed": None if half is None or not gains else
                    (all(x is not None and x > 0 for x in gains) and g["mean"] >= k * half)})
    if w is None or b is None:
        return out
    wf, bf, margin = w["final_eval"], b["final_eval"], TARGETS["quality_margin"]
    overlap = intervals_overlap(wf, bf)
    quality = None if wf["mean"] is None or bf["mean"] is None else \
        (wf["mean"] >= bf["mean"] or (wf["mean"] >= bf["mean"] - margin and bool(overlap)))
    d = w["vs_baseline"]
    out.append({"target": f"{w['arm']} final eval >= {b['arm']}'s, or within {margin:g} with overlapping 95% intervals",
                "measured": f"{fmt_ci(wf)} vs {fmt_ci(bf)}; paired difference {fmt_ci(d)}"
                            + ("" if d.get("significant") is None else (" (significant)" if d["significant"] else " (not significant)")),
                "passed": quality})
    common = sorted(set(w["eval_points"]) & set(b["eval_points"]))
    below = [s for s in common if _half(b["eval_points"][s]) is not None and
             w["eval_points"][s]["mean"] < b["eval_points"][s]["mean"] - _half(b["eval_points"][s])]
    out.append({"target": f"no evaluation point of {w['arm']} more than one 95% half-width below {b['arm']}'s",
                "measured": ("below at steps " + ", ".join(map(str, below))) if below else f"none below ({len(common)} points)",
                "passed": None if not common or _half(b["eval_points"][common[-1]]) is None else not below})
    cost = w["ratio"]["train_cost"]
    out.append({"target": f"{w['arm']} training cost <= {TARGETS['train_cost_ratio_max']:g} x {b['arm']}'s (stretch 0.30)",
                "measured": f"cost ratio {fmt(cost, 3)}",
                "passed": None if cost is None else cost <= TARGETS["train_cost_ratio_max"]})
    ttt = w["speedup"]["time_to_target"]
    out.append({"target": f"time to target {b['arm']} / {w['arm']} >= {TARGETS['time_to_target_min']:g}",
                "measured": fmt(ttt, 2) if ttt is not None else
                ("not reached" if w["time_to_target_s"] is None and b["time_to_target_s"] is not None else
                 "n/a (no target: the baseline did not gain)" if report["target_reward"] is None else "n/a"),
                "passed": None if b["time_to_target_s"] is None else (ttt is not None and ttt >= TARGETS['time_to_target_min'])})
    realised = w["speedup"]["realised"]
    out.append({"target": f"realised fraction of the ideal speedup >= {TARGETS['realised_min']:g}",
                "measured": f"{fmt(realised, 2)} (actual {fmt(w['speedup']['actual'], 2)}x of ideal "
                            f"{fmt(w['speedup']['ideal'], 2)}x)",
                "passed": None if realised is None else realised >= TARGETS['realised_min']})
    abl = report["ablation"]
    if len(abl["order"]) >= 2:
        out.append({"target": "ablation ordering as in the paper (" + " > ".join(abl["expected"]) + ")",
                    "measured": " > ".join(abl["order"]), "passed": abl["matches_paper"]})
    return out
