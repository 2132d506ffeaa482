"""Reference leaderboards: built once per (task data, reference set), cached as JSON on the host.

References are trusted code, so they run in-process; they are scored with the task's own
metric on both the validation and the test split, so validation outcomes (training) and
test outcomes (held-out evaluation) are each placed among references scored on the same rows.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List

import numpy as np

if TYPE_CHECKING:
    from wmrl.domains.research.tasks.task import Task


def cache_path(task: "Task") -> Path:
    key = hashlib.sha256(f"{task.data_digest()}|{task.metric}|{task.reference_hash()}".encode()).hexdigest()[:16]
    return task.cache_dir / "leaderboards" / f"{task.name}-{key}.json"


def load_or_build(task: "Task", rebuild: bool = False) -> Dict:
    """The cached leaderboard of `task`, built (under a file lock, once across processes) if missing."""
    path = cache_path(task)
    if path.exists() and not rebuild:
        return json.loads(path.read_text())
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists() and not rebuild:  # another process built it while we waited
            return json.loads(path.read_text())
        board = {"task": task.name, "metric": task.metric, "fingerprint": task.fingerprint(),
                 "references": fit_references(task), "built_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(board, indent=1))
        os.replace(tmp, path)
    return board


def fit_references(task: "Task") -> List[Dict]:
    """Fit every reference program on train; score it on val and test."""
    from threadpoolctl import threadpool_limits
    from tqdm import tqdm

    s = task.splits()
    rows = []
    programs = task.reference_programs()
    t0 = time.perf_counter()
    tty = sys.stderr.isatty()
    if not tty:  # a log file gets plain lines, not a bar's carriage returns
        print(f"leaderboard {task.name}: fitting {len(programs)} references (once; cached)", file=sys.stderr, flush=True)
    for name, source in tqdm(programs.items(), desc=f"leaderboard {task.name}", file=sys.stderr, leave=False,
                             disable=not tty):
        namespace: Dict = {}
        exec(compile(source, f"<reference {name}>", "exec"), namespace)
        start = time.perf_counter()
        # One thread, as in a sandbox slot; OpenMP spinning on a busy host also makes boosting 10x slower.
        with warnings.catch_warnings(), threadpool_limits(1):
            warnings.simplefilter("ignore")  # convergence chatter of weak references is expected
            model = namespace["build"]().fit(s.X_train, s.y_train)
            fit_s = time.perf_counter() - start
            scores = {split: task.score(np.asarray(getattr(model, task.method)(X)), split) for split, X in
                      (("val", s.X_val), ("test", s.X_test))}
        rows.append({"name": name, **scores, "fit_s": round(fit_s, 4)})
    if not tty:
        print(f"leaderboard {task.name}: done in {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
    return rows


def position(value: float, scores: List[float]) -> float:
    """Share of reference scores beaten by `value`, ties counting half: 0 below all, 1 above all."""
    ref = np.asarray(scores, dtype=np.float64)
    tie = np.isclose(ref, value, rtol=0.0, atol=1e-12)
    return float((np.sum((ref < value) & ~tie) + 0.5 * np.sum(tie)) / len(ref))
