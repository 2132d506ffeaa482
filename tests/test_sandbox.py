"""The sandbox as the trainer uses it: pre-check, ordered outcomes, worker recovery, the log, the CLI."""
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from wmrl.config import SandboxConfig
from wmrl.domains.research.outcome import Status
from wmrl.domains.research.sandbox import ExecRequest, IsolationUnavailable, Sandbox, extract_program, make_sandbox, precheck, read_log
from wmrl.domains.research.sandbox import isolation
from wmrl.domains.research.sandbox.base import SandboxClosed
from wmrl.domains.research.sandbox.local import LocalSandbox

sys.path.insert(0, str(Path(__file__).parent))
from sandbox_fakes import IrisTask  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GOOD = "from sklearn.linear_model import LogisticRegression\ndef build():\n    return LogisticRegression(max_iter=500)\n"
SLEEP = "import time\nfrom sklearn.dummy import DummyClassifier\ndef build():\n    time.sleep({s})\n    return DummyClassifier()\n"


@pytest.fixture(scope="module")
def task():
    return IrisTask(time_limit_s=3.0)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    log = tmp_path_factory.mktemp("run") / "executions.db"
    with make_sandbox(SandboxConfig(slots=2), log_path=str(log)) as sb:
        sb.log_path = log
        yield sb


def test_extract_program_prefers_the_python_block():
    text = "I will use a forest.\n```python\ndef build():\n    return 1\n```\nDone."
    assert extract_program(text) == "def build():\n    return 1\n"
    assert extract_program("def build(): pass") == "def build(): pass"
    assert extract_program("```python\ndef build():\n    return 1") == "def build():\n    return 1\n"  # cut off


def test_extract_program_reads_what_instruct_models_write():
    program = "from sklearn.svm import SVC\n\n\ndef build():\n    return SVC(C=1.0)\n"
    # prose around a fenced block, and a first block that is not the program
    text = f"Here is my plan.\n```bash\npip install scikit-learn\n```\nNow:\n```python\nimport numpy as np\n```\n" \
           f"```python\n{program}```\nThis should work well."
    assert extract_program(text) == program
    assert extract_program(f"```\n{program}```") == program  # an unlabeled fence
    # no fence: prose lines before and after the code are dropped, code lines (even capitalised calls) kept
    text = f"Sure! Here is a program that uses an SVM:\n\n{program}\nThe scaler is left out on purpose.\n" \
           "- it is fast\n"
    assert extract_program(text) == program
    code = "N = 100\nX = None\n\n\ndef build():\n    return RandomForestClassifier(n_estimators=N)\n"
    assert extract_program(code) == code  # code without prose is left exactly as written
    assert precheck(extract_program(f"I chose a forest.\n{code}"))[0] is None


@pytest.mark.parametrize("source,status", [
    ("", Status.MALFORMED), ("Here is my plan: use a forest.", Status.MALFORMED),
    ("def build(:\n  pass", Status.SYNTAX_ERROR), ("class A:\n    def build(self): pass", Status.MALFORMED),
    (GOOD, None)])
def test_precheck(source, status):
    assert precheck(source)[0] is status


def test_valid_program_is_judged_and_timed(sandbox, task):
    [out] = sandbox.run([ExecRequest(task, GOOD)])
    assert out.status is Status.VALID and out.metric == "accuracy" and out.value > 0.9
    assert out.reward == pytest.approx(0.5 + 0.5 * out.pos)
    assert out.fit_s > 0 and out.predict_s > 0 and out.wall_s >= out.fit_s and out.attempts == 1


def test_outcomes_in_request_order_and_precheck_costs_no_slot(sandbox, task):
    assert isinstance(sandbox, Sandbox) and sandbox.slots == 2
    programs = [SLEEP.format(s=0.6), "not a program", GOOD, "def build(:", "def build():\n    raise ValueError('x')\n"]
    outs = sandbox.run([ExecRequest(task, p, meta={"i": i}) for i, p in enumerate(programs)])
    assert [o.status for o in outs] == [Status.VALID, Status.MALFORMED, Status.VALID, Status.SYNTAX_ERROR,
                                        Status.RUNTIME_ERROR]
    assert [o.reward for o in outs[1:]] == [0.0, outs[2].reward, 0.0, 0.1]
    assert outs[1].attempts == 0 and "ValueError: x" in outs[4].stderr_tail


def test_slots_run_in_parallel(sandbox, task):
    t0 = time.monotonic()
    outs = sandbox.run([ExecRequest(task, SLEEP.format(s=1.0)) for _ in range(2)])
    assert all(o.status is Status.VALID for o in outs)
    assert time.monotonic() - t0 < 1.8


def test_task_arrays_are_sent_once_per_worker(sandbox):
    fresh = IrisTask(name="iris-once")
    sandbox.run([ExecRequest(fresh, GOOD) for _ in range(6)])
    assert fresh.inputs_calls == 1  # serialized once on the host, cached in each worker


def test_every_execution_is_logged(sandbox, task):
    sandbox.run([ExecRequest(task, GOOD, meta={"step": 7, "group": 3})])
    rows = read_log(sandbox.log_path)
    last = rows[-1]
    assert last["task"] == "iris" and last["status"] == "valid" and last["program"] == GOOD
    assert last["meta"] == {"step": 7, "group": 3} and last["outcome"]["reward"] == pytest.approx(last["reward"])
    assert last["fingerprint"] == "iris-v1"


def test_worker_killed_from_outside_is_replaced(task):
    with LocalSandbox(SandboxConfig(slots=1)) as sb:
        [first] = sb.run([ExecRequest(task, GOOD)])
        os.kill(sb.worker_pids()[0], signal.SIGKILL)  # idle worker dies
        [out] = sb.run([ExecRequest(task, GOOD)])
        assert out.status is Status.VALID
        future = sb.submit([ExecRequest(task, SLEEP.format(s=1.0))])
        time.sleep(0.5)
        os.kill(sb.worker_pids()[0], signal.SIGKILL)  # busy worker dies: the execution is retried
        [out] = future.result(timeout=60)
        assert out.status is Status.VALID and out.attempts == 2
        assert sb.worker_pids()[0] is not None


def test_close_stops_running_and_queued_executions_at_once_and_logs_only_what_finished(tmp_path):
    """A stopped run must not wait for an evaluation's worth of executions (it waited for every queued one,
    one minute per slot at most, before the workers were stopped)."""
    slow = IrisTask(time_limit_s=30.0)
    sb = LocalSandbox(SandboxConfig(slots=2), log_path=tmp_path / "log.db")
    [done] = sb.run([ExecRequest(slow, GOOD)])
    running = sb.submit([ExecRequest(slow, SLEEP.format(s=25)) for _ in range(2)])
    queued = sb.submit([ExecRequest(slow, SLEEP.format(s=25)) for _ in range(6)])
    time.sleep(2.0)  # both slots are inside a 25 s execution
    t0 = time.monotonic()
    sb.close()
    assert time.monotonic() - t0 < 10
    for future in (running, queued):
        with pytest.raises(SandboxClosed, match="closed before iris"):
            future.result(timeout=1)
    assert [r["status"] for r in read_log(tmp_path / "log.db")] == [done.status.value]  # no killed one as a result
    assert sb.worker_pids() == [None, None]


def test_execution_lost_twice_is_infra_error(task, tmp_path):
    with LocalSandbox(SandboxConfig(slots=1, retries=1), log_path=tmp_path / "log.db") as sb:
        sb._before_attempt = lambda worker, attempt: worker.stop()  # the sandbox loses every attempt
        [out] = sb.run([ExecRequest(task, GOOD)])
        assert out.status is Status.INFRA_ERROR and math.isnan(out.reward) and out.attempts == 2
        sb._before_attempt = None
        [out] = sb.run([ExecRequest(task, GOOD)])
        assert out.status is Status.VALID
    rows = read_log(tmp_path / "log.db")
    assert rows[0]["status"] == "infra_error" and rows[0]["reward"] is None


def test_log_survives_sigkill_of_the_host(tmp_path):
    log = tmp_path / "log.db"
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(REPO / 'tests')!r})
        from sandbox_fakes import IrisTask
        from wmrl.config import SandboxConfig
        from wmrl.domains.research.sandbox import ExecRequest, make_sandbox
        sb = make_sandbox(SandboxConfig(slots=1), log_path={str(log)!r})
        task = IrisTask()
        for i in range(3):
            sb.run([ExecRequest(task, {GOOD!r}, meta={{"i": i}})])
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    r = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, timeout=120)
    assert r.returncode == -signal.SIGKILL, r.stderr.decode()[-2000:]
    rows = read_log(log)
    assert [row["meta"]["i"] for row in rows] == [0, 1, 2] and all(row["status"] == "valid" for row in rows)


def test_refuses_without_isolation_unless_none_is_explicit(monkeypatch, task):
    monkeypatch.setattr(isolation, "available", lambda mode: (mode == "none", "not permitted here"))
    with pytest.raises(IsolationUnavailable, match="sandbox.isolation=none"):
        LocalSandbox(SandboxConfig(isolation="auto"))
    with pytest.raises(IsolationUnavailable, match="bwrap: not permitted here"):
        LocalSandbox(SandboxConfig(isolation="bwrap"))


def test_isolation_none_still_runs_programs_when_asked(task):
    with LocalSandbox(SandboxConfig(slots=1, isolation="none")) as sb:
        assert sb.isolation == "none"
        [out] = sb.run([ExecRequest(task, GOOD)])
        assert out.status is Status.VALID


def test_cli_prints_one_judged_line_per_program(tmp_path):
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(GOOD.replace("LogisticRegression(max_iter=500)", "LogisticRegression(max_iter=2000)"))
    bad.write_text("def build():\n    raise RuntimeError('boom')\n")
    r = subprocess.run([sys.executable, "-m", "wmrl.domains.research.sandbox", "--task", "iris", str(good), str(bad),
                        "sandbox.slots=1"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [line["status"] for line in lines] == ["valid", "runtime_error"]
    assert {"status", "metric", "value", "pos", "reward", "wall_s", "stderr_tail"} <= set(lines[0])
    assert "boom" in lines[1]["stderr_tail"]


@pytest.mark.parametrize("args,message", [(["--task", "no_such_task", "{good}"], "unknown task"),
                                          (["--task", "iris", "missing.py"], "not found")])
def test_cli_usage_errors_exit_2(tmp_path, args, message):
    good = tmp_path / "good.py"
    good.write_text(GOOD)
    r = subprocess.run([sys.executable, "-m", "wmrl.domains.research.sandbox", *[a.format(good=good) for a in args]], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and message in r.stderr


def test_concurrent_sandboxes_get_disjoint_uids(sandbox, task):
    """A second sandbox's post-execution sweep must never reach the first one's programs."""
    with LocalSandbox(SandboxConfig(slots=2)) as other:
        assert not set(other.uids) & set(sandbox.uids)
        assert not set(other.cores) & set(sandbox.cores)  # nor pin its slots to the first one's cores
        future = sandbox.submit([ExecRequest(task, SLEEP.format(s=1.0))])
        assert other.run([ExecRequest(task, GOOD)])[0].status is Status.VALID
        assert future.result(timeout=60)[0].status is Status.VALID


def _no_nan(constant):
    raise ValueError(f"{constant} is not JSON")


def test_cli_prints_strict_json_whatever_the_program_reports(tmp_path):
    """A program that makes its clock return NaN once printed `NaN`, which JSON parsers reject."""
    liar = tmp_path / "liar.py"
    liar.write_text("import time\nfrom sklearn.linear_model import LogisticRegression\n"
                    "class Liar(LogisticRegression):\n"
                    "    def fit(self, X, y):\n        super().fit(X, y)\n"
                    "        time.perf_counter = lambda: float('nan')\n        return self\n"
                    "def build():\n    return Liar(max_iter=2000)\n")
    r = subprocess.run([sys.executable, "-m", "wmrl.domains.research.sandbox", "--task", "iris", str(liar), "sandbox.slots=1"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    [line] = [json.loads(line, parse_constant=_no_nan) for line in r.stdout.splitlines()]
    assert line["status"] == "valid" and math.isfinite(line["fit_s"]) and math.isfinite(line["predict_s"])


def test_an_environment_under_tmp_is_re_exposed_over_the_scratch_tmpfs(monkeypatch, tmp_path):
    """A venv under /tmp (CI's, or a user's) would be hidden by the sandbox's private /tmp: unshare mode
    must re-expose it, and bwrap must mount the scratch /tmp before binding the environment on top."""
    from wmrl.domains.research.sandbox import isolation

    venv = str(tmp_path / "venv")  # pytest's tmp_path lives under /tmp
    assert venv.startswith("/tmp/")
    monkeypatch.setattr(isolation, "python_roots", lambda: [venv, "/usr"])
    _, expose = isolation._unshare_cover("unshare")
    assert expose == [venv]
    argv = isolation.command("bwrap", {"uid": 60000}, probe=True)
    tmpfs = argv.index("/tmp", argv.index("--tmpfs"))
    assert tmpfs < argv.index(venv)  # bound after (on top of) the scratch tmpfs
