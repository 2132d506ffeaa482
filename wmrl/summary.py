"""The end-of-run summary: what the run learnt, what it cost, and where to look next — computed only from
what the run logged (so `python -m wmrl.report` gives the same numbers for a killed run)."""
from __future__ import annotations

from wmrl.report.data import RunData, eval_interval

# time/* metrics that make up a step's training cost, and the part of the step each belongs to
SPLIT = {"generation": ("time/generation_s",), "real execution": ("time/env_real_s",),
         "world model": ("time/env_wm_s", "time/wm_train_s"), "update": ("time/policy_train_s",)}
FIDELITY = ("wm/spearman", "wm/mae", "wm/coverage_2sigma")


def _total(run: RunData, key: str) -> float:
    return float(sum(run.series(key).values()))


def _mean(values) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def summarize(run: RunData, checkpoint: str | None = None) -> dict:
    """Plain numbers (JSON-ready). Training cost = Σ time/step_s; its split sums the per-step `time/*`
    metrics, `other` being what they leave (corrections, waits, bookkeeping)."""
    evals = run.series("eval/real_reward")
    steps = sorted(run.series("time/step_s"))
    cost = _total(run, "time/step_s")
    split = {part: sum(_total(run, k) for k in keys) for part, keys in SPLIT.items()}
    split["other"] = max(0.0, cost - sum(split.values()))
    real = run.last("cost/real_executions") or 0.0
    cfg = run.config
    # a sandbox-only run executes every program of every step: groups × samples × turns per step (at most)
    per_step = (cfg["rollout"]["groups_per_step"] * cfg["rollout"]["group_size"] * cfg["rollout"]["turns"]
                if cfg.get("rollout") else None)
    # per-execution wall cost from the warm-up steps, where execution is synchronous (later anchors run in
    # the background, so their env_real_s is only the wait); the whole run's when there is no warm-up
    warm = [st for st in steps if st <= (cfg.get("env", {}).get("warmup_steps") or 0)]
    warm_execs = run.series("cost/real_executions").get(max(warm)) if warm else None
    if warm_execs:
        per_exec_s = sum(run.series("time/env_real_s").get(st, 0.0) for st in warm) / warm_execs
    else:
        per_exec_s = split["real execution"] / real if real else None
    sandbox_mode = cfg.get("env", {}).get("mode") == "sandbox"  # it is the sandbox-only run: nothing to compare
    sandbox_execs = per_step * len(steps) if per_step and not sandbox_mode else None
    sandbox_cost = (cost - split["real execution"] - split["world model"] + per_exec_s * sandbox_execs
                    if per_exec_s is not None and sandbox_execs else None)

    def at(step):
        if step is None:
            return None
        ci = eval_interval(run, step)
        return {"step": step, "reward": evals[step], "ci95": list(ci) if ci else None}

    def family(name: str) -> dict:
        """The family's reward and 95 % half-width at the first and the last evaluation."""
        series, ci = run.series(f"eval/family/{name}"), run.series(f"eval/family/{name}_ci95")
        return {end: {"step": st, "reward": series[st], "ci95": ci.get(st)}
                for end, st in (("start", min(series)), ("end", max(series)))} if series else {}

    tied, groups = run.series("rl/tied_groups"), run.series("rl/groups")
    statuses = {k[len("train/status/"):]: _total(run, k) for k in run.history if k.startswith("train/status/")}
    turns = sum(statuses.values())
    top = max(statuses, key=statuses.get) if turns else None
    signal = {"tied_groups": sum(tied.values()), "groups": sum(groups.values()),
              "tied_steps": sum(1 for st, n in groups.items() if n and tied.get(st) == n),
              "top_status": top, "top_status_share": statuses[top] / turns if top else None}

    names = sorted({k[len("eval/family/"):] for k in run.history if k.startswith("eval/family/")
                    and not k.endswith("_ci95")})
    return {
        "families": {name: family(name) for name in names},
        "run_dir": str(run.run_dir) if run.run_dir else None, "mlflow_run_id": run.run_id,
        "tracking_uri": run.tracking_uri, "status": run.status, "preset": cfg.get("name"),
        "steps": max(steps) if steps else 0, "planned_steps": cfg.get("rl", {}).get("steps"),
        "eval_start": at(min(evals) if evals else None), "eval_end": at(max(evals) if evals else None),
        "train_cost_s": cost, "cost_split_s": split,
        "real_executions": real, "sandbox_slot_s": run.last("cost/sandbox_slot_s") or 0.0,
        "per_execution_s": per_exec_s, "sandbox_only_executions": sandbox_execs, "sandbox_only_cost_s": sandbox_cost,
        "signal": signal,
        "fidelity": {k: _mean(run.series(k).values()) for k in FIDELITY},
        "fidelity_last": {k: run.last(k) for k in FIDELITY},
        "checkpoint": checkpoint, "mlflow_ui": f"mlflow ui --backend-store-uri {run.tracking_uri}",
    }


def _f(x, digits=3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _reward(e: dict | None) -> str:
    if e is None:
        return "n/a"
    ci = f" [{e['ci95'][0]:.3f}, {e['ci95'][1]:.3f}]" if e["ci95"] else " [no interval: <2 eval tasks]"
    return f"{e['reward']:.3f}{ci} (step {e['step']})"


def _family_end(e: dict | None) -> str:
    if e is None:
        return "n/a"
    return f"{e['reward']:.3f}" + (f" ± {e['ci95']:.3f}" if e.get("ci95") is not None else "")


def render(s: dict) -> str:
    """The summary as the lines a person reads at the end of a run."""
    cost = s["train_cost_s"] or 0.0
    split = ", ".join(f"{k} {v:.1f}s ({v / cost:.0%})" if cost else f"{k} {v:.1f}s" for k, v in s["cost_split_s"].items())
    killed = "" if s["status"] in ("FINISHED", None) else f"  [run {s['status'].lower()}: from what was logged]"
    lines = [f"── wmrl summary: {s['preset']}, {s['steps']}/{s['planned_steps']} RL steps{killed}",
             f"held-out reward   {_reward(s['eval_start'])} → {_reward(s['eval_end'])}   (95% intervals)",
             *[f"  {name + ' tasks':<15} {_family_end(f.get('start'))} → {_family_end(f.get('end'))}"
               for name, f in s.get("families", {}).items()],
             f"training cost     {cost:.1f}s = {split}"]
    if s["sandbox_only_executions"]:
        est = (f", ≈{s['sandbox_only_cost_s']:.0f}s training cost at {s['per_execution_s']:.2f}s per execution"
               if s["sandbox_only_cost_s"] is not None else "")
        lines.append(f"real executions   {s['real_executions']:.0f} vs ≤{s['sandbox_only_executions']} "
                     f"for sandbox-only over the same steps ({s['real_executions'] / s['sandbox_only_executions']:.0%}){est}")
    else:
        lines.append(f"real executions   {s['real_executions']:.0f}, {s['sandbox_slot_s']:.1f} sandbox slot-s")
    sig = s.get("signal") or {}
    if sig.get("groups"):
        line = (f"learning signal   {sig['tied_groups']:.0f}/{sig['groups']:.0f} groups tied (no advantage), "
                f"{sig['tied_steps']}/{s['steps']} steps with every group tied")
        if sig["tied_steps"] and sig["top_status"]:
            line += (f"  — NOTHING WAS LEARNT on those steps; most frequent outcome: {sig['top_status']} "
                     f"in {sig['top_status_share']:.0%} of turns")
        lines.append(line)
    fid = s["fidelity"]
    if any(v is not None for v in fid.values()):
        lines.append(f"world model       on anchors, mean over steps: Spearman {_f(fid['wm/spearman'])}, "
                     f"MAE {_f(fid['wm/mae'])}, 2σ coverage {_f(fid['wm/coverage_2sigma'])}")
    else:
        lines.append("world model       none (every program executed for real)")
    lines += [f"run directory     {s['run_dir']}", f"checkpoint        {s['checkpoint'] or 'none'}",
              f"MLflow run        {s['mlflow_run_id']}   open: {s['mlflow_ui']}"]
    return "\n".join(lines)
