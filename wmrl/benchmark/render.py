"""Rendering of a built benchmark report: the Markdown table and the cost-vs-reward plot."""
from __future__ import annotations

from typing import Sequence

from wmrl.benchmark import targets as tg_
from wmrl.benchmark.format import fmt, fmt_ci
from wmrl.benchmark.stats import FIDELITY, PAPER_ORDER


def _x(r) -> str:
    return f" ({fmt(r, 2)}x)" if r is not None else ""


def _paired(row: dict, baseline: str) -> str:
    d = row["vs_baseline"]
    if row["arm"] == baseline or d["mean"] is None:
        return "—"
    return f"{d['mean']:+.3f}" + ("" if d["lo"] is None else f" [{d['lo']:+.3f}, {d['hi']:+.3f}]{'*' if d['significant'] else ''}")


def family_section(report: dict) -> list[str]:
    """Per task family (`eval/family/<name>`): each arm's final reward and gain over its warm start, and the
    final reward against the baseline paired by seed; a family the training set lacks shows transfer."""
    b = report["baseline"]
    rows = [(name, r) for r in report["rows"] for name in sorted(r.get("families") or {})]
    if not rows:
        return []
    lines = ["", f"By task family: final eval reward, gain over warm start (mean [95% t-interval over seeds]), gain as a "
                 f"share of `{b}`'s, final vs `{b}` paired by seed (* = interval excludes 0).", "",
             f"| family | arm | final eval reward | gain over warm start | gain / {b}'s | vs {b} |", "|---|---|---|---|---|---|"]
    for name, r in sorted(rows, key=lambda x: x[0]):
        f = r["families"][name]
        paired = _paired({"arm": r["arm"], "vs_baseline": f.get("vs_baseline") or {"mean": None}}, b)
        lines.append(f"| {name} | {r['arm']} | {fmt_ci(f['final_eval'])} | {fmt_ci(f['gain'])} | "
                     f"{fmt(f.get('gain_ratio'), 2)} | {paired} |")
    return lines


def status_section(rows: Sequence[dict]) -> list[str]:
    """`stats.status_rows` as a table: per family (and over training) and arm, each status's share at the warm start
    → at the final evaluation (training: first → last quarter of the steps), the latter with its 95% interval."""
    if not rows:
        return []
    statuses = sorted({s for r in rows for s in r["statuses"]})
    lines = ["", "How programs end, per family: share of turns with each status, warm start → final evaluation "
                 "(`training`: first → last quarter of the steps, the real status where executed, else the world "
                 "model's), final [95% t-interval over seeds].", "",
             "| family | arm | " + " | ".join(statuses) + " |", "|---|---|" + "---|" * len(statuses)]
    for r in rows:
        cells = []
        for s in statuses:
            first, last = r["first"].get(s), r["last"].get(s)
            if last is None or last["mean"] is None:
                cells.append("—")
                continue
            start = fmt(first["mean"], 2) if first and first["mean"] is not None else "—"
            band = "" if last["lo"] is None else f" [{max(0.0, last['lo']):.2f}, {min(1.0, last['hi']):.2f}]"
            cells.append(f"{start} → {last['mean']:.2f}{band}")
        lines.append(f"| {r['family']} | {r['arm']} | " + " | ".join(cells) + " |")
    return lines


def plot_programs(rows: Sequence[dict], report: dict, runs: Sequence[dict], path) -> None:
    """programs.png: per family, each arm's final status shares as stacked bars (the warm start's beside them);
    and, per world-model arm, the proxy (corrected world-model reward on anchors) against their real reward."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from wmrl.benchmark.stats import BASELINE, TRAINING, proxy_curves

    families = list(dict.fromkeys(r["family"] for r in rows))
    wm_arms = [r["arm"] for r in report["rows"] if r["arm"] != BASELINE]
    fig, axes = plt.subplots(1, len(families) + 1, figsize=(4.2 * (len(families) + 1), 4.2), squeeze=False)
    statuses = sorted({s for r in rows for s in r["statuses"]})
    colors = dict(zip(statuses, plt.get_cmap("tab10").colors))
    for ax, family in zip(axes[0], families):
        mine = [r for r in rows if r["family"] == family]
        if family == TRAINING:  # each arm's first and last quarter of the steps
            labels = [f"{r['arm']} {q} ¼" for r in mine for q in ("first", "last")]
            bars = [b for r in mine for b in (r["first"], r["last"])]
        else:  # one warm start for every arm
            labels, bars = ["warm start"] + [r["arm"] for r in mine], [mine[0]["first"]] + [r["last"] for r in mine]
        bottom = [0.0] * len(bars)
        for s in statuses:
            h = [(b.get(s) or {}).get("mean") or 0.0 for b in bars]
            ax.bar(range(len(bars)), h, bottom=bottom, color=colors[s], label=s)
            bottom = [a + b for a, b in zip(bottom, h)]
        ax.set_xticks(range(len(bars)), labels, rotation=30, ha="right", fontsize=8)
        ax.set(ylim=(0, 1), ylabel="share of turns", title=f"{family}: how programs end")
    axes[0][0].legend(fontsize=7, loc="lower left")
    ax = axes[0][-1]
    for arm in wm_arms:
        curves, color = proxy_curves(runs, arm), None
        for key, ls in (("proxy/wm_mean", "-"), ("proxy/real_mean", "--")):
            pts = curves[key]
            if pts:
                steps = sorted(pts)
                (line,) = ax.plot(steps, [pts[s]["mean"] for s in steps], ls=ls, marker=".", color=color,
                                  label=f"{arm} {'corrected WM' if key.endswith('wm_mean') else 'real'}")
                color = line.get_color()
    ax.set(xlabel="RL step", ylabel="reward on anchors", title="Proxy vs real reward (mean over seeds)")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
    lines += [f"Ratios in parentheses are to `{b}`. Final eval reward and gain (final − warm start, per seed): "
              f"mean [95% t-interval over seeds]; vs `{b}`: final eval difference paired by seed (* = interval excludes 0). "
              f"Time to target: training cost until the first evaluation >= `{b}`'s warm start + "
              f"{report['target_gain_share']:g} x its mean gain ({fmt(report['target_reward'])}).", "",
              "| arm | seeds | training cost s | real executions | sandbox slot-s | final eval reward | gain over warm start | "
              f"vs {b} | time to target s | WM spearman | WM MAE | WM 2σ coverage |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        q = r["ratio"]
        seeds = str(r["seeds"]) + (f" ({len(r['failed_seeds'])} failed)" if r["failed_seeds"] else "")
        ttt = "not reached" if r["time_to_target_s"] is None and r["seeds"] else fmt(r["time_to_target_s"], 1)
        lines.append(
            f"| {r['arm']} | {seeds} | {fmt(r['train_cost_s'], 1)}{_x(q['train_cost'])} | "
            f"{fmt(r['real_executions'], 0)}{_x(q['real_executions'])} | "
            f"{fmt(r['sandbox_slot_s'], 1)}{_x(q['sandbox_slot_s'])} | "
            f"{fmt_ci(r['final_eval'])}{_x(q['final_eval'])} | {fmt_ci(r['gain'])} | {_paired(r, b)} | "
            f"{ttt}{_x(q['time_to_target'])} | "
            + " | ".join(fmt(r["fidelity"][m]) for m in FIDELITY) + " |")
    lines += family_section(report)
    lines += ["", "Speedup over `" + b + "` (training cost). Ideal = its mean step cost / the arm's mean "
              "(generation + policy update) time per step, i.e. world-model inference, anchors, warm-up and "
              "world-model training for free; realised = actual / ideal.", "",
              "| arm | actual speedup | ideal speedup | realised fraction | time-to-target speedup |",
              "|---|---|---|---|---|"]
    for r in report["rows"]:
        if r["arm"] == b:
            continue
        s = r["speedup"]
        lines.append(f"| {r['arm']} | {fmt(s['actual'], 2)} | {fmt(s['ideal'], 2)} | {fmt(s['realised'], 2)} | "
                     f"{fmt(s['time_to_target'], 2)} |")
    lines += versus_section(report)
    abl = report["ablation"]
    if len(abl["order"]) >= 2:
        verdict = {True: "yes", False: "no"}.get(abl["matches_paper"], f"not judged, {len(abl['order'])} of its "
                                                                        f"{len(PAPER_ORDER)} arms measured")
        lines += ["", f"Ablation order by final eval reward: {' > '.join(abl['order'])} "
                      f"(paper: {' > '.join(abl['expected'])}; matches: {verdict})."]
    tg = tg_.check(report) if show_targets else []
    if tg:
        lines += ["", "| target | measured | result |", "|---|---|---|"]
        lines += [f"| {t['target']} | {t['measured']} | "
                  f"{'n/a' if t['passed'] is None else ('PASS' if t['passed'] else 'FAIL')} |" for t in tg]
    if recovered:
        lines += ["", "Correlated world-model error: does a world-model arm recover the real-execution quality "
                      f"(final eval >= {fmt(report['recovery_reward'])}, 95% of `{b}`'s)?", "",
                  "| arm | final eval reward | vs baseline | intervals overlap | recovers |", "|---|---|---|---|---|"]
        for r in recovered:
            ov = r["overlaps_baseline"]
            lines.append(f"| {r['arm']} | {fmt_ci(r['final_eval'])} | {fmt(r['ratio'], 2)}x | "
                         f"{'n/a' if ov is None else ('yes' if ov else 'no')} | {'yes' if r['recovers'] else 'no'} |")
    if strata:
        lines += ["", "World model against real execution on anchors, per stratum (bias = mean(WM − real), "
                      "spread = std(WM − real), WM σ = sqrt(mean predicted variance)):", "",
                  "| task | action class | anchors | bias | spread | WM σ | real mean |", "|---|---|---|---|---|---|---|"]
        for s in strata:
            lines.append(f"| {s['task']} | {s['action_class']} | {s['n']} | {fmt(s['bias'])} | {fmt(s['spread'])} | "
                         f"{fmt(s['wm_std'])} | {fmt(s['real_mean'])} |")
    return "\n".join(lines) + "\n"


def versus_section(report: dict) -> list[str]:
    """Each ablation / anchor-selection arm against the full method: paired over seeds, and per seed against
    the two evaluations' sampling noise (* = the interval excludes 0)."""
    w = report.get("wmrl_arm", "wmrl")
    rows = [r for r in report["rows"] if r.get("vs_wmrl")]
    if not rows:
        return []

    def ci(d: dict) -> str:
        if d["mean"] is None:
            return "n/a"
        return f"{d['mean']:+.3f}" + ("" if d["lo"] is None else f" [{d['lo']:+.3f}, {d['hi']:+.3f}]{'*' if d['significant'] else ''}")

    seeds = sorted({s for r in rows for s in r["vs_wmrl"]["by_seed"]})
    lines = ["", f"Against `{w}` (final eval reward, arm − {w}): paired over seeds (t 95 %), and per seed with the 95 % "
                 "interval of the two evaluations' sampling noise (within one seed: RL's seed spread is not in it).", "",
             "| arm | paired over seeds | " + " | ".join(f"seed {s}" for s in seeds) + " |",
             "|---|---|" + "---|" * len(seeds)]
    for r in rows:
        v = r["vs_wmrl"]
        lines.append(f"| {r['arm']} | {ci(v['seeds'])} | "
                     + " | ".join(ci(v["by_seed"][s]) if s in v["by_seed"] else "—" for s in seeds) + " |")
    return lines


def eval_bands(runs: Sequence[dict], arm: str) -> list[tuple[float, float, float | None, float | None]]:
    """(mean cumulative cost, mean eval reward, 95% t-interval lo, hi over seeds) at each evaluated step
    every successful seed of `arm` has; lo/hi None with one seed."""
    from wmrl.benchmark.stats import cumulative_cost, t_interval

    ok = [r for r in runs if r["arm"] == arm and r.get("status") == "ok"]
    if not ok:
        return []
    evals = [r["history"].get("eval/real_reward") or {} for r in ok]
    costs = [cumulative_cost(r["history"].get("time/step_s") or {}) for r in ok]
    steps = sorted(set.intersection(*(set(e) & set(c) for e, c in zip(evals, costs))))
    out = []
    for s in steps:
        ci = t_interval([e[s] for e in evals])
        out.append((sum(c[s] for c in costs) / len(costs), ci["mean"], ci["lo"], ci["hi"]))
    return out


def plot_cost_vs_reward(report: dict, path, runs: Sequence[dict] = ()) -> None:
    """`cost_vs_reward_figure` saved to `path`."""
    import matplotlib.pyplot as plt

    fig = cost_vs_reward_figure(report, runs)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cost_vs_reward_figure(report: dict, runs: Sequence[dict] = ()):
    """Eval reward against cumulative training cost, one line per arm (mean over seeds), with its 95%
    t-interval over seeds as a band when `runs` (the benchmark's runs) has two or more seeds of the arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in report["rows"]:
        pts = [(r["cost_curve"][s], v) for s, v in r["eval_curve"].items() if s in r["cost_curve"]]
        if pts:
            (line,) = ax.plot(*zip(*pts), marker="o", label=r["arm"])
            band = [b for b in eval_bands(runs, r["arm"]) if b[2] is not None]
            if band:
                x, _, lo, hi = zip(*band)
                ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15, lw=0)
    if report["target_reward"] is not None:
        ax.axhline(report["target_reward"], color="grey", ls="--", lw=1,
                   label=f"target ({report['baseline']} warm start + {report['target_gain_share']:g} x gain)")
    ax.set_xlabel("cumulative training cost (s)")
    ax.set_ylabel("held-out eval reward (real execution)")
    ax.set_title("Held-out reward vs training cost (bands: 95% interval over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def run_reports_section(runs: Sequence[dict], out) -> str:
    """Links to each arm's run report (`wmrl.report`, written by every training into its run directory)."""
    from pathlib import Path

    lines = []
    for r in runs:
        run_dir = (r.get("summary") or {}).get("run_dir")
        page = Path(run_dir) / "report" / "index.html" if run_dir else None
        if page is None or not page.exists():
            continue
        try:
            href = page.resolve().relative_to(Path(out).resolve())
        except ValueError:
            href = page.resolve()
        lines.append(f"- {r['arm']} seed {r['seed']}: [run report]({href})")
    return ("\nRun reports (curves, cost split, world-model fidelity and divergence map of each training):\n\n"
            + "\n".join(lines) + "\n") if lines else ""


def pretrain_section(report: dict, pretrain: dict, runs: int) -> str:
    """The one-time cost of the pretrained world model, and each world-model arm's cost with it."""
    from wmrl.benchmark.stats import with_pretrain_cost

    rows = {r["arm"]: r for r in report["rows"]}
    base = rows.get(report["baseline"], {}).get("train_cost_s")
    lines = [f"\nWorld model pretrained once on the training tasks: {pretrain['executions']} real executions, "
             f"{pretrain['sandbox_slot_s']:.1f} sandbox slot-s, {pretrain['wall_s']:.1f} s wall; {runs} world-model "
             "runs started from it.\n", "| arm | training cost s | + pretraining, charged to one run | "
             "+ pretraining, amortised over the runs |", "|---|---|---|---|"]
    for arm, row in rows.items():
        if arm == report["baseline"]:
            continue
        c = with_pretrain_cost(row["train_cost_s"], base, pretrain["wall_s"], runs)
        lines.append(f"| {arm} | {fmt(row['train_cost_s'], 1)} | {fmt(c['charged'], 1)} ({fmt(c['charged_ratio'], 2)}x) | "
                     f"{fmt(c['amortised'], 1)} ({fmt(c['amortised_ratio'], 2)}x) |")
    return "\n".join(lines) + "\n"
