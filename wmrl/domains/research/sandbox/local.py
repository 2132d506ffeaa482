"""The local backend: a warm pool of isolated zygote workers, one per slot.

Each worker is started once inside the isolation, imports the scientific stack once, and
forks a fresh child per program, so an execution costs a fork instead of an interpreter
start. A worker that dies or stops answering is replaced and its execution retried;
only an execution the sandbox itself keeps losing becomes `infra_error`.
"""
from __future__ import annotations

import fcntl
import io
import json
import logging
import math
import os
import queue
import select
import struct
import subprocess
import tempfile
import threading
import time
import traceback
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from wmrl.config import SandboxConfig
from wmrl.domains.research.outcome import Outcome, RawResult, Status, ladder_reward, sandbox_error_line
from wmrl.domains.research.sandbox import isolation
from wmrl.domains.research.sandbox.cgroups import CgroupsUnavailable, SlotCgroups, SlotLimits
from wmrl.domains.research.sandbox.cgroups import describe as cgroups_describe
from wmrl.domains.research.sandbox.isolation import IsolationUnavailable
from wmrl.domains.research.sandbox.base import ExecRequest, SandboxClosed
from wmrl.domains.research.sandbox.log import ExecutionLog, ExecutionLogError
from wmrl.domains.research.sandbox.program import precheck

log = logging.getLogger(__name__)

STARTUP_S = 120.0  # a cold worker imports sklearn & co. once; a busy 2-core machine can be slow
ANSWER_MARGIN_S = 10.0  # beyond the program's limit: sweep, teardown and transfer
CLOSE_S = 30.0  # close() gives the serving threads this long to see their killed workers
STDERR_TAIL_CHARS = 2000  # what an Outcome carries; the log keeps the full capped tail
WORKER_PROCS = 8  # processes of a warm worker itself (bwrap, zygote, template, sweep helper), on top of max_procs
SANDBOX_STATUSES = {s.value: s for s in (Status.VALID, Status.RUNTIME_ERROR, Status.TIMEOUT, Status.NO_VALID_OUTPUT)}


@dataclass
class RawExecution:
    """One execution as a warm worker ended it, before the task judged it: what a Ray actor sends back,
    so hidden labels, leaderboards and the execution log stay with the trainer."""

    raw: RawResult
    attempts: int  # tries it took, lost ones included
    stdout_tail: str = ""


class WorkerLost(Exception):
    """The worker died, broke the protocol, or did not answer in time: the sandbox's fault."""


class _Worker:
    """One slot: a zygote process inside the isolation, spoken to over its stdin/stdout."""

    def __init__(self, slot: int, uid: int, mode: str, scratch_mb: int, cgroups: SlotCgroups | None,
                 private_paths: tuple[str, ...] = ()):
        self.slot = slot
        self.uid = uid
        self.mode = mode
        self.scratch_mb = scratch_mb
        self.cgroups = cgroups
        self.private_paths = private_paths
        self.proc: subprocess.Popen | None = None
        self.seccomp = ""  # "on", or why the worker runs without its filter
        self._stderr = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        self.stop()
        drop_uid = os.geteuid() == 0
        argv = isolation.command(self.mode, {"uid": self.uid, "drop_uid": drop_uid}, scratch_mb=self.scratch_mb,
                                 private_paths=self.private_paths)
        if self.cgroups is not None:
            argv = self.cgroups.wrap(self.slot, argv)
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     env=isolation.zygote_env(), close_fds=True, cwd="/")
        header, _ = self._read(time.monotonic() + STARTUP_S)
        if header.get("op") != "ready":
            raise WorkerLost(f"worker {self.slot} did not start: {header}")
        self.seccomp = str(header.get("seccomp", "no answer"))

    def stop(self) -> None:
        if self.proc is not None:
            try:
                self.proc.kill()  # bwrap/unshare take the whole pid namespace down with them
                self.proc.wait(timeout=10)
            except Exception:
                pass
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except Exception:
                    pass
            self.proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def interrupt(self) -> None:
        """Kills the worker from another thread; the thread serving it sees it die and cleans up."""
        proc = self.proc
        try:
            if proc is not None and proc.poll() is None:
                proc.kill()
        except OSError:
            pass

    def stderr_tail(self, n: int = 1000) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0, io.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - n))
            return self._stderr.read().decode(errors="replace")
        except Exception:
            return ""

    def request(self, header: dict, blobs: Sequence[bytes], deadline: float) -> tuple[dict, list[bytes]]:
        if not self.alive:
            raise WorkerLost(f"worker {self.slot} is not running")
        h = json.dumps(dict(header, blobs=[len(b) for b in blobs])).encode()
        try:
            self.proc.stdin.write(struct.pack(">I", len(h)) + h)
            for b in blobs:
                self.proc.stdin.write(b)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as e:
            raise WorkerLost(f"worker {self.slot}: cannot send ({e}); {self.stderr_tail()}") from None
        return self._read(deadline)

    def _read(self, deadline: float) -> tuple[dict, list[bytes]]:
        (hlen,) = struct.unpack(">I", self._read_exact(4, deadline))
        try:
            header = json.loads(self._read_exact(hlen, deadline))
        except ValueError as e:
            raise WorkerLost(f"worker {self.slot}: unreadable header ({e})") from None
        return header, [self._read_exact(int(n), deadline) for n in header.get("blobs", [])]

    def _read_exact(self, n: int, deadline: float) -> bytes:
        fd = self.proc.stdout.fileno()
        chunks, got = [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerLost(f"worker {self.slot} did not answer in time")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            b = os.read(fd, min(n - got, 1 << 20))
            if not b:
                code = self.proc.poll()
                raise WorkerLost(f"worker {self.slot} died (exit {code}); {self.stderr_tail()}".strip())
            chunks.append(b)
            got += len(b)
        return b"".join(chunks)


class _Batch:
    """The outcomes of one submit(), resolved into its future when the last one lands."""

    def __init__(self, n: int):
        self.future: Future = Future()
        self.results: list[Outcome | None] = [None] * n
        self.left = n
        self.settled = False  # the future has its result or its error
        self.lock = threading.Lock()

    def put(self, i: int, outcome: Outcome) -> None:
        with self.lock:
            self.results[i] = outcome
            self.left -= 1
            last = self.left == 0 and not self.settled
            self.settled |= last
        if last:  # outside the lock: the future's callbacks run here
            self.future.set_result(list(self.results))

    def fail(self, error: BaseException) -> None:
        with self.lock:
            first, self.settled = not self.settled, True
        if first:
            self.future.set_exception(error)


class LocalSandbox:
    """Warm pool of `slots` isolated workers on this machine; implements the Sandbox protocol."""

    def __init__(self, cfg: SandboxConfig | Any, log_path: str | os.PathLike | None = None,
                 private_paths: Sequence[str] = ()):
        """`private_paths`: host files and folders holding task data or answers (`TaskSuite.private_paths()`),
        hidden from programs wherever the isolation would otherwise show them."""
        self.cfg = cfg
        self.slots = int(cfg.slots) or os.cpu_count() or 1
        self.isolation = isolation.choose(cfg.isolation)
        if self.isolation == "none":
            log.warning("sandbox.isolation=none: agent programs run WITHOUT isolation on this machine")
        self.memory_mb = int(cfg.memory_mb)
        self.max_procs = int(cfg.max_procs)
        self.max_file_mb = int(cfg.max_file_mb)
        self.output_cap = int(cfg.output_cap_kb) * 1024
        self.timeout_scale = float(cfg.timeout_scale)
        self.retries = int(cfg.retries)
        self.prediction_cap_mb = int(cfg.max_prediction_mb)
        self.scratch_mb = int(cfg.scratch_mb)
        self._log = ExecutionLog(log_path) if log_path else None
        self._queue: queue.Queue = queue.Queue()
        self._data: OrderedDict[str, list[bytes]] = OrderedDict()  # serialized task arrays, by data key
        self._data_lock = threading.Lock()
        self._closed = False
        # Test hook: called as hook(worker, attempt) before every attempt, e.g. to kill the worker.
        self._before_attempt: Callable[[_Worker, int], None] | None = None
        self._core_locks, self.cores = [], []  # cores the slots are pinned to (claimed machine-wide), or none
        self._uid_lock, uid_base = _claim_uids(self.slots)
        self.uids = [uid_base + k for k in range(self.slots)]  # one private uid per slot, machine-wide unique
        self.cgroups = self._make_cgroups(str(cfg.cgroups), f"wmrl-sandbox-{uid_base}", float(cfg.cpus_per_slot),
                                          int(cfg.worker_memory_mb))
        self._workers = [_Worker(k, self.uids[k], self.isolation, self.scratch_mb, self.cgroups,
                                 tuple(str(p) for p in private_paths))
                         for k in range(self.slots)]
        self._seccomp_warned = False
        # Each worker is started and served by its own long-lived thread: bwrap's
        # --die-with-parent follows the thread that spawned it.
        self._threads = [threading.Thread(target=self._serve, args=(w,), daemon=True, name=f"sandbox-slot{w.slot}")
                         for w in self._workers]
        for t in self._threads:
            t.start()

    # ------------------------------------------------------------------ protocol
    def submit(self, requests: Sequence[ExecRequest]) -> Future:
        if self._closed:
            raise RuntimeError("sandbox is closed")
        batch, pending = prechecked_batch(requests, self._log)
        for i, req in pending:
            self._queue.put((batch, i, req, True))
        return batch.future

    def submit_raw(self, requests: Sequence[ExecRequest]) -> Future:
        """Run programs that passed the pre-check without judging or logging them: the future resolves to
        their `RawExecution`s in request order (a Ray actor's pool; the trainer judges and logs)."""
        if self._closed:
            raise RuntimeError("sandbox is closed")
        batch = _Batch(len(requests))
        if not requests:
            batch.future.set_result([])
        for i, req in enumerate(requests):
            self._queue.put((batch, i, req, False))
        return batch.future

    def run(self, requests: Sequence[ExecRequest]) -> list[Outcome]:
        return self.submit(requests).result()

    def close(self) -> None:
        """Stops now: queued executions never start and running ones are killed (a stopped run must not wait
        for an evaluation's worth of them); their futures raise `SandboxClosed` and the log keeps only what
        finished, so a resumed run executes the rest again."""
        if self._closed:
            return
        self._closed = True
        self._fail_queued()
        for _ in self._threads:
            self._queue.put(None)
        deadline = time.monotonic() + CLOSE_S
        while any(t.is_alive() for t in self._threads) and time.monotonic() < deadline:
            for w in self._workers:
                w.interrupt()
            for t in self._threads:
                t.join(timeout=0.2)
        self._fail_queued()  # submitted while closing
        for w in self._workers:
            w.stop()
        if self.cgroups is not None:
            self.cgroups.remove()
        if self._log is not None:
            self._log.close()
        for fd in self._core_locks:
            os.close(fd)
        os.close(self._uid_lock)

    def __enter__(self) -> "LocalSandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def _fail_queued(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                item[0].fail(SandboxClosed(f"the sandbox closed before {item[2].task.name}'s execution started"))

    def _make_cgroups(self, mode: str, name: str, cpus: float, worker_mb: int) -> SlotCgroups | None:
        """The slots' cgroups, or None (said once, here) where this machine does not allow them."""
        if mode not in ("auto", "require", "off"):
            raise ValueError(f"unknown sandbox.cgroups={mode!r}; valid: auto, require, off")
        if mode == "off" or self.isolation == "none":
            return None
        # pinning only when every slot gets a core to itself, one no other sandbox here holds (DDP ranks, Ray actors)
        self._core_locks, self.cores = _claim_cores(self.slots)
        limits = [SlotLimits(memory_bytes=(self.memory_mb + worker_mb) << 20, cpus=cpus,
                             pids=self.max_procs + WORKER_PROCS, cpu=self.cores[k] if self.cores else None)
                  for k in range(self.slots)]
        try:
            return SlotCgroups(name, self.slots, limits)
        except CgroupsUnavailable as e:
            for fd in self._core_locks:  # nothing is pinned: leave the cores to others
                os.close(fd)
            self._core_locks, self.cores = [], []
            if mode == "require":
                raise IsolationUnavailable(f"sandbox.cgroups=require: {e}") from None
            log.warning(cgroups_describe(e))
            return None

    def worker_pids(self) -> list[int | None]:
        """Host pids of the workers' outermost processes (for tests and monitoring)."""
        return [w.proc.pid if w.alive else None for w in self._workers]

    # ------------------------------------------------------------------ serving
    def _serve(self, worker: _Worker) -> None:
        try:
            worker.start()
            self._check_seccomp(worker)
        except Exception as e:  # retried when a job arrives
            log.warning("sandbox worker %d failed to start: %s", worker.slot, e)
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch, i, req, judge = item
            try:
                ex = self._execute(worker, req)
                outcome = judged(req, ex) if judge else ex
            except SandboxClosed as e:
                batch.fail(e)
                continue
            except Exception as e:  # a bug on the host side (e.g. in task.judge): never hang the batch
                if self._closed:  # a race with close() killing the worker, not a result
                    batch.fail(SandboxClosed(f"the sandbox closed during {req.task.name}'s execution ({e!r})"))
                    continue
                log.error("sandbox: execution failed on the host: %s", traceback.format_exc())
                raw = RawResult(Status.INFRA_ERROR, stderr_tail=f"[sandbox] host error: {e!r}",
                                detail=traceback.format_exc()[-2000:])
                ex = RawExecution(raw, attempts=1)
                outcome = judged(req, ex) if judge else ex
            try:
                if judge:
                    record(self._log, req, outcome, detail=ex.raw.detail, stdout_tail=ex.stdout_tail)
            except ExecutionLogError as e:  # the caller stops; this slot's thread goes on serving
                batch.fail(e)
                continue
            batch.put(i, outcome)

    def _check_seccomp(self, worker: _Worker) -> None:
        if worker.seccomp != "on" and self.isolation != "none" and not self._seccomp_warned:
            self._seccomp_warned = True
            log.warning("sandbox: executions run WITHOUT their seccomp filter: %s", worker.seccomp)

    def _execute(self, worker: _Worker, req: ExecRequest) -> RawExecution:
        limit = float(req.task.time_limit_s) * self.timeout_scale
        key, blobs_fn = self._task_data(req)
        limits = {"uid": worker.uid, "wall_s": limit, "cpu_s": math.ceil(limit) + 1, "memory_mb": self.memory_mb,
                  "max_procs": self.max_procs if os.geteuid() == 0 else 0, "max_file_mb": self.max_file_mb,
                  "output_cap": self.output_cap, "prediction_cap_mb": self.prediction_cap_mb}
        oom_before = self.cgroups.oom_kills(worker.slot) if self.cgroups is not None else 0
        t0 = time.monotonic()
        lost: list[str] = []
        reply = blobs = None
        for attempt in range(1, self.retries + 2):
            if self._closed:
                raise SandboxClosed(f"the sandbox closed before {req.task.name}'s execution finished")
            try:
                if not worker.alive:
                    worker.start()
                    self._check_seccomp(worker)
                if self._before_attempt is not None:
                    self._before_attempt(worker, attempt)
                header = {"op": "run", "key": key, "source": req.program, "limits": limits,
                          "interface": req.task.interface, "method": req.task.method}
                reply, blobs = worker.request(header, [], time.monotonic() + limit + ANSWER_MARGIN_S)
                if reply.get("op") == "need_data":
                    names, data = blobs_fn()
                    ok, _ = worker.request({"op": "data", "key": key, "names": names}, data,
                                           time.monotonic() + STARTUP_S)
                    if ok.get("op") != "ok":
                        raise WorkerLost(f"worker {worker.slot} refused the task data: {ok}")
                    reply, blobs = worker.request(header, [], time.monotonic() + limit + ANSWER_MARGIN_S)
                if reply.get("op") != "result":
                    raise WorkerLost(f"worker {worker.slot}: unexpected answer {reply.get('op')!r}")
                if reply.get("status") == "infra_error":  # the worker's own verdict: it could not set the child up
                    raise WorkerLost(f"worker {worker.slot}: {reply.get('detail')}")
                break
            except (WorkerLost, OSError) as e:
                if self._closed:  # close() killed the worker: not an infrastructure error
                    raise SandboxClosed(f"the sandbox closed before {req.task.name}'s execution finished") from None
                lost.append(str(e))
                log.warning("sandbox: attempt %d of %s lost: %s", attempt, req.task.name, e)
                worker.stop()  # replaced at the next attempt or job
                reply = None
        wall_s = time.monotonic() - t0
        attempts = len(lost) + (reply is not None)
        if reply is None:
            raw = RawResult(Status.INFRA_ERROR, wall_s=wall_s, detail="; ".join(lost)[-1000:])
        else:
            raw = self._raw_result(reply, blobs, wall_s, script=req.task.interface == "script")
            if raw.status is Status.RUNTIME_ERROR and self.cgroups is not None and \
                    self.cgroups.oom_kills(worker.slot) > oom_before:
                raw.detail += "; the slot's memory limit was reached"
                raw.stderr_tail += f"\n[sandbox] memory limit of {self.memory_mb} MiB reached (shm and memfd count)"
        return RawExecution(raw, attempts, str((reply or {}).get("stdout_tail", "")))

    def _raw_result(self, reply: dict, blobs: list[bytes], wall_s: float, script: bool = False) -> RawResult:
        status = SANDBOX_STATUSES.get(reply.get("status"), Status.RUNTIME_ERROR)
        detail = str(reply.get("detail", ""))
        predictions = None
        if status is Status.VALID and script:  # the submission file's bytes: the task parses and grades them
            predictions = blobs[0] if blobs else b""
        elif status is Status.VALID:
            predictions, why = parse_predictions(blobs[0] if blobs else b"", self.prediction_cap_mb << 20)
            if predictions is None:
                status, detail = Status.NO_VALID_OUTPUT, why
        stderr = str(reply.get("stderr_tail", ""))
        if status is not Status.VALID and detail:
            stderr = (stderr.rstrip("\n") + "\n" if stderr.strip() else "") + sandbox_error_line(status, detail)
        return RawResult(status=status, predictions=predictions, wall_s=wall_s, fit_s=_seconds(reply.get("fit_s"), wall_s),
                         predict_s=_seconds(reply.get("predict_s"), wall_s), stderr_tail=stderr[-STDERR_TAIL_CHARS:],
                         detail=detail)

    def _task_data(self, req: ExecRequest) -> tuple[str, Callable[[], tuple[list[str] | None, list[bytes]]]]:
        """The cache key of the task's inputs and a function serializing them (once per host):
        (None, [X_train, y_train, X_eval] as .npy or Parquet) for an estimator task,
        (file names, file bytes) for a script task."""
        key = f"{req.task.name}:{req.task.fingerprint()}:{req.split}"

        def blobs() -> tuple[list[str] | None, list[bytes]]:
            with self._data_lock:
                if key in self._data:
                    self._data.move_to_end(key)
                    return self._data[key]
            inputs = req.task.inputs(req.split)
            if isinstance(inputs, dict):
                out = (sorted(inputs), [inputs[name] for name in sorted(inputs)])
            else:
                out = (None, [_serialize(x) for x in inputs])
            with self._data_lock:
                self._data[key] = out
                while len(self._data) > 16:
                    self._data.popitem(last=False)
            return out

        return key, blobs


def prechecked_batch(requests: Sequence[ExecRequest], execution_log: ExecutionLog | None) -> tuple[_Batch, list]:
    """A batch for `requests` in which the programs the pre-check decides are already judged and logged (they
    cost no slot); the (index, request) pairs still to execute."""
    requests = list(requests)
    batch = _Batch(len(requests))
    if not requests:
        batch.future.set_result([])
    pending = []
    for i, req in enumerate(requests):
        outcome = precheck_outcome(req)
        if outcome is not None:
            record(execution_log, req, outcome, detail=outcome.stderr_tail)
            batch.put(i, outcome)
        else:
            pending.append((i, req))
    return batch, pending


def precheck_outcome(req: ExecRequest) -> Outcome | None:
    """The outcome of a program the pre-check already decides (malformed, syntax error), else None."""
    status, detail = precheck(req.program, req.task.interface)
    if status is None:
        return None
    return Outcome(task=req.task.name, status=status, reward=ladder_reward(status), stderr_tail=detail,
                   split=req.split, attempts=0)


def judged(req: ExecRequest, ex: RawExecution) -> Outcome:
    """The task's verdict on what the sandbox returned (on the host that holds the hidden labels)."""
    raw = ex.raw
    if raw.status is Status.VALID:
        outcome = req.task.judge(raw, req.split)
    else:
        outcome = Outcome(task=req.task.name, status=raw.status, reward=ladder_reward(raw.status))
    outcome.split = req.split
    outcome.wall_s = raw.wall_s
    outcome.fit_s = raw.fit_s if outcome.fit_s is None else outcome.fit_s
    outcome.predict_s = raw.predict_s if outcome.predict_s is None else outcome.predict_s
    if not outcome.stderr_tail:
        outcome.stderr_tail = raw.stderr_tail
    outcome.attempts = ex.attempts
    return outcome


def record(execution_log: ExecutionLog | None, req: ExecRequest, outcome: Outcome, detail: str = "",
           stdout_tail: str = "") -> None:
    """Commit one execution to the log (when there is one) before its outcome is handed back."""
    if execution_log is None:
        return
    try:
        fp = req.task.fingerprint()
    except Exception:
        fp = None
    execution_log.append(outcome, req.program, req.meta, fingerprint=fp, stdout_tail=stdout_tail, detail=detail)


def _serialize(x: Any) -> bytes:
    """.npy for arrays, Parquet for DataFrames (names and dtypes kept); neither needs pickle to load."""
    import pandas as pd

    if isinstance(x, pd.DataFrame):
        buf = io.BytesIO()
        x.to_parquet(buf, index=False)
        return buf.getvalue()
    buf = io.BytesIO()
    np.save(buf, np.asarray(x), allow_pickle=False)
    return buf.getvalue()


UID_BLOCK = 256  # uids reserved per sandbox: slots beyond this are not supported


def _claim_uids(slots: int) -> tuple[int, int]:
    """(lock fd, first uid) of a uid block no other live sandbox on this machine holds.

    Two sandboxes sharing a uid would kill each other's programs in the post-execution
    sweep; an flock is released by the kernel even if this process is SIGKILLed."""
    if slots > UID_BLOCK:
        raise ValueError(f"sandbox.slots={slots} exceeds {UID_BLOCK} per sandbox")
    lock_dir = "/tmp/wmrl-sandbox-uids"
    os.makedirs(lock_dir, mode=0o700, exist_ok=True)
    for k in range(200):
        fd = os.open(f"{lock_dir}/{k}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd, isolation.UID_BASE + k * UID_BLOCK
        except BlockingIOError:
            os.close(fd)
    raise RuntimeError("more than 200 sandboxes alive on this machine")


def _claim_cores(n: int) -> tuple[list[int], list[int]]:
    """(lock fds, cores): `n` cores of this process's affinity that no other live sandbox on this machine has
    pinned slots to, or ([], []) when fewer are free. An flock per core, released by the kernel on death."""
    lock_dir = "/tmp/wmrl-sandbox-cores"
    os.makedirs(lock_dir, mode=0o700, exist_ok=True)
    fds, cores = [], []
    for core in sorted(os.sched_getaffinity(0)):
        if len(cores) == n:
            break
        fd = os.open(f"{lock_dir}/{core}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fds.append(fd)
            cores.append(core)
        except BlockingIOError:
            os.close(fd)
    if len(cores) < n:
        for fd in fds:
            os.close(fd)
        return [], []
    return fds, cores


def parse_predictions(data: bytes, cap_bytes: int) -> tuple[np.ndarray | None, str]:
    """Predictions from agent-produced .npy bytes, or (None, why). Never unpickles: agent
    code may have crafted the bytes; only plain numeric arrays are accepted."""
    if not data:
        return None, "no predictions came back"
    if len(data) > cap_bytes:
        return None, f"predictions larger than {cap_bytes >> 20} MiB"
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as e:
        return None, f"unreadable predictions: {type(e).__name__}: {str(e)[:200]}"
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "biuf" or arr.dtype.fields is not None:
        return None, f"predictions are not real numbers (dtype {getattr(arr, 'dtype', '?')})"
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        return None, "predictions contain NaN or infinity"
    return arr, ""


def _seconds(value: Any, wall_s: float) -> float | None:
    """A duration the worker measured, or None: never negative, NaN or longer than the whole execution."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if 0.0 <= value <= wall_s else None
