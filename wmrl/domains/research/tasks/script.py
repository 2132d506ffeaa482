"""Script tasks, in the layout MLE-bench uses: the agent writes a whole program, the host grades its file.

A task folder::

    task.yaml                 name, kind, metric, target, id_column, time_limit_s, interface: script
    public/description.md     what the agent reads
    public/train.csv          labelled rows
    public/test.csv           rows to predict, without the target
    public/sample_submission.csv   the submission's columns (id, then target or one column per class)
    private/answers.csv       id and target of every test row: on the host only, never mounted

The program runs in its sandbox folder, reads ./input/ (the public files) and writes
./submission/submission.csv. The test rows are cut in two with the host secret (stratified):
the val half gives training rewards and the test half held-out evaluation, each against
references fitted on train.csv and scored on the same rows, so a program cannot tell which
of its rows count for what.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from wmrl.domains.research.tasks import data, tabular
from wmrl.domains.research.tasks.secret import rng_for
from wmrl.domains.research.tasks.spec import TaskError, TaskSpec
from wmrl.domains.research.tasks.task import Task

PUBLIC = ("description.md", "train.csv", "test.csv", "sample_submission.csv")
ANSWERS = ("answers.csv", "test.csv")  # ours, then MLE-bench's private/test.csv
SUBMISSION_PATH = "./submission/submission.csv"


def answers_path(folder: Path) -> Optional[Path]:
    return next((folder / "private" / a for a in ANSWERS if (folder / "private" / a).is_file()), None)


def check_folder(folder: Path, max_mb: float = tabular.DEFAULT_MAX_MB) -> None:
    """A usable task folder, or a TaskError naming what is missing or too large."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TaskError(f"task folder {str(folder)!r} does not exist")
    missing = [f"public/{n}" for n in PUBLIC if not (folder / "public" / n).is_file()]
    if answers_path(folder) is None:
        missing.append("private/answers.csv")
    if missing:
        raise TaskError(f"task folder {folder} lacks {', '.join(missing)}")
    for p in [*(folder / "public" / n for n in PUBLIC), answers_path(folder)]:
        tabular.check_size(p, max_mb, f"task folder {folder}")


class ScriptTask(Task):
    """A task whose programs are scripts judged by the submission file they write."""

    def __init__(self, spec: TaskSpec, secret: str, cache_dir: Path, max_data_mb: float = tabular.DEFAULT_MAX_MB):
        super().__init__(spec, secret, cache_dir, max_data_mb)
        self._ids: Optional[np.ndarray] = None
        self._rows: Dict[str, np.ndarray] = {}
        self._columns: List[str] = []

    def folder(self) -> Path:
        if self.spec.data.startswith("generated:"):
            from wmrl.domains.research.tasks.generated import materialize

            return materialize(self.spec.data.partition(":")[2], self.cache_dir, self._secret)
        return Path(self.spec.data)

    # --- data -------------------------------------------------------------------------
    def splits(self) -> data.Splits:
        if self._splits is None:
            self._splits = self._build_splits()
        return self._splits

    def _build_splits(self) -> data.Splits:
        folder = self.folder()
        check_folder(folder, self.max_data_mb)
        where, pub = f"task {self.name!r}", folder / "public"
        sample = tabular.read_table(pub / "sample_submission.csv", where, self.max_data_mb)
        self._columns = list(sample.columns)
        id_col = self.spec.id_column or self._columns[0]
        target = self.spec.target or (self._columns[1] if len(self._columns) == 2 else None)
        if target is None:
            raise TaskError(f"{where}: task.yaml needs `target` (sample_submission.csv has {len(self._columns)} columns)")
        train = tabular.read_table(pub / "train.csv", where, self.max_data_mb)
        test = tabular.read_table(pub / "test.csv", where, self.max_data_mb)
        answers = tabular.read_table(answers_path(folder), where, self.max_data_mb)
        for name, df, cols in (("train.csv", train, [id_col, target]), ("test.csv", test, [id_col]),
                               (answers_path(folder).name, answers, [id_col, target])):
            for c in cols:
                if c not in df.columns:
                    raise TaskError(f"{where}: column {c!r} is not in {name} (columns: {', '.join(df.columns)})")
        if target in test.columns:
            raise TaskError(f"{where}: public/test.csv holds the target column {target!r}: the answers would be public")
        if id_col not in self._columns:
            raise TaskError(f"{where}: id column {id_col!r} is not in sample_submission.csv")
        if test[id_col].duplicated().any():
            raise TaskError(f"{where}: column {id_col!r} of test.csv has duplicate ids")
        answers = answers.set_index(id_col)
        missing = ~test[id_col].isin(answers.index)
        if missing.any():
            raise TaskError(f"{where}: {int(missing.sum())} ids of test.csv have no answer, e.g. {test[id_col][missing].iloc[0]!r}")
        X_train, y_train = tabular.features_and_target(train, "train.csv", where, target, self.kind, id_col)
        y_all = answers.loc[test[id_col], target].to_numpy()
        if self.kind == "classification" and y_all.dtype.kind == "O":
            y_all = y_all.astype(str)
        X_all = test.drop(columns=[id_col]).reindex(columns=X_train.columns)
        val, tst = self._halves(y_all)
        self._ids = test[id_col].to_numpy()
        self._rows = {"val": val, "test": tst}
        part = lambda df, rows: df.iloc[rows].reset_index(drop=True)  # noqa: E731
        classes = None
        y_val, y_test = y_all[val], y_all[tst]
        if self.kind == "classification":
            labels, classes = tabular.class_codes(y_train, y_val, y_test, where=where, column=target)
            y_train, y_val, y_test = (np.searchsorted(labels, v).astype(np.int64) for v in (y_train, y_val, y_test))
        else:
            y_train, y_val, y_test = (np.asarray(v, dtype=np.float64) for v in (y_train, y_val, y_test))
        return data.Splits(X_train, y_train, part(X_all, val), y_val, part(X_all, tst), y_test, classes)

    def _halves(self, y: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Secret, stratified halves of the test rows (sorted positions): val for training, test for evaluation."""
        rng = rng_for(self._secret, self.name, "script-halves")
        key = rng.random(len(y))
        if self.kind == "classification":
            for c in np.unique(y):
                rows = np.flatnonzero(y == c)
                key[rows] = (rng.permutation(len(rows)) + rng.random(len(rows))) / len(rows)
        order = np.argsort(key, kind="stable")
        half = len(y) // 2
        if half < 1:
            raise TaskError(f"task {self.name!r}: test.csv needs at least 2 rows")
        return np.sort(order[:half]), np.sort(order[half:])

    def inputs(self, split: str) -> Dict[str, bytes]:
        """The public files, by name: all a script program may read (the same for every split)."""
        self._eval_xy(split)
        pub = self.folder() / "public"
        return {name: (pub / name).read_bytes() for name in PUBLIC}

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            import hashlib

            h = hashlib.sha256()
            for name, blob in sorted(self.inputs("val").items()):
                h.update(name.encode() + b"\0" + hashlib.sha256(blob).digest())
            self._fingerprint = h.hexdigest()[:16]
        return self._fingerprint

    # --- grading ----------------------------------------------------------------------
    def parse_submission(self, blob: bytes, split: str) -> Tuple[Optional[np.ndarray], str]:
        """(predictions of the scored rows in the form Task.judge validates, "") or (None, why).

        Checked like a competition grader: the sample's columns, every test id once, nothing else.
        """
        import pandas as pd

        s = self.splits()
        if not blob:
            return None, "invalid submission: the file is empty"
        try:
            sub = pd.read_csv(io.BytesIO(blob), dtype=str, keep_default_na=False)
        except Exception as e:
            return None, f"invalid submission: not a readable CSV ({type(e).__name__}: {str(e)[:200]})"
        if list(sub.columns) != self._columns:
            return None, f"invalid submission: columns {list(sub.columns)[:8]}, expected {self._columns}"
        id_col = self.spec.id_column or self._columns[0]
        if len(sub) != len(self._ids):
            return None, f"invalid submission: {len(sub)} rows, expected {len(self._ids)} (one per test id)"
        ids = pd.Index(sub[id_col])
        want = pd.Index(pd.Series(self._ids).astype(str))
        if ids.has_duplicates or not ids.sort_values().equals(want.sort_values()):
            return None, f"invalid submission: column {id_col!r} must hold every test id exactly once"
        sub = sub.set_index(id_col).loc[want[self._rows[split]]]
        values = [c for c in self._columns if c != id_col]
        if self.method == "predict_proba":
            return self._probabilities(sub, values, s.classes)
        col = sub[values[0]]
        if self.kind == "classification":
            names = [str(c) for c in s.classes]
            unknown = sorted(set(col) - set(names))
            if unknown:
                return None, f"invalid submission: labels never seen in train.csv, e.g. {unknown[:3]}"
            return np.array([names.index(v) for v in col], dtype=np.float64), ""
        out = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64)
        if not np.all(np.isfinite(out)):
            return None, f"invalid submission: column {values[0]!r} holds empty, non-numeric or infinite values"
        return out, ""

    def _probabilities(self, sub, values: List[str], classes: List) -> Tuple[Optional[np.ndarray], str]:
        import pandas as pd

        frame = sub[values].apply(pd.to_numeric, errors="coerce")
        if len(values) == 1:  # binary: the probability of the second class (sorted labels), as Kaggle does
            if len(classes) != 2:
                return None, "invalid submission: one probability column needs a binary target"
            p = frame.iloc[:, 0].to_numpy(dtype=np.float64)
            proba = np.column_stack([1.0 - p, p])
        else:
            names = [str(c) for c in classes]
            if sorted(values) != sorted(names):
                return None, f"invalid submission: probability columns {values}, expected one per class {names}"
            proba = frame[names].to_numpy(dtype=np.float64)
        if not np.all(np.isfinite(proba)):
            return None, "invalid submission: empty or non-numeric probabilities"
        return proba, ""

    def judge(self, raw, split: str = "val"):
        """Grades the submission bytes the sandbox brought back, then as any task: validate, score, place."""
        from dataclasses import replace

        from wmrl.domains.research.outcome import Status

        if raw.status is Status.VALID:
            self.splits()
            pred, why = self.parse_submission(raw.predictions if isinstance(raw.predictions, bytes) else b"", split)
            if pred is None:
                raw = replace(raw, status=Status.NO_VALID_OUTPUT,
                              stderr_tail=f"{raw.stderr_tail.rstrip()}\n{why}".lstrip(), predictions=None)
            else:
                raw = replace(raw, predictions=pred)
        return super().judge(raw, split)

    # --- what agents and the world model read -------------------------------------------
    def prompt(self) -> str:
        s = self.splits()
        description = (self.folder() / "public" / "description.md").read_text(errors="replace").strip()
        if len(description) > 1500:
            description = description[:1500] + " ..."
        score = f"{self.metric}, higher is better" if not self.metric.startswith("neg_") else \
            f"{self.metric} (a negated error: higher is better)"
        return (
            f"Task {self.name} ({self.kind}, script). {description}\n"
            f"Files in ./input/: train.csv ({len(s.y_train)} rows; columns {tabular.summary(s.X_train)} "
            f"and target {self.spec.target or self._columns[1]!r}), test.csv ({len(self._ids)} rows, no target), "
            f"sample_submission.csv (columns {self._columns}).\n"
            f"Write a Python program that reads ./input/ and writes {SUBMISSION_PATH} with the columns of "
            f"sample_submission.csv and one row per test id.\n"
            f"Score: {score}, on hidden answers, ranked against reference models. "
            f"Time limit: {self.time_limit_s:g} s for the whole program. Use numpy, pandas and scikit-learn."
        )

    def descriptor(self) -> str:
        return super().descriptor() + " interface=script"
