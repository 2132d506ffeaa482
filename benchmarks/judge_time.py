"""Time to judge one script program vs one estimator program on the same data (issue 11).

The same model (ordinal codes + histogram boosting, ROC AUC on probabilities) on the built-in
`loan_default` table: once as a script task (reads ./input/*.csv, writes the submission, the host
grades the file), once as an estimator task over the same train.csv (the harness fits build() on
the DataFrame). Each program runs `--repeats` times in one warm slot; prints the median wall time of
the execution as the sandbox accounts it (`Outcome.wall_s`) and the host time to grade it.

    python benchmarks/judge_time.py [--repeats 7]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

MODEL = """
from sklearn.compose import make_column_selector, make_column_transformer
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OrdinalEncoder

def build():
    codes = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1, encoded_missing_value=-1)
    return make_pipeline(make_column_transformer((codes, make_column_selector(dtype_exclude="number")),
                                                 remainder="passthrough"), HistGradientBoostingClassifier(max_iter=60))
"""
SCRIPT = MODEL + """
import pandas as pd
train, test = pd.read_csv("input/train.csv"), pd.read_csv("input/test.csv")
sub = pd.read_csv("input/sample_submission.csv")
X = train.drop(columns=["loan_id", "default"])
sub["default"] = build().fit(X, train["default"]).predict_proba(test[X.columns])[:, 1]
sub.to_csv("submission/submission.csv", index=False)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    import yaml

    from wmrl.config import SandboxConfig, TaskConfig
    from wmrl.domains.research.sandbox.base import ExecRequest
    from wmrl.domains.research.sandbox.local import LocalSandbox
    from wmrl.domains.research.tasks import load_suite

    tmp = Path(tempfile.mkdtemp(prefix="judge-time-"))
    cfg = TaskConfig(cache_dir=str(tmp / "cache"), secret_seed="judge-time")
    script_task = load_suite(cfg).get("loan_default")
    train_csv = script_task.folder() / "public" / "train.csv"
    (tmp / "loans.yaml").write_text(yaml.safe_dump({
        "name": "loans_table", "data": str(train_csv), "target": "default", "id_column": "loan_id",
        "kind": "classification", "metric": "roc_auc", "time_limit_s": 20}))
    estimator_task = load_suite(TaskConfig(cache_dir=cfg.cache_dir, secret_seed=cfg.secret_seed,
                                           files=[str(tmp / "loans.yaml")])).get("loans_table")
    for task in (script_task, estimator_task):
        task.leaderboard()  # built once, outside the timing
    with LocalSandbox(SandboxConfig(slots=1)) as sb:
        for name, task, program in (("script", script_task, SCRIPT), ("estimator", estimator_task, MODEL)):
            sb.run([ExecRequest(task, program)])  # warm: the task data reaches the worker once
            walls, totals = [], []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                [out] = sb.run([ExecRequest(task, program)])
                totals.append(time.perf_counter() - t0)
                walls.append(out.wall_s)
                assert out.status.value == "valid", out.stderr_tail
            print(f"{name:9s} median execution {statistics.median(walls):.3f} s, median judged (incl. grading) "
                  f"{statistics.median(totals):.3f} s over {args.repeats} runs; value {out.value:.3f}")
    print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
