"""The Ray backend on a local Ray instance (2 CPUs): the same outcomes as the local backend, backpressure,
and no execution lost when an actor dies mid-run; every execution logged on the trainer's side."""
import math
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.timeout(300)  # CI installs it (the dev extra); skipped only where Ray is truly absent

from wmrl.config import RayConfig, SandboxConfig  # noqa: E402
from wmrl.domains.research.outcome import Status  # noqa: E402
from wmrl.domains.research.sandbox import ExecRequest, Sandbox, make_sandbox, read_log  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from sandbox_fakes import IrisTask, SyntheticTask  # noqa: E402

FOREST = ("from sklearn.ensemble import RandomForestClassifier\n"
          "def build():\n    return RandomForestClassifier(n_estimators=20, random_state={seed})\n")
SLEEP = "import time\nfrom sklearn.dummy import DummyClassifier\ndef build():\n    time.sleep({s})\n    return DummyClassifier()\n"
PROGRAMS = [FOREST.format(seed=0), FOREST.format(seed=1), "def build(:", "no program here",
            "def build():\n    raise ValueError('x')\n",
            "from sklearn.dummy import DummyClassifier\ndef build():\n    return DummyClassifier(strategy='uniform', random_state=3)\n",
            "import numpy as np\nclass M:\n    def fit(self, X, y):\n        return self\n"
            "    def predict(self, X):\n        return np.full(len(X), np.nan)\ndef build():\n    return M()\n"]


@pytest.fixture(scope="module")
def ray_instance():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def shared(ray_instance, tmp_path_factory):
    """One Ray sandbox (2 actors of 1 slot) for the tests that do not kill its actors."""
    log = tmp_path_factory.mktemp("ray") / "log.db"
    with make_sandbox(_cfg(), log_path=log) as sb:
        sb.log_path = log
        yield sb


def _cfg(**kw):
    return SandboxConfig(backend="ray", slots=2, ray=RayConfig(slots_per_actor=1, start_timeout_s=120), **kw)


def _key(o):
    return o.status, o.value, o.pos, None if math.isnan(o.reward) else o.reward, o.split


def test_results_equal_the_local_backend_on_the_same_seeded_programs(shared):
    iris, synth = IrisTask(), SyntheticTask("synth", n=600, d=8, seed=2)
    reqs = [ExecRequest(t, p, split="val", meta={"i": i}) for i, (t, p) in
            enumerate((t, p) for t in (iris, synth) for p in PROGRAMS)]
    with make_sandbox(SandboxConfig(slots=2)) as local:
        expected = local.run(reqs)
    calls = iris.inputs_calls
    sb = shared
    assert isinstance(sb, Sandbox) and sb.slots == 2 and len(sb.actors) == 2
    got = sb.run(reqs)
    assert [_key(o) for o in got] == [_key(o) for o in expected]
    assert {o.status for o in got} >= {Status.VALID, Status.SYNTAX_ERROR, Status.MALFORMED, Status.RUNTIME_ERROR,
                                       Status.NO_VALID_OUTPUT}
    assert "ValueError: x" in got[4].stderr_tail
    rows = read_log(sb.log_path)  # written by the trainer, one committed row per execution
    assert sorted(r["meta"]["i"] for r in rows if "i" in r["meta"]) == list(range(len(reqs)))
    assert iris.inputs_calls == calls + 1  # the inputs went to the object store once, not once per execution


def test_actors_run_the_local_backends_isolation_and_get_no_labels(shared):
    import numpy as np

    from wmrl.domains.research.sandbox import isolation

    iris, sb = IrisTask(), shared
    # each actor's pool chose the isolation the local backend chooses here (bwrap or unshare, never none)
    assert {d["isolation"] for d in sb.nodes} == {isolation.choose("auto")} != {"none"} and len(sb.nodes) == 2
    shipped = sb._ship(ExecRequest(iris, "def build(): pass"))  # all an actor receives of a task
    arrays = ray.get(shipped.inputs_ref)
    assert [a.tolist() for a in arrays] == [a.tolist() for a in iris.inputs("val")]
    assert not any(a.shape == iris._y[100:].shape and np.array_equal(a, iris._y[100:]) for a in arrays)
    assert not hasattr(shipped, "judge")


def test_backpressure_keeps_one_execution_per_slot_in_flight(shared):
    sb, seen = shared, []
    sb._after_dispatch = lambda actor, job: seen.append(sum(a.busy for a in sb.actors))
    t0 = time.monotonic()
    try:
        outs = sb.run([ExecRequest(IrisTask(), SLEEP.format(s=0.5)) for _ in range(6)])
    finally:
        sb._after_dispatch = None
    wall = time.monotonic() - t0
    assert all(o.status is Status.VALID for o in outs)
    assert max(seen) == 2 and len(seen) == 6  # never more in flight than the 2 slots
    assert 1.4 < wall < 8  # 3 rounds of 0.5 s on 2 slots: in parallel, and queued


def test_an_actor_killed_mid_execution_loses_nothing(shared):
    sb = shared  # its actors hold the instance's 2 CPUs: killing and replacing them is part of the test
    sb.run([ExecRequest(IrisTask(), SLEEP.format(s=0.0))] * 2)  # both pools warm
    first = sb.actors[0]
    future = sb.submit([ExecRequest(IrisTask(), SLEEP.format(s=1.5), meta={"kill": i}) for i in range(4)])
    time.sleep(0.8)
    ray.kill(first.handle, no_restart=True)  # mid-execution
    outs = future.result(timeout=120)
    assert all(o.status is Status.VALID for o in outs), [o.stderr_tail for o in outs]
    assert sorted(o.attempts for o in outs)[-1] == 2  # the lost one ran again, elsewhere
    assert first not in sb.actors and all(a.alive for a in sb.actors)  # replaced
    assert sb.run([ExecRequest(IrisTask(), SLEEP.format(s=0.0))])[0].status is Status.VALID
    rows = [r for r in read_log(sb.log_path) if "kill" in r["meta"]]
    assert sorted(r["meta"]["kill"] for r in rows) == [0, 1, 2, 3] and all(r["status"] == "valid" for r in rows)


def test_an_execution_lost_on_every_actor_is_infra_error_and_recorded(shared):
    sb = shared
    assert sb.retries == 1
    sb._after_dispatch = lambda actor, job: ray.kill(actor, no_restart=True)  # every attempt's actor dies
    try:
        [out] = sb.run([ExecRequest(IrisTask(), SLEEP.format(s=1.0), meta={"doomed": 1})])
    finally:
        sb._after_dispatch = None
    assert out.status is Status.INFRA_ERROR and math.isnan(out.reward) and out.attempts == 2
    assert "ray actor" in out.stderr_tail
    [out] = sb.run([ExecRequest(IrisTask(), SLEEP.format(s=0.0), meta={"after": 1})])  # the replacements work
    assert out.status is Status.VALID and out.attempts == 1
    rows = read_log(sb.log_path)
    [doomed] = [r for r in rows if "doomed" in r["meta"]]
    assert doomed["status"] == "infra_error" and doomed["reward"] is None
    assert [r["status"] for r in rows if "after" in r["meta"]] == ["valid"]
