"""Does a change leave training as it was? Train the seeded smoke preset in two checkouts and compare every
metric step by step, timings aside.

    python scripts/smoke_metrics.py dump /path/to/checkout before.json [override ...]
    python scripts/smoke_metrics.py dump . after.json
    python scripts/smoke_metrics.py compare before.json after.json

`dump` runs `train.py experiment=smoke seed=3` of that checkout (its own code first on the path) into a
temporary folder with its own MLflow store and writes {metric: [[step, value], ...]}; `compare` lists the
metrics only one side has and every metric whose steps or values differ (NaN equals NaN).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TIMING = ("time/", "throughput/")


def dump(checkout: Path, out: Path, overrides: list[str]) -> None:
    from mlflow.tracking import MlflowClient

    work = Path(tempfile.mkdtemp(prefix="smoke-metrics-"))
    uri = f"sqlite:///{work}/mlflow.db"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "PYTHONPATH": str(checkout.resolve())}
    cmd = [sys.executable, "train.py", "experiment=smoke", "seed=3", f"run_dir={work}/runs", f"logger.tracking_uri={uri}",
           "trainer.progress_bar=false", "logger.report=false", *overrides]
    r = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"train.py exited with {r.returncode}:\n{r.stderr[-3000:]}")
    client = MlflowClient(uri)
    run = client.search_runs([e.experiment_id for e in client.search_experiments()])[0]
    history = {}
    for key in sorted(run.data.metrics):
        if key.startswith(TIMING) or key.endswith("_s"):
            continue
        points = sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: (m.step, m.timestamp))
        history[key] = [[m.step, m.value] for m in points]
    out.write_text(json.dumps(history, indent=0, sort_keys=True))
    print(f"{len(history)} metrics of {work} -> {out}")


def compare(a: dict, b: dict) -> list[str]:
    lines = [f"only in the first: {k}" for k in sorted(set(a) - set(b))]
    lines += [f"only in the second: {k}" for k in sorted(set(b) - set(a))]
    for k in sorted(set(a) & set(b)):
        steps_a, steps_b = [s for s, _ in a[k]], [s for s, _ in b[k]]
        same = len(a[k]) == len(b[k]) and all(x == y or (math.isnan(x) and math.isnan(y))
                                              for (_, x), (_, y) in zip(a[k], b[k]))
        if not same or steps_a != steps_b:
            lines.append(f"{k}: steps {steps_a} -> {steps_b}" + ("" if same else f", values {a[k]} -> {b[k]}"))
    return lines


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "dump":
        dump(Path(argv[1]), Path(argv[2]), argv[3:])
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        a, b = (json.loads(Path(p).read_text()) for p in argv[1:])
        lines = compare(a, b)
        print("\n".join(lines) or f"the same {len(a)} metrics, step by step")
        return 1 if lines else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
