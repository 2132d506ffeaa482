"""Fidelity of the prompted-LM world model against the learned ensemble, on the same anchors.

    python benchmarks/prompted_fidelity.py --model CKPT --log RUN/executions.sqlite [--log ...] [--n 40]
                                           [--out results.json] [key=value ...]   (world_model.* overrides)

Pools the executed programs of the logs (one row per distinct (task, program), infra errors dropped),
holds out `n` of them as anchors (seeded), fits the learned ensemble on the rest, and predicts the
anchors with: the learned ensemble, the prompted LM answering in JSON (`mode=generate`) and the prompted
LM scoring every answer (`mode=score`). Prints one table: Spearman, MAE, 2-sigma coverage, status
accuracy (`wmrl.domains.research.world_model.fidelity_metrics`, the metrics training logs as wm/*), seconds per
prediction and the malformed-answer rate, on all anchors and on those the model itself answered (the
deterministic checks decide the others exactly and at no cost, in every world model alike).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="local HF checkpoint for the prompted world model")
    ap.add_argument("--log", action="append", required=True, help="execution log(s) (SQLite) of earlier runs")
    ap.add_argument("--n", type=int, default=40, help="held-out anchors")
    ap.add_argument("--epochs", type=int, default=20, help="learned ensemble: passes over the rest")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("overrides", nargs="*", help="world_model keys for the prompted model, e.g. prompt_tokens=768")
    a = ap.parse_args()

    import torch

    from wmrl.config import load_config
    from wmrl.domains.research.outcome import Status
    from wmrl.domains.research.sandbox.log import read_log
    from wmrl.domains.research.world_model import WMPrediction, fidelity_metrics, make_world_model
    from wmrl.domains.research.world_model.__main__ import examples_from_log

    torch.set_num_threads(1)
    cfg = load_config(["experiment=smoke"] + [f"world_model.{o}" for o in a.overrides])
    seen, rows = set(), []
    for log in a.log:
        for q, o in examples_from_log(read_log(log), cfg.task):
            if o.status is not Status.INFRA_ERROR and (q.task, q.program.strip()) not in seen:
                seen.add((q.task, q.program.strip()))
                rows.append((q, o))
    random.Random(a.seed).shuffle(rows)
    anchors, rest = rows[:a.n], rows[a.n:]
    queries, outcomes = [q for q, _ in anchors], [o for _, o in anchors]
    table = {}

    def measure(name, wm, extra=None):
        t0 = time.perf_counter()
        pred = wm.predict(queries)
        wall = time.perf_counter() - t0
        asked = int((~pred.prechecked).sum())
        m = fidelity_metrics(pred, outcomes)
        # the same metrics on the anchors the model itself answered (the checks decide the rest exactly)
        rows = (~pred.prechecked).nonzero().flatten().tolist()
        sub = WMPrediction(**{k: v[rows] for k, v in pred.to_dict().items()})
        mm = fidelity_metrics(sub, [outcomes[i] for i in rows])
        table[name] = {"spearman": m["wm/spearman"], "mae": m["wm/mae"], "coverage_2sigma": m["wm/coverage_2sigma"],
                       "status_acc": m["wm/status_acc"], **{f"model_only/{k[3:]}": v for k, v in mm.items()},
                       "s_per_prediction": wall / len(queries),
                       "s_per_model_prediction": wall / max(asked, 1), "model_predictions": asked,
                       "malformed_rate": (float(pred.malformed.sum()) / max(asked, 1)) if pred.malformed is not None else None,
                       **(extra or {})}
        print(name, json.dumps(table[name]), flush=True)

    t0 = time.perf_counter()
    learned = make_world_model(cfg.world_model, seed=a.seed)
    learned.fit(rest, epochs=a.epochs)
    measure("learned", learned, {"fit_s": time.perf_counter() - t0, "fit_examples": len(rest)})
    for mode in ("generate", "score"):
        wm_cfg = {**{k: v for k, v in cfg.world_model.items()}, "kind": "prompted", "model": a.model, "mode": mode}
        t0 = time.perf_counter()
        wm = make_world_model(wm_cfg, seed=a.seed)
        measure(f"prompted/{mode}", wm, {"load_s": time.perf_counter() - t0,
                                         "parameters": sum(p.numel() for p in wm.lm.model.parameters())})
    statuses = {}
    for o in outcomes:
        statuses[o.status.value] = statuses.get(o.status.value, 0) + 1
    print(f"\n{len(anchors)} anchors ({statuses}), learned ensemble fitted on {len(rest)} other executions\n")
    print("| world model | anchors | Spearman | MAE | 2σ coverage | status acc | s / prediction | malformed |")
    print("|---|---|---|---|---|---|---|---|")
    f = lambda x: "n/a" if x is None or x != x else f"{x:.3f}"  # noqa: E731
    for name, r in table.items():
        print(f"| {name} | all {len(anchors)} | {f(r['spearman'])} | {f(r['mae'])} | {f(r['coverage_2sigma'])} | "
              f"{f(r['status_acc'])} | {r['s_per_prediction']:.3f} | {f(r['malformed_rate'])} |")
        print(f"| {name} | {r['model_predictions']} the model answered | {f(r['model_only/spearman'])} | "
              f"{f(r['model_only/mae'])} | {f(r['model_only/coverage_2sigma'])} | {f(r['model_only/status_acc'])} | "
              f"{r['s_per_model_prediction']:.3f} | |")
    if a.out:
        a.out.write_text(json.dumps({"anchors": len(anchors), "statuses": statuses, "table": table}, indent=1))


if __name__ == "__main__":
    main()
