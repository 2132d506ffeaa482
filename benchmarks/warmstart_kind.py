"""How often a warm-started policy writes the wrong kind of estimator (a classifier for a regression task or
the reverse), on training and held-out prompts: no execution, first turns only.

    python benchmarks/warmstart_kind.py [--samples N] [--out FILE.json] [key=value ...] [-- key=value ...]

Each `--arm "label: key=value key=value"` is one warm start (built and cached like training's); every arm
samples the same prompts with the same seeds. A policy that reads the task's kind from the prompt writes the
right estimator kind on held-out tasks as often as on training tasks; one that learned each training prompt by
heart does not (issue 13: this is why held-out regression reward fell during RL).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

_CLF = re.compile(r"Classifier|LogisticRegression|\bSVC\b|GaussianNB")
_REG = re.compile(r"Regressor|Ridge|Lasso|\bSVR\b|LinearRegression")


def written_kind(source: str) -> str | None:
    """'classification' | 'regression' by the estimator names the program mentions most; None when unclear."""
    c, r = len(_CLF.findall(source)), len(_REG.findall(source))
    return "classification" if c > r else "regression" if r > c else None


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    p, d = k / n, 1 + z * z / n
    mid, half = (p + z * z / (2 * n)) / d, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (mid - half, mid + half)


def measure(overrides: list[str], samples: int, seed: int = 0) -> dict:
    from wmrl.config import load_config
    from wmrl.generation import make_generator
    from wmrl.domains.research.domain import ResearchDomain
    from wmrl.recipe import build_policy_and_tokenizer
    from wmrl.domains.research.tasks import load_suite

    cfg = load_config(overrides)
    suite = load_suite(cfg.task)
    policy, tok, chat, _ = build_policy_and_tokenizer(cfg, ResearchDomain(suite, cache_dir=Path(cfg.task.cache_dir).expanduser()),
                                                    Path(cfg.task.cache_dir).expanduser(), False)
    policy.eval()
    gen = make_generator(cfg.generation, policy, tok, chat.eos_ids)
    per_task, out = {}, {}
    for split, tasks in (("train", suite.train_tasks()), ("held_out", suite.eval_tasks())):
        for task in tasks:
            comps = gen.generate([chat.prompt_ids(task.prompt())] * samples, temperature=cfg.generation.temperature,
                                 top_p=cfg.generation.top_p, max_new_tokens=cfg.generation.max_new_tokens, seed=seed)
            kinds = [written_kind(tok.decode(c.token_ids, skip_special_tokens=True)) for c in comps]
            wrong = sum(k is not None and k != task.kind for k in kinds)
            per_task[task.name] = {"split": split, "kind": task.kind, "wrong": wrong, "n": samples}
    for split in ("train", "held_out"):
        for kind in ("classification", "regression"):
            rows = [v for v in per_task.values() if v["split"] == split and v["kind"] == kind]
            k, n = sum(r["wrong"] for r in rows), sum(r["n"] for r in rows)
            out[f"{split}/{kind}"] = {"wrong_rate": k / max(n, 1), "ci95": wilson(k, n), "n": n}
    return {**out, "tasks": per_task}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arm", action="append", required=True, help='"label: key=value ..." (repeatable)')
    ap.add_argument("--samples", type=int, default=64, help="completions per task")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("overrides", nargs="*", help="key=value for every arm")
    args = ap.parse_args(argv)
    results = {}
    for arm in args.arm:
        label, _, extra = arm.partition(":")
        results[label.strip()] = r = measure([*args.overrides, *shlex.split(extra)], args.samples)
        print(f"\n{label.strip()}: share of first programs of the wrong estimator kind (95% Wilson interval)")
        for key in ("train/classification", "train/regression", "held_out/classification", "held_out/regression"):
            lo, hi = r[key]["ci95"]
            print(f"  {key:24s} {r[key]['wrong_rate']:.3f} [{lo:.3f}, {hi:.3f}]  n={r[key]['n']}")
        print("  per task: " + ", ".join(f"{n}={v['wrong'] / v['n']:.2f}" for n, v in r["tasks"].items()))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
