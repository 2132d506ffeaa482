"""Per-slot cgroups: each warm worker and everything it forks lives in its slot's cgroup.

Limits a slot's whole memory (anonymous, and shm/memfd/tmpfs pages, which an address-space rlimit
misses), its CPU (a quota, plus a core of its own when there are enough), and its process count.
cgroup v1 (one hierarchy per controller) and v2 (unified) are both supported; the slot cgroups are
made under this process's own cgroup, so every limit above it still applies.
Hand-written: the Python cgroup libraries (cgroupspy, ...) are unmaintained and v1-only.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000
V1_CONTROLLERS = ("memory", "cpu", "pids", "cpuset")


class CgroupsUnavailable(RuntimeError):
    """This machine (or this process's permissions) does not allow per-slot cgroups."""


@dataclass
class SlotLimits:
    memory_bytes: int  # the slot's worker plus its execution, shm and memfd included
    cpus: float  # CPU quota, cores
    pids: int  # processes and threads of the slot
    cpu: int | None  # the core this slot gets to itself, or None to share all


def _own_path(controller: str | None, proc_cgroup: str) -> str:
    """This process's cgroup path in `controller`'s hierarchy (None: the v2 unified one)."""
    for line in proc_cgroup.splitlines():
        hid, ctrls, path = line.split(":", 2)
        if (controller is None and hid == "0") or (controller and controller in ctrls.split(",")):
            return path
    raise CgroupsUnavailable(f"this process is in no {controller or 'unified'} cgroup")


class SlotCgroups:
    """The cgroups of one sandbox's slots: created at start-up, removed at close."""

    def __init__(self, name: str, slots: int, limits: SlotLimits | list[SlotLimits], root: Path | None = None,
                 proc_cgroup: str | None = None):
        self.root = Path(root if root is not None else ROOT)
        proc_cgroup = proc_cgroup if proc_cgroup is not None else Path("/proc/self/cgroup").read_text()
        per_slot = limits if isinstance(limits, list) else [limits] * slots
        if (self.root / "memory" / "memory.limit_in_bytes").exists():
            self.version = 1
            self.bases = {c: self.root / c / _own_path(c, proc_cgroup).lstrip("/") / name for c in V1_CONTROLLERS
                          if (self.root / c).is_dir()}
            missing = [c for c in ("memory", "cpu", "pids") if c not in self.bases]
            if missing:
                raise CgroupsUnavailable(f"cgroup v1 controllers not mounted: {', '.join(missing)}")
        elif (self.root / "cgroup.controllers").exists():
            self.version = 2
            self.bases = {"unified": self.root / _own_path(None, proc_cgroup).lstrip("/") / name}
        else:
            raise CgroupsUnavailable(f"no cgroup v1 memory controller nor cgroup v2 under {self.root}")
        self.slots: list[list[Path]] = []  # per slot: its directory in every hierarchy
        try:
            for k in range(slots):
                self.slots.append(self._make(k, per_slot[k]))
        except OSError as e:
            self.remove()
            raise CgroupsUnavailable(f"cannot create slot cgroups ({e})") from None

    def _make(self, k: int, lim: SlotLimits) -> list[Path]:
        quota = max(1000, int(lim.cpus * CPU_PERIOD_US))
        if self.version == 2:
            base = self.bases["unified"]
            base.mkdir(parents=True, exist_ok=True)
            wanted = {"memory", "cpu", "pids", "cpuset"} & set((base / "cgroup.controllers").read_text().split())
            missing = {"memory", "cpu", "pids"} - wanted
            if missing:
                raise OSError(f"cgroup v2 controllers not delegated here: {', '.join(sorted(missing))}")
            (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(wanted)))
            d = base / f"slot{k}"
            d.mkdir(exist_ok=True)
            (d / "memory.max").write_text(str(lim.memory_bytes))
            if (d / "memory.swap.max").exists():
                (d / "memory.swap.max").write_text("0")
            (d / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
            (d / "pids.max").write_text(str(lim.pids))
            if lim.cpu is not None and (d / "cpuset.cpus").exists():
                (d / "cpuset.cpus").write_text(str(lim.cpu))
            return [d]
        dirs = []
        for c, base in self.bases.items():
            d = base / f"slot{k}"
            d.mkdir(parents=True, exist_ok=True)
            dirs.append(d)
            if c == "memory":
                (d / "memory.limit_in_bytes").write_text(str(lim.memory_bytes))
                if (d / "memory.memsw.limit_in_bytes").exists():  # no escape into swap
                    (d / "memory.memsw.limit_in_bytes").write_text(str(lim.memory_bytes))
            elif c == "cpu":
                (d / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
                (d / "cpu.cfs_quota_us").write_text(str(quota))
            elif c == "pids":
                (d / "pids.max").write_text(str(lim.pids))
            elif c == "cpuset":  # v1 cpusets start empty: a task cannot join until cpus and mems are set
                parent_cpus = (base.parent / "cpuset.effective_cpus").read_text().strip() or \
                    (base.parent / "cpuset.cpus").read_text().strip()
                for f in ("cpuset.cpus", "cpuset.mems"):
                    if not (base / f).read_text().strip():
                        (base / f).write_text((base.parent / f).read_text().strip())
                (d / "cpuset.cpus").write_text(str(lim.cpu) if lim.cpu is not None else parent_cpus)
                (d / "cpuset.mems").write_text((base / "cpuset.mems").read_text().strip())
        return dirs

    def procs_files(self, slot: int) -> list[str]:
        """The files a process writes its pid into to join `slot` (one per hierarchy)."""
        return [str(d / "cgroup.procs") for d in self.slots[slot]]

    def wrap(self, slot: int, argv: list[str]) -> list[str]:
        """argv that joins the slot's cgroups and then execs `argv` (same pid): everything it forks,
        the zygote and every execution included, is born inside the slot's limits."""
        script = 'for f in "$@"; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 111; done; shift $(( $# - N )); exec "$@"'
        files = self.procs_files(slot)
        return ["/bin/sh", "-c", script.replace("N", str(len(argv))), "sh", *files, "--", *argv]

    def oom_kills(self, slot: int) -> int:
        """How many times the memory limit of `slot` killed a process so far."""
        for d in self.slots[slot]:
            for name, key in (("memory.oom_control", "oom_kill"), ("memory.events", "oom_kill")):
                f = d / name
                if f.exists():
                    for line in f.read_text().splitlines():
                        k, _, v = line.partition(" ")
                        if k == key:
                            return int(v)
        return 0

    def remove(self) -> None:
        """Remove every slot cgroup (their processes must be gone); idempotent."""
        for dirs in self.slots:
            for d in dirs:
                _rmdir(d)
        self.slots = []
        for base in self.bases.values():
            _rmdir(base)


def _rmdir(d: Path) -> None:
    for _ in range(50):  # a killed process leaves its cgroup a moment after it is reaped
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)
    log.warning("sandbox: could not remove cgroup %s", d)


def describe(error: Exception) -> str:
    """The one start-up message shown when slots run without cgroups."""
    return (f"sandbox: per-slot cgroups unavailable ({error}); executions keep their rlimits (address space, "
            "CPU time, processes) but shm/memfd memory and CPU share between slots are NOT limited")
