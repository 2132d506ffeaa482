"""The durable record of every execution: a run-local SQLite file, one committed row per execution.

It feeds offline world-model training and run resumption, so a row is committed (WAL,
synchronous=FULL) before the outcome is handed back: a SIGKILLed run loses nothing it returned.
"""
from __future__ import annotations

import json
import math
import sqlite3
import threading
import time
from pathlib import Path
from typing import Iterable, Iterator

from wmrl.domains.research.outcome import Outcome


class ExecutionLogError(RuntimeError):
    """An execution could not be recorded: training on it would leave the log (and a resume) without it."""


def storable(text: str | None) -> str | None:
    """`text` as SQLite can store it: characters UTF-8 cannot encode (lone surrogates, from an undecodable
    program file) kept as backslash escapes, everything else unchanged."""
    if text is None:
        return None
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS executions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,            -- unix time the outcome was recorded
    task TEXT NOT NULL,
    split TEXT NOT NULL,
    fingerprint TEXT,            -- the task data version the program ran on
    program TEXT NOT NULL,
    status TEXT NOT NULL,
    reward REAL,                 -- NULL for infra_error (missing, not a failure)
    wall_s REAL,
    fit_s REAL,
    predict_s REAL,
    outcome TEXT NOT NULL,       -- Outcome.to_dict() as JSON
    stdout_tail TEXT,
    detail TEXT,
    meta TEXT NOT NULL           -- the request's free-form tags as JSON
);
"""


class ExecutionLog:
    """Appends executions to `path`; safe to share between threads of one process."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # timeout: DDP ranks share one log; a writer waits for another's commit instead of failing
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=60)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def append(self, outcome: Outcome, program: str, meta: dict | None = None, fingerprint: str | None = None,
               stdout_tail: str = "", detail: str = "") -> int:
        """Record one execution and commit it; returns its row id. ExecutionLogError when it cannot be
        written (a full disk): the caller stops instead of training on an execution the log lacks."""
        reward = outcome.reward if isinstance(outcome.reward, (int, float)) and not math.isnan(outcome.reward) else None
        row = (time.time(), outcome.task, outcome.split, fingerprint, storable(program), outcome.status.value, reward,
               outcome.wall_s, outcome.fit_s, outcome.predict_s, json.dumps(outcome.to_dict()), storable(stdout_tail),
               storable(detail), json.dumps(meta or {}, default=str))
        with self._lock:
            try:
                cur = self._db.execute(
                    "INSERT INTO executions (ts, task, split, fingerprint, program, status, reward, wall_s, fit_s, "
                    "predict_s, outcome, stdout_tail, detail, meta) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", row)
            except sqlite3.Error as e:
                raise ExecutionLogError(f"execution log {self.path}: cannot record an execution ({type(e).__name__}: {e}); "
                                        "the run stops here (free disk space, then resume=last)") from e
            return cur.lastrowid

    def close(self) -> None:
        with self._lock:
            self._db.close()


def rewind(path: str | Path, step: int, replayed: Iterable[tuple[int, int]] = ()) -> int:
    """Forget executions a resumed run will replay: training steps >= `step`, the background anchors the
    checkpoint still held (`replayed`: (rank, step) of each submission; rank 0 for rows without one),
    evaluations after `step`. Rows written before anchors could lag more than a step carry the step that
    consumed them (`consumed`) instead.

    The checkpoint at `step` already holds the evaluation made at `step`; everything later is
    executed again, identically, by the resumed run. Returns the number of rows removed.
    """
    if not Path(path).exists():
        return 0
    db = sqlite3.connect(str(path), isolation_level=None)
    train = "json_extract(meta, '$.purpose') = 'train'"
    try:
        removed = db.execute(
            f"DELETE FROM executions WHERE ({train}"
            " AND COALESCE(json_extract(meta, '$.consumed'), json_extract(meta, '$.step')) >= ?)"
            " OR (json_extract(meta, '$.purpose') IN ('eval', 'transfer') AND json_extract(meta, '$.step') > ?)",
            (step, step)).rowcount
        for rank, submitted in sorted(set(replayed)):
            removed += db.execute(
                f"DELETE FROM executions WHERE {train} AND json_extract(meta, '$.deferred')"
                " AND json_extract(meta, '$.consumed') IS NULL AND COALESCE(json_extract(meta, '$.rank'), 0) = ?"
                " AND json_extract(meta, '$.step') = ?", (rank, submitted)).rowcount
        return removed
    finally:
        db.close()


def iter_log(path: str | Path) -> Iterator[dict]:
    """Executions in the order they were recorded, each a dict with `outcome` and `meta` decoded."""
    if not Path(path).exists():
        raise FileNotFoundError(f"no execution log at {path}")
    db = sqlite3.connect(str(path))  # not read-only: a reader may have to replay the WAL of a killed writer
    db.row_factory = sqlite3.Row
    try:
        for row in db.execute("SELECT * FROM executions ORDER BY id"):
            d = dict(row)
            d["outcome"] = json.loads(d["outcome"])
            d["meta"] = json.loads(d["meta"])
            yield d
    finally:
        db.close()


def read_log(path: str | Path) -> list[dict]:
    """All executions of a log file (see iter_log)."""
    return list(iter_log(path))
