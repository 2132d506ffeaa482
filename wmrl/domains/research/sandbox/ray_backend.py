"""The Ray backend: Ray actors spread over the cluster's nodes, each wrapping a local warm pool (the same
bubblewrap/unshare, seccomp, cgroups and uids as the local backend), fed one execution at a time by the
trainer.

The trainer side keeps what must not leave it: programs are pre-checked here, the actors get only what a
program may see (the task's disguised inputs, shared once per task through the object store) and send
back the raw result; the task is judged here against its hidden labels and leaderboard, and every
execution is committed to the trainer's execution log before its outcome is handed back.

Backpressure: an actor gets at most as many executions as its pool has slots; the rest wait on the
trainer. An actor lost mid-execution (killed, its node gone) is replaced and its executions are retried
on another actor; an execution lost more than `sandbox.retries` times becomes `infra_error`, recorded.
Ray is imported here only: the local backend never needs it.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import math
import os
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence


from wmrl.domains.research.outcome import Outcome, RawResult, Status
from wmrl.domains.research.sandbox.base import ExecRequest
from wmrl.domains.research.sandbox.local import LocalSandbox, RawExecution, judged, prechecked_batch, record
from wmrl.domains.research.sandbox.log import ExecutionLog, ExecutionLogError

log = logging.getLogger(__name__)

CLOSE_DRAIN_S = 60.0  # close() waits this long for executions still running, then fails them as infra_error


@dataclass
class ShippedTask:
    """What an actor's pool needs of a task: its name, limit, data version and the inputs a program may
    see (X_train, y_train, X_eval of one split) as an object-store reference. No labels to judge with."""

    name: str
    time_limit_s: float
    data_version: str
    inputs_ref: Any  # ray.ObjectRef of the task's inputs: (X_train, y_train, X_eval), or a script task's files
    interface: str = "estimator"  # estimator | script: how the worker runs the program
    method: str = "predict"  # what the harness calls on the fitted estimator

    def fingerprint(self) -> str:
        return self.data_version

    def inputs(self, split: str):
        import ray

        return ray.get(self.inputs_ref)


class PoolActor:
    """Body of one Ray actor: a local warm pool of `slots` workers on the actor's node."""

    def __init__(self, sandbox_cfg: Any, slots: int, private_paths: tuple[str, ...] = ()):
        self.pool = LocalSandbox(_with_slots(sandbox_cfg, slots), private_paths=private_paths)  # its slots claim cores no other actor here holds

    def describe(self) -> dict:
        import ray

        return {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid(), "isolation": self.pool.isolation,
                "slots": self.pool.slots}

    def execute(self, task: ShippedTask, program: str, split: str) -> RawExecution:
        return self.pool.submit_raw([ExecRequest(task, program, split)]).result()[0]

    def worker_pids(self) -> list:
        return self.pool.worker_pids()


@dataclass
class _Job:
    """One execution on its way through the actors."""

    future_batch: Any
    index: int
    req: ExecRequest
    lost: list[str] = field(default_factory=list)  # why each lost attempt was lost
    avoid: set = field(default_factory=set)  # actors it was lost on: its retry goes elsewhere
    t0: float = field(default_factory=time.monotonic)


@dataclass
class _Actor:
    key: int  # unique per actor ever started by this sandbox
    handle: Any
    slots: int
    busy: int = 0
    alive: bool = True


class RaySandbox:
    """`sandbox.slots` slots in Ray actors of `sandbox.ray.slots_per_actor` slots each; implements the
    Sandbox protocol."""

    def __init__(self, cfg: Any, log_path: str | os.PathLike | None = None, private_paths: Sequence[str] = ()):
        import ray

        self.cfg = cfg
        self.private_paths = tuple(str(p) for p in private_paths)  # hidden from programs on the nodes that have them
        ray_cfg = cfg.ray
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            local = ray_cfg.address is None
            ray.init(address=ray_cfg.address, include_dashboard=False, log_to_driver=True,
                     num_cpus=(int(cfg.slots) or os.cpu_count() or 1) if local else None)
        per_actor = max(1, int(ray_cfg.slots_per_actor))
        cpus = float(ray.cluster_resources().get("CPU", 1))
        self.slots = int(cfg.slots) or max(1, int(cpus / max(float(cfg.cpus_per_slot), 1e-9)))
        self.retries = int(cfg.retries)
        self._cluster_cpus = cpus
        sizes = [per_actor] * (self.slots // per_actor) + ([self.slots % per_actor] if self.slots % per_actor else [])
        self._log = ExecutionLog(log_path) if log_path else None
        self._data: collections.OrderedDict[str, Any] = collections.OrderedDict()  # task data key -> ObjectRef
        self._incoming: queue.Queue = queue.Queue()
        self._closed = False
        self._next_key = 0
        # Test hook: called as hook(actor_handle, job) right after an execution is sent to an actor.
        self._after_dispatch: Callable[[Any, _Job], None] | None = None
        self.actors: list[_Actor] = [self._start_actor(n) for n in sizes]
        try:
            self.nodes = ray.get([a.handle.describe.remote() for a in self.actors], timeout=float(ray_cfg.start_timeout_s))
        except Exception:
            self._shutdown()
            raise  # e.g. IsolationUnavailable on a node: refuse, as the local backend does
        log.info("ray sandbox: %d actors, %d slots on %d nodes", len(self.actors), self.slots,
                 len({d["node"] for d in self.nodes}))
        self._thread = threading.Thread(target=self._dispatch, daemon=True, name="ray-sandbox-dispatch")
        self._thread.start()

    # ------------------------------------------------------------------ protocol
    def submit(self, requests: Sequence[ExecRequest]) -> Future:
        if self._closed:
            raise RuntimeError("sandbox is closed")
        batch, pending = prechecked_batch(requests, self._log)  # pre-checked here, on the trainer
        for i, req in pending:
            self._incoming.put(_Job(batch, i, req))
        return batch.future

    def run(self, requests: Sequence[ExecRequest]) -> list[Outcome]:
        return self.submit(requests).result()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._incoming.put(None)
        self._thread.join(timeout=CLOSE_DRAIN_S + 30)
        self._shutdown()

    def __enter__(self) -> "RaySandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ actors
    def _start_actor(self, slots: int) -> _Actor:
        import ray

        cpus = min(slots * float(self.cfg.cpus_per_slot), self._cluster_cpus)  # reserved: Ray places actors by it
        remote = ray.remote(PoolActor).options(num_cpus=cpus, max_concurrency=slots + 2, max_restarts=0,
                                               scheduling_strategy="SPREAD")
        self._next_key += 1
        return _Actor(self._next_key, remote.remote(self.cfg, slots, self.private_paths), slots)

    def _replace(self, actor: _Actor) -> None:
        """A lost actor's place goes to a fresh one (Ray puts it on a node with room)."""
        import ray

        if not actor.alive:
            return
        actor.alive = False
        try:
            ray.kill(actor.handle, no_restart=True)
        except Exception:
            pass
        if not self._closed:
            self.actors[self.actors.index(actor)] = self._start_actor(actor.slots)

    def _shutdown(self) -> None:
        import ray

        for a in self.actors:
            try:
                ray.kill(a.handle, no_restart=True)
            except Exception:
                pass
        if self._log is not None:
            self._log.close()
        if self._owns_ray:
            ray.shutdown()

    # ------------------------------------------------------------------ dispatching
    def _dispatch(self) -> None:
        """Sends waiting executions to actors with a free slot and collects what comes back."""
        import ray

        waiting: collections.deque[_Job] = collections.deque()
        inflight: dict[Any, tuple[_Job, _Actor]] = {}
        stopping = False
        deadline = math.inf
        while True:
            block = not inflight and not waiting and not stopping
            try:
                while True:
                    item = self._incoming.get(timeout=0.5) if block else self._incoming.get_nowait()
                    block = False
                    if item is None:
                        stopping, deadline = True, time.monotonic() + CLOSE_DRAIN_S
                    else:
                        waiting.append(item)
            except queue.Empty:
                pass
            if stopping and (not inflight and not waiting or time.monotonic() > deadline):
                for job in list(waiting) + [j for j, _ in inflight.values()]:
                    self._finish_lost(job, "the sandbox was closed before the execution finished")
                return
            while waiting:
                actor = self._free_actor(waiting[0])
                if actor is None:
                    break
                job = waiting.popleft()
                ref = actor.handle.execute.remote(self._ship(job.req), job.req.program, job.req.split)
                actor.busy += 1
                inflight[ref] = (job, actor)
                if self._after_dispatch is not None:
                    self._after_dispatch(actor.handle, job)
            if not inflight:
                continue
            done, _ = ray.wait(list(inflight), num_returns=1, timeout=0.2)
            for ref in done:
                job, actor = inflight.pop(ref)
                actor.busy -= 1
                try:
                    ex = ray.get(ref)
                except Exception as e:  # the actor died or its pool failed: the execution was lost
                    job.lost.append(f"ray actor {actor.key}: {type(e).__name__}: {str(e)[:300]}")
                    job.avoid.add(actor.key)
                    log.warning("sandbox: attempt %d of %s lost on %s", len(job.lost), job.req.task.name, job.lost[-1])
                    self._replace(actor)
                    if len(job.lost) > self.retries:
                        self._finish_lost(job, "; ".join(job.lost))
                    else:
                        waiting.appendleft(job)
                    continue
                try:
                    self._finish(job, RawExecution(ex.raw, ex.attempts + len(job.lost), ex.stdout_tail))
                except Exception as e:  # never leave a batch hanging on a bug here
                    log.exception("sandbox: finishing an execution failed")
                    if not job.future_batch.future.done():
                        job.future_batch.future.set_exception(e)

    def _free_actor(self, job: _Job) -> _Actor | None:
        """The least busy live actor with a free slot, one the job was not lost on if there is one."""
        free = [a for a in self.actors if a.alive and a.busy < a.slots]
        fresh = [a for a in free if a.key not in job.avoid]
        pool = fresh or free
        return min(pool, key=lambda a: a.busy / a.slots) if pool else None

    def _ship(self, req: ExecRequest) -> ShippedTask:
        """The task as an actor sees it; its inputs go to the object store once per (task, data, split)."""
        import ray

        version = req.task.fingerprint()
        key = f"{req.task.name}:{version}:{req.split}"
        ref = self._data.get(key)
        if ref is None:
            inputs = req.task.inputs(req.split)  # arrays, DataFrames (tables) or a script task's files
            ref = ray.put(inputs if isinstance(inputs, dict) else tuple(inputs))
            self._data[key] = ref
            while len(self._data) > 16:  # calls in flight keep their own reference alive
                self._data.popitem(last=False)
        else:
            self._data.move_to_end(key)
        return ShippedTask(req.task.name, float(req.task.time_limit_s), version, ref, req.task.interface, req.task.method)

    def _finish(self, job: _Job, ex: RawExecution) -> None:
        try:
            outcome = judged(job.req, ex)
        except Exception as e:  # a bug in task.judge: never hang the batch
            log.exception("sandbox: judging failed on the host")
            outcome = judged(job.req, RawExecution(RawResult(Status.INFRA_ERROR, wall_s=ex.raw.wall_s,
                                                             stderr_tail=f"[sandbox] host error: {e!r}"), ex.attempts))
        try:
            record(self._log, job.req, outcome, detail=ex.raw.detail, stdout_tail=ex.stdout_tail)
        except ExecutionLogError as e:  # the caller stops instead of training on an unrecorded execution
            job.future_batch.fail(e)
            return
        job.future_batch.put(job.index, outcome)

    def _finish_lost(self, job: _Job, why: str) -> None:
        raw = RawResult(Status.INFRA_ERROR, wall_s=time.monotonic() - job.t0, detail=why[-1000:],
                        stderr_tail=f"[sandbox] infra_error: {why[-500:]}")
        self._finish(job, RawExecution(raw, attempts=len(job.lost)))


def _with_slots(cfg: Any, slots: int) -> Any:
    """The sandbox config of one actor's pool: the local backend with `slots` slots."""
    if dataclasses.is_dataclass(cfg):
        return dataclasses.replace(cfg, slots=slots, backend="local")
    from omegaconf import OmegaConf

    return OmegaConf.merge(cfg, {"slots": slots, "backend": "local"})
