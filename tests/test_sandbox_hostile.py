"""Hostile programs against the local sandbox.

Each test asserts the status and reward, that the execution ended within its limit (+2 s),
that the host is unaffected, that no process of the execution is left, and that the next
program in the same sandbox still runs.
"""
import os
import socket
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from wmrl.config import SandboxConfig
from wmrl.outcome import Status
from wmrl.sandbox.base import ExecRequest
from wmrl.sandbox.local import LocalSandbox

sys.path.insert(0, str(Path(__file__).parent))
from sandbox_fakes import IrisTask  # noqa: E402

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
def task():
    return IrisTask(time_limit_s=LIMIT_S)


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
    t0 = time.monotonic()
    [out] = sandbox.run([ExecRequest(task, textwrap.dedent(source), meta={"test": "hostile"})])
    elapsed = time.monotonic() - t0
    allowed = {Status(s) for s in (status if isinstance(status, tuple) else (status,))}
    assert out.status in allowed, (out.status, out.stderr_tail[-800:])
    if reward is not None:
        assert out.reward == pytest.approx(reward)
    assert elapsed <= LIMIT_S + 2.0, elapsed
    assert host["marker"].read_text() == "intact"
    assert not host["created"].exists()
    deadline = time.monotonic() + 1.0
    while sandbox_processes(sandbox.uids, marker) and time.monotonic() < deadline:
        time.sleep(0.05)  # the kernel may still be tearing a killed process down
    assert sandbox_processes(sandbox.uids, marker) == []
    [after] = sandbox.run([ExecRequest(task, GOOD)])
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


def test_sleep_forever_in_predict_times_out(sandbox, task, host):
    out = run_hostile(sandbox, task, host, """
        import time
        from sklearn.dummy import DummyClassifier
        class Slow(DummyClassifier):
            def predict(self, X):
                time.sleep(10**6)
        def build():
            return Slow()
    """, "timeout", 0.1)
    assert out.fit_s is None  # the result never came back


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
def test_exit_in_build_is_a_runtime_error(sandbox, task, host, call):
    run_hostile(sandbox, task, host, f"""
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


def test_object_predictions_are_rejected(sandbox, task, host):
    run_hostile(sandbox, task, host, """
        import numpy as np
        from sklearn.dummy import DummyClassifier
        class Obj(DummyClassifier):
            def predict(self, X):
                return np.array([object()] * len(X), dtype=object)
        def build():
            return Obj()
    """, "no_valid_output", 0.2)


def test_crafted_pickle_in_prediction_bytes_never_runs_on_host(sandbox, task, host):
    evil = host["created"]
    run_hostile(sandbox, task, host, f"""
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


def test_non_estimator_is_no_valid_output(sandbox, task, host):
    run_hostile(sandbox, task, host, """
        def build():
            return "a string"
    """, "no_valid_output", 0.2)


@pytest.mark.parametrize("bad", ["X[:10, 0]", "np.full(len(X), np.nan)", "np.array(['a'] * len(X))"])
def test_wrong_shape_nan_or_text_predictions_are_no_valid_output(sandbox, task, host, bad):
    run_hostile(sandbox, task, host, f"""
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
