"""A research task: data with hidden labels, a metric, a leaderboard, and the prompt an agent reads."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from wmrl.domains.research.outcome import Outcome, RawResult, Status, ladder_reward
from wmrl.domains.research.tasks import action, data, leaderboard, tabular
from wmrl.domains.research.tasks.metrics import SCORERS, needs_proba
from wmrl.domains.research.tasks.references import reference_set_hash, references_for
from wmrl.domains.research.tasks.spec import TaskSpec

SPLITS = ("val", "test")


class Task:
    """One task bound to the host secret and cache dir.

    Only `inputs()` output may enter a sandbox; validation and test labels stay here and
    are used by `judge()`.
    """

    def __init__(self, spec: TaskSpec, secret: str, cache_dir: Path, max_data_mb: float = tabular.DEFAULT_MAX_MB):
        self.spec = spec
        self.name, self.kind, self.metric = spec.name, spec.kind, spec.metric
        self.interface, self.family = spec.interface, spec.task_family
        # what the harness (or a reference) calls on the scored rows; the host scores its output
        self.method = "predict_proba" if needs_proba(spec.kind, spec.metric) else "predict"
        self.max_data_mb = float(max_data_mb)
        self.time_limit_s, self.held_out, self.dataset = float(spec.time_limit_s), bool(spec.held_out), spec.data
        self.cache_dir = Path(cache_dir)
        self._secret = secret
        self._splits: Optional[data.Splits] = None
        self._board: Optional[Dict] = None
        self._fingerprint: Optional[str] = None

    def __repr__(self) -> str:
        return f"Task({self.name!r}, {self.kind}, metric={self.metric})"

    # --- data -------------------------------------------------------------------------
    def splits(self) -> data.Splits:
        if self._splits is None:
            self._splits = data.build_splits(self.spec, self._secret, self.max_data_mb)
        return self._splits

    def tabular(self) -> bool:
        """Features are a DataFrame of real columns (a CSV or Parquet task), not an array."""
        return not isinstance(self.splits().X_train, np.ndarray)

    def inputs(self, split: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(X_train, y_train, X_eval): everything a program may see when scored on `split`."""
        s = self.splits()
        return s.X_train, s.y_train, self._eval_xy(split)[0]

    def _eval_xy(self, split: str) -> Tuple[np.ndarray, np.ndarray]:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}; got {split!r}")
        s = self.splits()
        return (s.X_val, s.y_val) if split == "val" else (s.X_test, s.y_test)

    def private_paths(self) -> List[str]:
        """Files behind this task (a user's table holds every label) and the host cache (the secret)."""
        files = [f for f in (self.spec.data, self.spec.test_data) if f and ":" not in f]
        return [*files, str(self.cache_dir)]

    def fingerprint(self) -> str:
        """Hash of what may enter the sandbox (no hidden labels), to cache arrays per task."""
        if self._fingerprint is None:
            s = self.splits()
            self._fingerprint = data.digest(s.X_train, s.y_train, s.X_val, s.X_test)
        return self._fingerprint

    def data_digest(self) -> str:
        """Hash of all arrays including hidden labels: host-only, keys the leaderboard cache."""
        s = self.splits()
        return data.digest(s.X_train, s.y_train, s.X_val, s.y_val, s.X_test, s.y_test)

    # --- scoring ----------------------------------------------------------------------
    def score(self, predictions: np.ndarray, split: str) -> float:
        """The task metric of already-validated predictions on `split` (higher is better)."""
        y = self._eval_xy(split)[1]
        metric = SCORERS[self.kind][self.metric]
        if metric.proba:
            return metric.fn(y, np.asarray(predictions, dtype=np.float64))
        pred = predictions.reshape(-1)
        if self.kind == "classification":
            pred = pred.astype(np.int64)
        return metric.fn(y, pred)

    def judge(self, raw: RawResult, split: str = "val") -> Outcome:
        """Validate what the sandbox returned and turn it into a scored, ladder-rewarded outcome."""
        status, value, pos = Status(raw.status), None, None
        stderr = raw.stderr_tail or raw.detail
        if status is Status.VALID:
            pred, why = self._validate(raw.predictions, split)
            if pred is None:
                status = Status.NO_VALID_OUTPUT
                stderr = f"{raw.stderr_tail.rstrip()}\n{why}".lstrip()
            else:
                value = self.score(pred, split)
                pos = self.pos(value, split)
        reward = ladder_reward(status, pos)
        return Outcome(task=self.name, status=status, metric=self.metric, value=value, pos=pos,
                       reward=reward, wall_s=raw.wall_s, fit_s=raw.fit_s, predict_s=raw.predict_s,
                       stderr_tail=stderr, split=split)

    def _validate(self, predictions, split: str) -> Tuple[Optional[np.ndarray], str]:
        n = len(self._eval_xy(split)[1])
        if predictions is None:
            return None, "invalid predictions: none returned"
        pred = np.asarray(predictions)
        if pred.dtype.kind not in "biuf":
            return None, f"invalid predictions: dtype {pred.dtype} is not numeric"
        if self.method == "predict_proba":
            return self._validate_proba(pred.astype(np.float64), n)
        if not (pred.ndim == 1 or (pred.ndim == 2 and pred.shape[1] == 1)) or pred.shape[0] != n:
            return None, f"invalid predictions: shape {pred.shape}, expected ({n},)"
        pred = pred.reshape(-1).astype(np.float64)
        if not np.all(np.isfinite(pred)):
            return None, "invalid predictions: contains NaN or infinity"
        if self.kind == "classification":
            unseen = np.setdiff1d(pred, np.unique(self.splits().y_train))
            if len(unseen):
                return None, f"invalid predictions: labels never seen in y_train, e.g. {unseen[:3].tolist()}"
        return pred, ""

    def _validate_proba(self, proba: np.ndarray, n: int) -> Tuple[Optional[np.ndarray], str]:
        k = len(np.unique(self.splits().y_train))
        if proba.shape != (n, k):
            return None, f"invalid probabilities: shape {proba.shape}, expected ({n}, {k}): one column per class"
        if not np.all(np.isfinite(proba)) or proba.min() < -1e-6 or proba.max() > 1 + 1e-6:
            return None, "invalid probabilities: values outside [0, 1], NaN or infinity"
        return proba, ""

    # --- leaderboard ------------------------------------------------------------------
    def reference_programs(self) -> Dict[str, str]:
        return references_for(self.kind, self.spec.references, table=self.tabular(),
                              proba=self.method == "predict_proba")

    def reference_hash(self) -> str:
        return reference_set_hash(self.reference_programs())

    def leaderboard_table(self, rebuild: bool = False) -> Dict:
        """The full cached leaderboard record (references with val/test scores and fit times)."""
        if self._board is None or rebuild:
            self._board = leaderboard.load_or_build(self, rebuild=rebuild)
        return self._board

    def leaderboard(self, split: str = "val") -> List[float]:
        """Reference scores on `split`, ascending."""
        self._eval_xy(split)
        return sorted(r[split] for r in self.leaderboard_table()["references"])

    def pos(self, value: float, split: str = "val") -> float:
        if value is None or math.isnan(value):
            raise ValueError(f"pos needs a metric value; got {value!r}")
        return leaderboard.position(value, self.leaderboard(split))

    # --- what agents and the world model read -------------------------------------------
    def prompt_fields(self) -> dict:
        """What the prompt says, as fields: `render_prompt` joins them (the warm start also mixes them across tasks)."""
        s = self.splits()
        n, d = s.X_train.shape
        if self.kind == "classification":
            labels = np.unique(s.y_train)
            target = f"y_train: int64 class labels {labels.tolist() if len(labels) <= 10 else f'0..{labels.max()}'}"
            if s.classes is not None and len(s.classes) <= 10:
                target += f" (codes of {s.classes})"
        else:
            target = f"y_train: float64 target (mean {s.y_train.mean():.3g}, std {s.y_train.std():.3g})"
        # a table is described by its columns; arrays by their shape alone
        columns = tabular.summary(s.X_train) if self.tabular() else ""
        return {"name": self.name, "kind": self.kind, "description": self.spec.description, "shape": f"({n}, {d})",
                "target": target, "n_val": len(s.y_val), "metric": self.metric, "time_limit_s": self.time_limit_s,
                "columns": columns, "method": self.method}

    def prompt(self) -> str:
        return render_prompt(self.prompt_fields())

    def descriptor(self) -> str:
        s = self.splits()
        n, d = s.X_train.shape
        classes = f" classes={len(np.unique(s.y_train))}" if self.kind == "classification" else ""
        table = "" if tabular.is_numeric_only(s.X_train) else " table=mixed"
        return (f"task={self.name} kind={self.kind} n={n} d={d}{classes}{table} metric={self.metric} "
                f"limit_s={self.time_limit_s:g}")

    def action_class(self, source: str) -> str:
        return action.action_class(source)


def render_prompt(f: dict) -> str:
    """The task prompt an agent reads, from `Task.prompt_fields`."""
    if f.get("columns"):
        data = f"X_train pandas DataFrame of shape {f['shape']}, columns {f['columns']}; empty cells are NaN"
    else:
        data = f"X_train float64 array of shape {f['shape']}, anonymous numeric features, no missing values"
    return (
        f"Task {f['name']} ({f['kind']}). {f['description']}\n"
        f"Data: {data}; {f['target']}.\n"
        f"Write Python defining build() that returns an unfitted scikit-learn estimator (a Pipeline is fine). "
        f"The harness calls build().fit(X_train, y_train), then {f.get('method', 'predict')}() on {f['n_val']} "
        f"validation rows whose labels you never see.\n"
        f"Score: {f['metric']} on validation, higher is better, ranked against reference models. "
        f"Time limit: {f['time_limit_s']:g} s for fit and predict. "
        f"Use only numpy{', pandas' if f.get('columns') else ''} and scikit-learn."
    )
