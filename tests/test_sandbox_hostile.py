"""Hostile programs against the local sandbox.

Each test asserts the status and reward, that the execution ended within its limit (+2 s),
that the host is unaffected, that no process of the execution is left, and that the next
program in the same sandbox still runs. CI runs this file twice: wmrl installed system-wide,
and installed in a fresh virtualenv. Attacks on the sandbox itself run against both interfaces
(`task` is an estimator task, then a script task whose program is the same code followed by a
harness that calls build()); attacks on the predictions protocol use `estimator_task`.
"""
import math
import os
import platform
import socket
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from wmrl.config import SandboxConfig
from wmrl.domains.research.outcome import Status
from wmrl.domains.research.sandbox.base import ExecRequest
from wmrl.domains.research.sandbox.local import LocalSandbox

sys.path.insert(0, str(Path(__file__).parent))
from sandbox_fakes import IRIS_SCRIPT_MAIN, IrisTask, SyntheticTask, iris_script_task  # noqa: E402

LIMIT_S = 3.0
SLOTS = 2
REPO = Path(__file__).resolve().parents[1]
GOOD = """
from sklearn.linear_model import LogisticRegression
def build():
    return LogisticRegression(max_iter=500)
"""


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """Host-side things a program must neither read nor change."""
    d = tmp_path_factory.mktemp("host")
    marker = d / "marker.txt"
    marker.write_text("intact")
    secret = d / "cache" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("s3cr3t")
    return {"dir": d, "marker": marker, "secret": secret, "created": d / "created-by-program"}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    sb = LocalSandbox(SandboxConfig(slots=SLOTS, memory_mb=1024), log_path=tmp_path_factory.mktemp("run") / "log.db")
    sb.run([ExecRequest(IrisTask(), GOOD) for _ in range(SLOTS)])  # warm every worker: start-up is not timed
    yield sb
    sb.close()


@pytest.fixture(scope="module")
def estimator_task():
    return IrisTask(time_limit_s=LIMIT_S)


@pytest.fixture(scope="module", params=["estimator", "script"])
def task(request, estimator_task, tmp_path_factory):
    if request.param == "estimator":
        return estimator_task
    script = iris_script_task(tmp_path_factory.mktemp("script"), time_limit_s=LIMIT_S)
    script.leaderboard()  # fitted once on the host, not timed
    return script


def sandbox_processes(uids, extra_marker: str | None = None) -> list[str]:
    """Host view: processes running as a sandbox uid, or whose cmdline holds the marker."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{name}").st_uid
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if uid in uids or (extra_marker and extra_marker in cmd and str(os.getpid()) != name):
            found.append(f"{name} uid={uid} {cmd[:80]}")
    return found


def run_hostile(sandbox, task, host, source, status, reward=None, marker=None):
    limit_s = task.time_limit_s
    t0 = time.monotonic()
    source = textwrap.dedent(source) + (IRIS_SCRIPT_MAIN if task.interface == "script" else "")
    [out] = sandbox.run([ExecRequest(task, source, meta={"test": "hostile"})])
    elapsed = time.monotonic() - t0
    allowed = {Status(s) for s in (status if isinstance(status, tuple) else (status,))}
    assert out.status in allowed, (out.status, out.stderr_tail[-800:])
    if reward is not None:
        assert out.reward == pytest.approx(reward)
    assert elapsed <= limit_s + 2.0, elapsed
    assert host["marker"].read_text() == "intact"
    assert not host["created"].exists()
    deadline = time.monotonic() + 1.0
    while sandbox_processes(sandbox.uids, marker) and time.monotonic() < deadline:
        time.sleep(0.05)  # the kernel may still be tearing a killed process down
    assert sandbox_processes(sandbox.uids, marker) == []
    [after] = sandbox.run([ExecRequest(IrisTask(time_limit_s=LIMIT_S), GOOD)])
    assert after.status is Status.VALID and after.reward > 0.9, after.stderr_tail[-800:]
    return out


def test_network_connect_to_host_is_refused(sandbox, task, host):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.1)
    port = listener.getsockname()[1]
    run_hostile(sandbox, task, host, f"""
        import socket
        def build():
            s = socket.create_connection(("127.0.0.1", {port}), timeout=1)
            s.sendall(b"leak")
            from sklearn.dummy import DummyClassifier
            return DummyClassifier()
    """, "runtime_error", 0.1)
    with pytest.raises(socket.timeout):
        listener.accept()
    listener.close()


def test_dns_and_outside_network_fail(sandbox, task, host):
    out = run_hostile(sandbox, task, host, """
        import socket
        def build():
            socket.getaddrinfo("pypi.org", 443)
    """, "runtime_error", 0.1)
    assert "gaierror" in out.stderr_tail or "Errno" in out.stderr_tail


def test_bundled_sklearn_datasets_are_hidden(sandbox, task, host):
    import sklearn

    csv = Path(sklearn.__file__).parent / "datasets" / "data" / "iris.csv"
    assert csv.exists()  # present on the host, absent in the sandbox
    out = run_hostile(sandbox, task, host, f"""
        def build():
            print(open({str(csv)!r}).read()[:100])
    """, "runtime_error", 0.1)
    assert "FileNotFoundError" in out.stderr_tail
    run_hostile(sandbox, task, host, """
        from sklearn.datasets import load_iris
        def build():
            load_iris()
    """, "runtime_error", 0.1)


def test_repo_run_dir_and_host_cache_are_invisible(sandbox, task, host):
    paths = [str(REPO / "wmrl" / "outcome.py"), str(host["secret"]), os.path.expanduser("~/.cache/wmrl"),
             os.path.expanduser("~/.ssh"), str(host["dir"])]
    out = run_hostile(sandbox, task, host, f"""
        import os
        def build():
            seen = [p for p in {paths!r} if os.path.exists(p)]
            raise RuntimeError("visible: " + repr(seen))
    """, "runtime_error", 0.1)
    assert "visible: []" in out.stderr_tail


def test_writing_outside_scratch_fails(sandbox, task, host):
    import sklearn

    targets = [str(host["created"]), str(Path(sklearn.__file__).parent / "evil.py"), "/usr/evil", "/etc/evil",
               "/evil", "/dev/shm/evil", "/tmp/evil"]
    out = run_hostile(sandbox, task, host, f"""
        import os
        def build():
            open("scratch-is-writable.txt", "w").write("ok")
            wrote = []
            for p in {targets!r}:
                try:
                    open(p, "w").write("x")
                    wrote.append(p)
                except OSError:
                    pass
            raise RuntimeError("wrote: " + repr(wrote))
    """, "runtime_error", 0.1)
    assert "wrote: []" in out.stderr_tail
    assert not (Path(sklearn.__file__).parent / "evil.py").exists()


def test_fork_bomb_is_contained(sandbox, task, host):
    run_hostile(sandbox, task, host, """
        import os
        def build():
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
    """, "timeout", 0.1)


def test_memory_bomb_is_a_runtime_error(sandbox, task, host):
    out = run_hostile(sandbox, task, host, """
        def build():
            hog = []
            while True:
                hog.append(bytearray(256 << 20))
    """, "runtime_error", 0.1)
    assert "MemoryError" in out.stderr_tail


def test_cpu_spin_in_fit_times_out(sandbox, task, host):
    run_hostile(sandbox, task, host, """
        class Spin:
            def fit(self, X, y):
                while True:
                    pass
            def predict(self, X):
                return X[:, 0]
        def build():
            return Spin()
    """, "timeout", 0.1)


def test_sleep_forever_in_build_times_out(sandbox, task, host):
    run_hostile(sandbox, task, host, """
        import time
        def build():
            time.sleep(10**6)
    """, "timeout", 0.1)


def test_sleep_forever_in_predict_times_out(sandbox, estimator_task, host):
    out = run_hostile(sandbox, estimator_task, host, """
        import time
        from sklearn.dummy import DummyClassifier
        class Slow(DummyClassifier):
            def predict(self, X):
                time.sleep(10**6)
        def build():
            return Slow()
    """, "timeout", 0.1)
    assert out.predict_s is None and 0 <= out.fit_s <= out.wall_s  # the worker saw fit end, predict never did


def test_stdout_flood_is_capped_and_program_still_scored(sandbox, task, host):
    out = run_hostile(sandbox, task, host, """
        import sys
        from sklearn.linear_model import LogisticRegression
        def build():
            line = "x" * 1023 + "\\n"
            for _ in range(100 * 1024):  # 100 MiB
                sys.stdout.write(line)
            sys.stderr.write("e" * (10 << 20))
            sys.stderr.write("\\nlast words\\n")
            return LogisticRegression(max_iter=500)
    """, "valid")
    assert out.stderr_tail.endswith("last words\n") and len(out.stderr_tail) <= 64 * 1024


def test_infinite_recursion_is_a_runtime_error(sandbox, task, host):
    run_hostile(sandbox, task, host, """
        def f(n):
            return f(n + 1) + 1
        def build():
            return f(0)
    """, "runtime_error", 0.1)
    run_hostile(sandbox, task, host, """
        import sys
        sys.setrecursionlimit(10**8)  # Python frames then grow the heap until RLIMIT_AS or the clock stops them
        def f(n):
            return f(n + 1) + 1
        def build():
            return f(0)
    """, ("runtime_error", "timeout"), 0.1)


def test_segfault_is_a_runtime_error(sandbox, task, host):
    out = run_hostile(sandbox, task, host, """
        import ctypes
        def build():
            ctypes.string_at(0)
    """, "runtime_error", 0.1)
    assert "SIGSEGV" in out.stderr_tail


@pytest.mark.parametrize("call", ["sys.exit(0)", "os._exit(0)", "raise SystemExit(3)"])
def test_exit_in_build_is_a_runtime_error(sandbox, estimator_task, host, call):
    run_hostile(sandbox, estimator_task, host, f"""
        import os, sys
        def build():
            {call}
    """, "runtime_error", 0.1)


def test_killing_the_parent_cannot_hurt_the_worker(sandbox, task, host):
    pids = sandbox.worker_pids()
    out = run_hostile(sandbox, task, host, """
        import os, signal
        from sklearn.linear_model import LogisticRegression
        def build():
            for pid in (os.getppid(), 1):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            return LogisticRegression(max_iter=500)
    """, "valid")
    assert out.attempts == 1 and sandbox.worker_pids() == pids


def test_kill_minus_one_only_kills_the_program(sandbox, task, host):
    pids = sandbox.worker_pids()
    out = run_hostile(sandbox, task, host, """
        import os
        def build():
            os.system("kill -9 -1")  # the shell kills every process of the uid but itself: the program too
    """, "runtime_error", 0.1)
    assert out.attempts == 1 and sandbox.worker_pids() == pids
    assert "SIGKILL" in out.stderr_tail


def test_object_predictions_are_rejected(sandbox, estimator_task, host):
    run_hostile(sandbox, estimator_task, host, """
        import numpy as np
        from sklearn.dummy import DummyClassifier
        class Obj(DummyClassifier):
            def predict(self, X):
                return np.array([object()] * len(X), dtype=object)
        def build():
            return Obj()
    """, "no_valid_output", 0.2)


def test_crafted_pickle_in_prediction_bytes_never_runs_on_host(sandbox, estimator_task, host):
    evil = host["created"]
    run_hostile(sandbox, estimator_task, host, f"""
        import io, os, pickle
        import numpy as np
        from sklearn.dummy import DummyClassifier

        class Payload:
            def __reduce__(self):
                return (os.system, ("touch {evil}",))

        def forged_write_array(fp, array, version=None, allow_pickle=True, pickle_kwargs=None):
            header = {{"descr": "|O", "fortran_order": False, "shape": (50,)}}
            np.lib.format.write_array_header_1_0(fp, header)
            pickle.dump(Payload(), fp)

        def build():
            np.lib.format.write_array = forged_write_array
            return DummyClassifier()
    """, "no_valid_output", 0.2)


def test_non_estimator_is_no_valid_output(sandbox, estimator_task, host):
    run_hostile(sandbox, estimator_task, host, """
        def build():
            return "a string"
    """, "no_valid_output", 0.2)


@pytest.mark.parametrize("bad", ["X[:10, 0]", "np.full(len(X), np.nan)", "np.array(['a'] * len(X))"])
def test_wrong_shape_nan_or_text_predictions_are_no_valid_output(sandbox, estimator_task, host, bad):
    run_hostile(sandbox, estimator_task, host, f"""
        import numpy as np
        from sklearn.dummy import DummyClassifier
        class Bad(DummyClassifier):
            def predict(self, X):
                return {bad}
        def build():
            return Bad()
    """, "no_valid_output", 0.2)


def test_leaked_background_processes_are_killed(sandbox, task, host):
    marker = f"98{uuid.uuid4().int % 10**7}"
    run_hostile(sandbox, task, host, f"""
        import os, subprocess, time
        from sklearn.linear_model import LogisticRegression
        def build():
            subprocess.Popen(["sleep", "{marker}"], start_new_session=True)
            if os.fork() == 0:          # double fork + setsid: a daemon
                os.setsid()
                if os.fork() == 0:
                    os.execvp("sleep", ["sleep", "{marker}1"])
                os._exit(0)
            time.sleep(0.2)
            return LogisticRegression(max_iter=500)
    """, "valid", marker=marker)


def test_spinning_threads_are_stopped(sandbox, task, host):
    """Several spinning threads burn CPU time faster than the wall clock: RLIMIT_CPU or the clock stops them."""
    run_hostile(sandbox, task, host, """
        import threading
        def spin():
            while True:
                pass
        def build():
            for _ in range(3):
                threading.Thread(target=spin, daemon=True).start()
            spin()
    """, ("timeout", "runtime_error"), 0.1)


# ---------------------------------------------------------------- issue 9: holes found by attacking c874323
@pytest.fixture(scope="module")
def solo(tmp_path_factory):
    """One slot, so consecutive programs meet the same warm worker."""
    sb = LocalSandbox(SandboxConfig(slots=1, memory_mb=1024), log_path=tmp_path_factory.mktemp("solo") / "log.db")
    sb.run([ExecRequest(IrisTask(), GOOD)])
    yield sb
    sb.close()


def test_worker_runs_the_hosts_environment_venv_included(sandbox, task, host):
    import sklearn

    out = run_hostile(sandbox, task, host, """
        import sys, sklearn
        def build():
            raise RuntimeError("env=" + repr((sys.prefix, sklearn.__file__)))
    """, "runtime_error", 0.1)
    assert "env=" + repr((sys.prefix, sklearn.__file__)) in out.stderr_tail  # not the base interpreter's copy


def test_no_copy_of_the_public_datasets_is_readable(sandbox, host):
    """Every Python installation the program can reach, searched for the data behind built-in tasks
    (scikit-learn's bundled files, and fixtures such as scipy's iris.txt / iris.arff)."""
    out = run_hostile(sandbox, IrisTask(time_limit_s=30.0), host, r"""
        import glob, os, re, sys
        NAME = re.compile(r"(iris|wine|breast_cancer|wdbc|digits|diabetes)[^/]*\.(csv|txt|arff|data|rst|gz)$", re.I)
        def build():
            roots = {p for p in sys.path if os.path.isdir(p)} | {sys.prefix, sys.base_prefix}
            roots |= set(glob.glob("/usr/lib/python3*")) | set(glob.glob("/usr/local/lib/python3*"))
            readable = []
            for root in roots:
                for d, _, names in os.walk(root):
                    for n in names:
                        if NAME.search(n):
                            try:
                                with open(os.path.join(d, n), "rb") as f:
                                    if f.read(64):
                                        readable.append(os.path.join(d, n))
                            except OSError:
                                pass
            raise RuntimeError("readable: " + repr(sorted(set(readable))[:5]))
    """, "runtime_error", 0.1)
    assert "readable: []" in out.stderr_tail


FORGE_FRAME = """
import json, os, stat, struct, fcntl
def forge(header, blob=b""):
    h = json.dumps(dict(header, blobs=[len(blob)] if blob else [])).encode()
    frame = struct.pack(">I", len(h)) + h + blob
    for fd in range(3, 256):  # every pipe we may write to: the result pipe is among them
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_WRONLY:
                os.write(fd, frame)
        except OSError:
            pass
    os._exit(0)
"""


def test_a_program_cannot_forge_infra_error(sandbox, task, host):
    """A forged infra_error would veto the program's own bad result and restart the worker."""
    pids = sandbox.worker_pids()
    out = run_hostile(sandbox, task, host, FORGE_FRAME + """
def build():
    forge({"status": "infra_error", "detail": "forged", "fit_s": -1e300, "predict_s": float("nan")})
""", "runtime_error", 0.1)
    assert out.attempts == 1 and sandbox.worker_pids() == pids


def test_timings_are_measured_by_the_worker(sandbox, estimator_task, host):
    out = run_hostile(sandbox, estimator_task, host, """
        import time
        from sklearn.linear_model import LogisticRegression
        class Liar(LogisticRegression):
            def fit(self, X, y):
                super().fit(X, y)
                time.perf_counter = lambda: -1e300
                return self
            def predict(self, X):
                time.perf_counter = lambda: float("nan")
                return super().predict(X)
        def build():
            return Liar(max_iter=500)
    """, "valid")
    for t in (out.fit_s, out.predict_s):
        assert t is not None and math.isfinite(t) and 0.0 <= t <= out.wall_s, (out.fit_s, out.predict_s, out.wall_s)


def test_a_forged_valid_frame_carries_no_timings(sandbox, task, host):
    out = run_hostile(sandbox, task, host, FORGE_FRAME + """
import io, numpy as np
def build():
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.zeros(50, dtype=np.int64), allow_pickle=False)
    forge({"status": "valid", "detail": "", "fit_s": -1e300, "predict_s": float("nan")}, buf.getvalue())
""", ("valid", "runtime_error") if task.interface == "estimator" else ("runtime_error", "no_valid_output"))
    assert out.fit_s is None or (math.isfinite(out.fit_s) and 0 <= out.fit_s <= out.wall_s)
    assert out.predict_s is None or (math.isfinite(out.predict_s) and 0 <= out.predict_s <= out.wall_s)


@pytest.mark.parametrize("bad", ["pred + 0j", "np.array([str(v) for v in pred])", "pred.astype(np.complex64)"])
def test_complex_and_numeric_text_predictions_are_rejected(sandbox, estimator_task, host, bad):
    """Right labels in the wrong type: a submission must be real numbers, as the task asks."""
    run_hostile(sandbox, estimator_task, host, f"""
        import numpy as np
        from sklearn.linear_model import LogisticRegression
        class Odd(LogisticRegression):
            def predict(self, X):
                pred = super().predict(X)
                return {bad}
        def build():
            return Odd(max_iter=500)
    """, "no_valid_output", 0.2)


def test_sysv_shared_memory_does_not_survive_an_execution(solo, task, host):
    writer = """
        import ctypes
        def build():
            libc = ctypes.CDLL(None, use_errno=True)
            libc.shmat.restype = ctypes.c_void_p
            shmid = libc.shmget(0x5EED, 1 << 20, 0o1666)  # IPC_CREAT | 0666, never removed
            addr = libc.shmat(shmid, None, 0)
            ctypes.memmove(addr, b"left-behind", 11)
            raise RuntimeError(f"created {shmid}")
    """
    out = run_hostile(solo, task, host, writer, "runtime_error", 0.1)
    assert "created -1" not in out.stderr_tail  # the writer itself did work
    out = run_hostile(solo, task, host, """
        import ctypes
        def build():
            libc = ctypes.CDLL(None, use_errno=True)
            found = libc.shmget(0x5EED, 0, 0)
            raise RuntimeError(f"found {found} errno {ctypes.get_errno()}")
    """, "runtime_error", 0.1)
    assert "found -1 errno 2" in out.stderr_tail  # ENOENT: a fresh IPC namespace per execution


KEY_SYSCALLS = {"x86_64": (248, 250), "aarch64": (217, 219)}  # add_key, keyctl


@pytest.mark.skipif(platform.machine() not in KEY_SYSCALLS, reason="syscall numbers known for x86_64/aarch64")
def test_kernel_keyrings_are_unreachable(task, host):
    """Keyrings belong to the slot uid, not the execution: they outlived workers and sandboxes."""
    add_key, keyctl = KEY_SYSCALLS[platform.machine()]
    with LocalSandbox(SandboxConfig(slots=1)) as first:
        out = run_hostile(first, task, host, f"""
            import ctypes
            def build():
                libc = ctypes.CDLL(None, use_errno=True)
                serial = libc.syscall({add_key}, b"user", b"wmrl-note", b"from-an-earlier-sandbox", 23, -4)
                raise RuntimeError(f"add_key {{serial}} errno {{ctypes.get_errno()}}")
        """, "runtime_error", 0.1)
        assert "add_key -1 errno 1" in out.stderr_tail  # EPERM from the seccomp filter
    with LocalSandbox(SandboxConfig(slots=1)) as later:
        out = run_hostile(later, task, host, f"""
            import ctypes
            def build():
                libc = ctypes.CDLL(None, use_errno=True)
                found = libc.syscall({keyctl}, 10, -4, b"user", b"wmrl-note", 0)  # KEYCTL_SEARCH the user keyring
                raise RuntimeError(f"search {{found}} errno {{ctypes.get_errno()}}")
        """, "runtime_error", 0.1)
        assert "search -1 errno 1" in out.stderr_tail


def test_a_program_inherits_no_other_task_data_nor_earlier_source(solo, host):
    """Forked from a state that never held another split's arrays or an earlier program's source."""
    fill = 1234.5678125  # exact in binary: its 8 bytes, repeated in X_train's first column
    other = SyntheticTask("other-task", n=400, d=6, seed=7, time_limit_s=LIMIT_S, fill=fill)
    marker = f"EARLIER-SOURCE-{uuid.uuid4().hex}"
    run_hostile(solo, other, host, f"""
        SECRET = {marker!r}
        from sklearn.dummy import DummyClassifier
        def build():
            return DummyClassifier()
    """, "valid")
    out = run_hostile(solo, IrisTask(time_limit_s=20.0), host, f"""
        import ctypes, struct
        # the needles are never whole in this program's memory: halves, compared piece by piece
        VALUE = struct.pack("<d", {fill!r})
        HEAD, TAIL = {marker[::-1]!r}[::-1][:12].encode(), {marker[::-1]!r}[::-1][12:].encode()
        def holds(data, head, rest):
            i = data.find(head)
            while i >= 0:
                if all(rest(data, i)):
                    return True
                i = data.find(head, i + 1)
            return False
        def build():
            hits = set()
            for line in open("/proc/self/maps"):
                fields = line.split()
                if "r" not in fields[1] or (len(fields) > 5 and not fields[5].startswith("[heap]")
                                            and not fields[5].startswith("[stack")):
                    continue  # anonymous memory, heap and stack: where arrays and strings live
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                data = ctypes.string_at(lo, hi - lo)
                if holds(data, VALUE, lambda d, i: (d[i + 8 * k:i + 8 * k + 8] == VALUE for k in range(1, 8))):
                    hits.add("array")
                if holds(data, HEAD, lambda d, i: (d[i + 12:i + 12 + len(TAIL)] == TAIL,)):
                    hits.add("source")
            raise RuntimeError("found: " + repr(sorted(hits)))
    """, "runtime_error", 0.1)
    assert "found: []" in out.stderr_tail


def test_memfd_memory_counts_against_the_memory_limit(solo, task, host):
    """Pages of memfd files escape RLIMIT_AS; the slot's cgroup counts them (limit 1024 MiB here)."""
    if solo.cgroups is None:
        pytest.skip("no per-slot cgroups on this machine (the sandbox said so at start-up)")
    out = run_hostile(solo, IrisTask(time_limit_s=20.0), host, """
        import os
        from sklearn.linear_model import LogisticRegression
        def build():
            chunk = b"x" * (1 << 20)
            held = []
            for i in range(48):  # 48 files of 60 MiB: 2.8 GiB, each under the 64 MiB file-size limit
                fd = os.memfd_create(f"hog{i}")
                for _ in range(60):
                    os.write(fd, chunk)
                held.append(fd)
            return LogisticRegression(max_iter=500)
    """, "runtime_error", 0.1)
    assert "memory limit" in out.stderr_tail


@pytest.mark.parametrize("call", [
    "libc.unshare(0x10000000)",  # CLONE_NEWUSER: a user namespace would undo the uid drop
    "libc.unshare(0x08000000)",  # CLONE_NEWIPC
    "libc.ptrace(0, 0, None, None)",  # PTRACE_TRACEME
    "libc.syscall(321, 0, None, 0)",  # bpf (x86_64)
    "libc.syscall(298, None, 0, -1, -1, 0)",  # perf_event_open (x86_64)
    "libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)",
])
def test_seccomp_denies_calls_a_fit_never_needs(sandbox, task, host, call):
    if "syscall(" in call and platform.machine() != "x86_64":
        pytest.skip("x86_64 syscall number")
    out = run_hostile(sandbox, task, host, f"""
        import ctypes
        def build():
            libc = ctypes.CDLL(None, use_errno=True)
            r = {call}
            raise RuntimeError(f"ret {{r}} errno {{ctypes.get_errno()}}")
    """, "runtime_error", 0.1)
    assert "ret -1 errno 1" in out.stderr_tail  # EPERM, whatever the kernel would have said


SPIN_32 = """
import os
def build():
    for _ in range(31):
        try:
            if os.fork() == 0:
                break
        except OSError:
            break
    try:
        os.setsid()  # a session each: with autogroups, each is weighed like a whole process group
    except OSError:
        pass  # the first process leads its session already
    while True:
        pass
"""
SPIN_1 = "def build():\n    while True:\n        pass\n"


def test_a_hostile_neighbour_cannot_starve_a_slot(sandbox, host):
    """Two slots, one spinning 32 processes: the other slot's forest fits within 1.5x of its time next to
    a neighbour that keeps one core busy with one process (what any busy slot costs the machine; on an
    idle machine that equals its solo time)."""
    task = SyntheticTask("forest", n=3000, d=20, time_limit_s=30.0)
    forest = "from sklearn.ensemble import RandomForestClassifier\ndef build():\n" \
             "    return RandomForestClassifier(n_estimators=40, random_state=0)\n"
    spinner = SyntheticTask("spinner", n=200, d=4, time_limit_s=6.0)

    def fit_next_to(neighbour):
        hog = sandbox.submit([ExecRequest(spinner, neighbour)])
        time.sleep(1.5)  # the neighbour is spinning
        [out] = sandbox.run([ExecRequest(task, forest)])
        assert hog.result(timeout=60)[0].status is Status.TIMEOUT
        assert out.status is Status.VALID
        return out.fit_s

    benign, hostile = [], []
    for _ in range(3):  # interleaved: other load on the machine drifts
        benign.append(fit_next_to(SPIN_1))
        hostile.append(fit_next_to(SPIN_32))
    assert min(hostile) <= 1.5 * max(benign), (hostile, benign)


def test_unshare_isolation_runs_the_hosts_environment_and_hides_the_host(task, host):
    """The fallback isolation reuses the host tree: the environment (e.g. a venv in a 0700 home) must
    stay reachable for the slot uid while the repo, host cache and dataset copies stay hidden."""
    import sklearn

    iris_csv = str(Path(sklearn.__file__).parent / "datasets" / "data" / "iris.csv")
    with LocalSandbox(SandboxConfig(slots=1, isolation="unshare")) as sb:
        out = run_hostile(sb, task, host, f"""
            import os, sys, sklearn
            def build():
                seen = [p for p in {[str(REPO / "wmrl"), str(host["secret"]), iris_csv]!r}
                        if os.path.exists(p) and os.path.getsize(p) > 0]
                raise RuntimeError("env=" + repr((sys.prefix, sklearn.__file__)) + " seen=" + repr(seen))
        """, "runtime_error", 0.1)
    assert "env=" + repr((sys.prefix, sklearn.__file__)) in out.stderr_tail and "seen=[]" in out.stderr_tail
