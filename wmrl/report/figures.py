"""The run report's figures, one function per figure, each returning a matplotlib Figure (tests read its axes)."""
from __future__ import annotations

import math
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # reports are written on headless machines and in tests
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from wmrl.benchmark.stats import TRAINING, cumulative_cost, status_shares, t_interval  # noqa: E402
from wmrl.report.data import RunData, eval_interval  # noqa: E402
from wmrl.summary import SPLIT  # noqa: E402


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="grey")


def _eval_points(run: RunData):
    evals = run.series("eval/real_reward")
    steps = sorted(evals)
    lo, hi = [], []
    for s in steps:
        ci = eval_interval(run, s)
        lo.append(evals[s] - ci[0] if ci else 0.0)
        hi.append(ci[1] - evals[s] if ci else 0.0)
    return steps, [evals[s] for s in steps], [lo, hi]


def reward(run: RunData) -> Figure:
    """Held-out reward (95 % intervals) against RL step and against cumulative training cost."""
    fig, (by_step, by_cost) = plt.subplots(1, 2, figsize=(11, 4))
    steps, values, err = _eval_points(run)
    cum = cumulative_cost(run.series("time/step_s"))
    train = run.series("reward/train_mean")
    if steps:
        by_step.errorbar(steps, values, yerr=err, marker="o", capsize=3, label="held-out (real execution)")
        at_cost = [i for i, s in enumerate(steps) if s in cum]
        by_cost.errorbar([cum[steps[i]] for i in at_cost], [values[i] for i in at_cost],
                         yerr=[[err[0][i] for i in at_cost], [err[1][i] for i in at_cost]], marker="o", capsize=3,
                         label="held-out (real execution)")
    else:
        _empty(by_step, "no evaluation logged")
    if train:
        by_step.plot(sorted(train), [train[s] for s in sorted(train)], color="grey", alpha=0.6, label="training reward")
    by_step.set(xlabel="RL step", ylabel="reward", title="Held-out reward vs step")
    by_step.xaxis.set_major_locator(MaxNLocator(integer=True))
    by_cost.set(xlabel="cumulative training cost (s)", ylabel="held-out reward", title="Held-out reward vs cost")
    for ax in (by_step, by_cost):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def cost(run: RunData) -> Figure:
    """Each step's training cost, stacked by part (generation, real execution, world model, update, other)."""
    fig, ax = plt.subplots(figsize=(9, 4))
    step_s = run.series("time/step_s")
    steps = sorted(step_s)
    bottom = [0.0] * len(steps)
    for part, keys in SPLIT.items():
        heights = [sum(run.series(k).get(s, 0.0) for k in keys) for s in steps]
        ax.bar(steps, heights, bottom=bottom, label=part)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.bar(steps, [max(0.0, step_s[s] - b) for s, b in zip(steps, bottom)], bottom=bottom, label="other", color="lightgrey")
    if not steps:
        _empty(ax, "no step logged")
    ax.set(xlabel="RL step", ylabel="seconds", title="Training cost per step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def fidelity(run: RunData) -> Figure:
    """The world model against real execution on each step's anchors."""
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
    for ax, (key, label, ylim) in zip(axes, (("wm/spearman", "Spearman", (-1.05, 1.05)), ("wm/mae", "MAE", (0, None)),
                                             ("wm/coverage_2sigma", "2σ coverage", (0, 1.05)))):
        s = run.series(key)
        if s:
            ax.plot(sorted(s), [s[k] for k in sorted(s)], marker="o")
        else:
            _empty(ax, "no anchors (no world model)")
        ax.set(xlabel="RL step", ylabel=label, title=f"World model {label}")
        ax.set_ylim(*ylim)  # fixed scales: a near-constant series is not blown up into noise
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def divergence_table(pairs: list[dict]) -> dict[tuple[str, str], dict]:
    """(task, action class) -> n, bias = mean(WM − real) and its 95 % t-interval, over anchor pairs."""
    diffs = defaultdict(list)
    for p in pairs:
        if p.get("wm_reward") is not None and p.get("real_reward") is not None:
            diffs[(p["task"], p["action_class"])].append(p["wm_reward"] - p["real_reward"])
    return {k: {"n": len(v), **t_interval(v)} for k, v in diffs.items()}


def divergence(run: RunData) -> Figure:
    """Heatmap of mean(WM − real) per task × action class; each cell annotated with its count and interval."""
    table = divergence_table(run.anchor_pairs)
    tasks = sorted({t for t, _ in table})
    classes = sorted({c for _, c in table})
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(classes) + 2), max(3, 0.8 * len(tasks) + 1.5)))
    if not table:
        _empty(ax, "no anchor pairs logged")
    else:
        grid = [[table[(t, c)]["mean"] if (t, c) in table else math.nan for c in classes] for t in tasks]
        lim = max(0.05, max(abs(v) for row in grid for v in row if not math.isnan(v)))
        im = ax.imshow(grid, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
        fig.colorbar(im, ax=ax, label="mean WM − real reward")
        for i, t in enumerate(tasks):
            for j, c in enumerate(classes):
                cell = table.get((t, c))
                if cell:
                    ci = f"\n[{cell['lo']:+.2f}, {cell['hi']:+.2f}]" if cell["lo"] is not None else ""
                    ax.text(j, i, f"{cell['mean']:+.2f}\nn={cell['n']}{ci}", ha="center", va="center", fontsize=7,
                            color="white" if abs(cell["mean"]) > 0.6 * lim else "black")  # readable on dark cells
        ax.set_xticks(range(len(classes)), classes, rotation=30, ha="right")
        ax.set_yticks(range(len(tasks)), tasks)
    ax.set(xlabel="action class", ylabel="task", title="World-model divergence on anchors (WM − real)")
    fig.tight_layout()
    return fig


def anchors(run: RunData) -> Figure:
    """The anchor rate the budget set, and how many action classes the guard routed to real execution."""
    fig, (rate, flags) = plt.subplots(1, 2, figsize=(10, 3.5))
    for ax, key, label in ((rate, "env/anchor_rate", "anchor rate"), (flags, "guard/flagged", "classes flagged")):
        s = run.series(key)
        if s:
            ax.step(sorted(s), [s[k] for k in sorted(s)], where="post", marker="o")
        else:
            _empty(ax, f"{key} not logged")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set(xlabel="RL step", ylabel=label, title={"env/anchor_rate": "Anchor rate",
                                                       "guard/flagged": "Guard flags"}[key])
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def programs(run: RunData) -> Figure:
    """How programs end: each status's share of the training turns per step (the real status where executed, else
    the world model's), and of each evaluated family's turns at its first and last evaluation."""
    shares = status_shares(run.history)
    evaluated = [f for f in sorted(shares) if f != TRAINING]
    fig, axes = plt.subplots(1, 1 + len(evaluated), figsize=(5 * (1 + len(evaluated)), 3.8), squeeze=False)
    statuses = sorted({s for by_step in shares.values() for by in by_step.values() for s in by})
    colors = dict(zip(statuses, plt.get_cmap("tab10").colors))
    train = shares.get(TRAINING, {})
    ax = axes[0][0]
    if train:
        steps = sorted(train)
        ax.stackplot(steps, [[train[t].get(s, 0.0) for t in steps] for s in statuses], labels=statuses,
                     colors=[colors[s] for s in statuses])
        ax.legend(fontsize=7, loc="lower left")
    else:
        _empty(ax, "train/status/* not logged")
    ax.set(xlabel="RL step", ylabel="share of turns", ylim=(0, 1), title="Training: how programs end")
    for ax, family in zip(axes[0][1:], evaluated):
        steps = sorted(shares[family])
        shown = [steps[0], steps[-1]] if len(steps) > 1 else steps
        bottom = [0.0] * len(shown)
        for s in statuses:
            h = [shares[family][t].get(s, 0.0) for t in shown]
            ax.bar(range(len(shown)), h, bottom=bottom, color=colors[s], label=s)
            bottom = [a + b for a, b in zip(bottom, h)]
        ax.set_xticks(range(len(shown)), [f"step {t}" for t in shown])
        ax.set(ylabel="share of turns", ylim=(0, 1), title=f"Held-out {family}: how programs end")
    fig.tight_layout()
    return fig


def proxy(run: RunData) -> Figure:
    """On anchors, per step: the reward the policy trained on (the corrected world-model score, out of sample) and
    the real reward, with 95 % intervals; the proxy climbing while the real one stalls is over-optimisation."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in (("proxy/wm_mean", "corrected world model (trained on)"), ("proxy/real_mean", "real execution")):
        s, half = run.series(key), run.series(key.replace("_mean", "_mean_ci95"))
        if s:
            steps = sorted(s)
            ax.errorbar(steps, [s[t] for t in steps], yerr=[half.get(t, 0.0) for t in steps], marker="o", capsize=3,
                        label=label)
    if not ax.lines:
        _empty(ax, "no anchors (proxy/* not logged)")
    else:
        ax.legend(fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="RL step", ylabel="reward on anchors", title="Proxy vs real reward")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


FIGURES = {"reward": reward, "cost": cost, "fidelity": fidelity, "divergence": divergence, "anchors": anchors,
           "programs": programs, "proxy": proxy}
