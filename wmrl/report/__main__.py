"""python -m wmrl.report RUN_DIR_OR_MLFLOW_RUN_ID: the run report (PNGs + index.html), also of a killed run."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m wmrl.report", description=__doc__)
    p.add_argument("target", help="a run directory, or an MLflow run id")
    p.add_argument("--tracking-uri", default=None, help="MLflow store of a run id (default $MLFLOW_TRACKING_URI, "
                                                         "else sqlite:///mlruns.db); a run directory knows its own")
    p.add_argument("--out", type=Path, default=None, help="where to write (default <run_dir>/report)")
    p.add_argument("--log", action="store_true", help="also log the report to the MLflow run as artifacts (report/)")
    a = p.parse_args(argv)
    from wmrl.report import load_run, write_report

    run = load_run(a.target, a.tracking_uri)
    page = write_report(run, a.out)
    print((page.parent / "summary.txt").read_text(), end="")
    print(f"report: {page}")
    if a.log:
        from mlflow.tracking import MlflowClient

        MlflowClient(tracking_uri=run.tracking_uri).log_artifacts(run.run_id, str(page.parent), "report")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
