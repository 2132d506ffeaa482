"""Per-slot cgroups: the limits written, processes joining their slot, and the fallback without them."""
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from wmrl.config import SandboxConfig
from wmrl.domains.research.outcome import Status
from wmrl.domains.research.sandbox import ExecRequest, IsolationUnavailable, cgroups
from wmrl.domains.research.sandbox.cgroups import CgroupsUnavailable, SlotCgroups, SlotLimits
from wmrl.domains.research.sandbox.local import LocalSandbox

sys.path.insert(0, str(Path(__file__).parent))
from sandbox_fakes import IrisTask  # noqa: E402

LIMITS = SlotLimits(memory_bytes=300 << 20, cpus=0.5, pids=40, cpu=None)
V1 = (cgroups.ROOT / "memory" / "memory.limit_in_bytes").exists()


@pytest.mark.skipif(not V1, reason="needs cgroup v1 (this machine's kind)")
def test_v1_slot_cgroups_hold_their_limits_and_their_processes(tmp_path):
    cg = SlotCgroups("wmrl-test-cgroups", 2, LIMITS)
    try:
        mem, cpu, pids = (next(d for d in cg.slots[1] if f"/{c}/" in str(d)) for c in ("memory", "cpu", "pids"))
        assert int((mem / "memory.limit_in_bytes").read_text()) == 300 << 20
        assert int((cpu / "cpu.cfs_quota_us").read_text()) == 50_000
        assert (pids / "pids.max").read_text().strip() == "40"
        out = subprocess.run(cg.wrap(1, ["cat", "/proc/self/cgroup"]), capture_output=True, text=True, check=True)
        joined = {line.split(":")[1]: line.split(":")[2] for line in out.stdout.splitlines()}
        assert joined["memory"].endswith("wmrl-test-cgroups/slot1") and joined["pids"].endswith("wmrl-test-cgroups/slot1")
    finally:
        cg.remove()
    assert not any(d.exists() for dirs in cg.slots for d in dirs) and not mem.exists()


def test_v2_limits_are_written_to_the_unified_hierarchy(tmp_path):
    """cgroup v2 cannot be mounted here: its files are checked in a directory laid out like one."""
    own = tmp_path / "user.slice" / "me"
    own.mkdir(parents=True)
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    base = own / "wmrl-x"
    base.mkdir()
    (base / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (base / "cgroup.subtree_control").write_text("")
    for k in range(2):  # the kernel creates a child's interface files; a plain directory does not
        d = base / f"slot{k}"
        d.mkdir()
        for f in ("memory.max", "memory.swap.max", "cpu.max", "pids.max", "cpuset.cpus"):
            (d / f).write_text("")
    cg = SlotCgroups("wmrl-x", 2, [LIMITS, SlotLimits(400 << 20, 1.0, 50, cpu=1)], root=tmp_path,
                     proc_cgroup="0::/user.slice/me\n")
    assert cg.version == 2
    assert set((base / "cgroup.subtree_control").read_text().split()) == {"+cpu", "+cpuset", "+memory", "+pids"}
    assert (base / "slot0" / "memory.max").read_text() == str(300 << 20)
    assert (base / "slot0" / "memory.swap.max").read_text() == "0"
    assert (base / "slot0" / "cpu.max").read_text() == "50000 100000"
    assert (base / "slot1" / "cpu.max").read_text() == "100000 100000"
    assert (base / "slot1" / "pids.max").read_text() == "50" and (base / "slot1" / "cpuset.cpus").read_text() == "1"
    assert cg.procs_files(1) == [str(base / "slot1" / "cgroup.procs")]


def test_v2_without_delegated_controllers_is_unavailable(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    (tmp_path / "me" / "wmrl-y").mkdir(parents=True)
    (tmp_path / "me" / "wmrl-y" / "cgroup.controllers").write_text("cpu\n")
    with pytest.raises(CgroupsUnavailable, match="memory, pids"):
        SlotCgroups("wmrl-y", 1, LIMITS, root=tmp_path, proc_cgroup="0::/me\n")


def test_without_cgroups_the_sandbox_says_so_once_and_keeps_its_rlimits(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(cgroups, "ROOT", tmp_path)  # a machine with no cgroup filesystem
    with caplog.at_level(logging.WARNING), LocalSandbox(SandboxConfig(slots=2, memory_mb=512)) as sb:
        assert sb.cgroups is None
        outs = sb.run([ExecRequest(IrisTask(), "def build():\n    x = bytearray(1 << 30)\n")] * 2)
        assert [o.status for o in outs] == [Status.RUNTIME_ERROR] * 2 and "MemoryError" in outs[0].stderr_tail
    assert sum("cgroups unavailable" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(IsolationUnavailable, match="cgroups=require"):
        LocalSandbox(SandboxConfig(slots=1, cgroups="require"))
