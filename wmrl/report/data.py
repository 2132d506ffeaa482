"""What a run logged, read back: its metric histories from MLflow, its config, its anchor pairs. Works on a
finished run and on a killed one alike (everything is read from what was logged step by step)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from wmrl.benchmark.stats import t_interval

RUN_ID_FILE, TRACKING_URI_FILE = "mlflow_run_id", "mlflow_tracking_uri"


@dataclass
class RunData:
    run_id: str
    tracking_uri: str
    run_dir: Path | None
    config: dict
    history: dict[str, dict[int, float]]  # metric -> {RL step: value}, the last value logged at a step
    status: str = "UNKNOWN"  # MLflow's: FINISHED, or RUNNING for a run killed mid-way
    anchor_pairs: list[dict] = field(default_factory=list)

    def series(self, key: str) -> dict[int, float]:
        return self.history.get(key, {})

    def last(self, key: str) -> float | None:
        s = self.series(key)
        return s[max(s)] if s else None


def absolute_tracking_uri(uri: str, base: Path | None = None) -> str:
    """`sqlite:///rel.db` made absolute against `base` (default: the working directory), so that the
    `mlflow ui` command printed for it works from anywhere."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri[len(prefix):].startswith("/"):
        return prefix + str(((base or Path.cwd()) / uri[len(prefix):]).resolve())
    return uri


def _run_dir_config(run_dir: Path) -> dict:
    for name in ("config.resumed.yaml", "config.yaml"):
        if (run_dir / name).exists():
            return OmegaConf.to_container(OmegaConf.load(run_dir / name), resolve=True)
    return {}


def read_anchor_pairs(run_dir: Path | None) -> list[dict]:
    path = None if run_dir is None else run_dir / "anchor_pairs.jsonl"
    if path is None or not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a killed run can leave its last line half-written
            continue
    return out


def load_run(target: str | Path, tracking_uri: str | None = None) -> RunData:
    """`target`: a run directory, or an MLflow run id (then `tracking_uri`, else $MLFLOW_TRACKING_URI,
    else the default `sqlite:///mlruns.db`)."""
    from mlflow.tracking import MlflowClient

    path = Path(target)
    run_dir = path if path.is_dir() else None
    config = _run_dir_config(run_dir) if run_dir else {}
    if run_dir is not None:
        run_id = (run_dir / RUN_ID_FILE).read_text().strip()
        if tracking_uri is None and (run_dir / TRACKING_URI_FILE).exists():
            tracking_uri = (run_dir / TRACKING_URI_FILE).read_text().strip()
        tracking_uri = tracking_uri or config.get("logger", {}).get("tracking_uri")
    else:
        run_id = str(target)
    tracking_uri = absolute_tracking_uri(tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlruns.db")
    client = MlflowClient(tracking_uri=tracking_uri)
    run = client.get_run(run_id)
    if run_dir is None and run.data.tags.get("run_dir") and Path(run.data.tags["run_dir"]).is_dir():
        run_dir = Path(run.data.tags["run_dir"])
        config = _run_dir_config(run_dir)
    history = {}
    for key in run.data.metrics:
        ordered = sorted(client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
        history[key] = {int(m.step): float(m.value) for m in ordered}
    return RunData(run_id, tracking_uri, run_dir, config, history, run.info.status, read_anchor_pairs(run_dir))


def eval_ci(metrics: dict) -> tuple[float, float] | None:
    """95 % interval of one evaluation's held-out reward (its flat `eval/...` metrics): the logged
    `eval/real_reward_ci95` half-width when the evaluator logs one, else a t-interval over the per-task
    means (`eval/task/*`, whose mean `eval/real_reward` is), else None (fewer than two tasks)."""
    mean, half = metrics.get("eval/real_reward"), metrics.get("eval/real_reward_ci95")
    if mean is not None and half is not None:
        return mean - half, mean + half
    ci = t_interval([v for k, v in metrics.items() if k.startswith("eval/task/")])
    return None if ci["lo"] is None else (ci["lo"], ci["hi"])


def eval_interval(run: RunData, step: int) -> tuple[float, float] | None:
    """`eval_ci` of the evaluation logged at `step`."""
    return eval_ci({k: s[step] for k, s in run.history.items() if k.startswith("eval/") and step in s})
