"""The benchmark's targets as data (the bar of the issue being measured), and their check
against a built report. Changing a target is a change of `TARGETS` alone."""
from __future__ import annotations

from wmrl.benchmark.format import fmt, fmt_ci
from wmrl.benchmark.stats import intervals_overlap

# name -> threshold; the text of each target says what it compares
TARGETS = {
    "train_cost_ratio_max": 0.25,  # wmrl training cost / sandbox_rl's
    "time_to_target_min": 4.0,  # sandbox_rl's time to target / wmrl's
    "realised_min": 0.8,  # realised fraction of the ideal speedup
}


def check(report: dict) -> list[dict]:
    """`TARGETS`, each with its measured value and pass/fail (None = could not be measured)."""
    rows = {r["arm"]: r for r in report["rows"]}
    w, b = rows.get(report["wmrl_arm"]), rows.get(report["baseline"])
    out = []
    if w is None or b is None:
        return out
    cost = w["ratio"]["train_cost"]
    wf, bf = w["final_eval"], b["final_eval"]
    overlap = intervals_overlap(wf, bf)
    quality = None if wf["mean"] is None or bf["mean"] is None else (wf["mean"] >= bf["mean"] or bool(overlap))
    out.append({"target": f"{w['arm']} training cost <= {TARGETS['train_cost_ratio_max']:g} x {b['arm']}'s, final eval reward at least as high "
                          "(mean >= or 95% intervals overlapping)",
                "measured": f"cost ratio {fmt(cost, 3)}; eval {fmt_ci(wf)} vs {fmt_ci(bf)}",
                "passed": None if cost is None or quality is None else (cost <= TARGETS['train_cost_ratio_max'] and quality)})
    ttt = w["speedup"]["time_to_target"]
    out.append({"target": f"time to target {b['arm']} / {w['arm']} >= {TARGETS['time_to_target_min']:g}",
                "measured": fmt(ttt, 2) if ttt is not None else
                ("not reached" if w["time_to_target_s"] is None else "n/a"),
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

