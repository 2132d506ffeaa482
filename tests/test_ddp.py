"""Multi-process training (ddp, gloo on CPU): every rank holds the same corrections, world model and anchor
budget after each step; two ranks take the update one process takes on the union of their batches; a DDP
run resumes to the end it would have reached; `train.py` runs the smoke preset on 2 processes."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "tests" / "ddp_run.py"  # the real module and callbacks on synthetic batches (see its docstring)
# float32 sums in another order (micro-batches per rank, then across ranks): the same update to rounding, not bits
LOSS_RTOL, PARAM_ATOL = 1e-5, 1e-5


def _run(out: Path, devices: int, steps: int, *extra: str) -> list[dict]:
    r = subprocess.run([sys.executable, str(RUN), str(out), str(devices), str(steps), *extra], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return [torch.load(out / f"rank{k}.pt", weights_only=False) for k in range(devices)]


def _equal(a, b) -> bool:
    """Exact equality of nested state (dicts, lists, tensors, arrays, numbers)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and bool(torch.equal(a, b))
    if hasattr(a, "__array__") and not isinstance(a, (int, float, str)):
        import numpy as np

        return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=np.asarray(a).dtype.kind == "f")
    return a == b or (a != a and b != b)


def _losses(state: dict) -> list[float]:
    return [state["metrics"][s]["rl/loss"] for s in sorted(state["metrics"]) if "rl/loss" in state["metrics"][s]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    return _run(tmp / "two", 2, 4), _run(tmp / "one", 1, 4)[0], tmp


def test_every_rank_holds_the_same_corrections_world_model_and_budget(runs):
    (rank0, rank1), _, _ = runs
    assert rank0["world"] == 2 and rank0["rl_step"] == rank1["rl_step"] == 4
    for key in ("debiaser", "s2", "world_model", "budget", "policy"):
        assert _equal(rank0[key], rank1[key]), key
    assert rank0["s2"] is not None  # s² was measured (on anchors of both ranks: groups 0 and 1)


def test_two_ranks_take_the_update_one_process_takes_on_their_union(runs):
    (rank0, _), one, _ = runs
    assert _losses(rank0) == pytest.approx(_losses(one), rel=LOSS_RTOL) and len(_losses(one)) == 4
    for key in ("debiaser", "s2", "budget"):  # learned from the same pairs, in the same order
        assert _equal(rank0[key], one[key]), key
    for name, value in one["policy"].items():
        assert torch.allclose(rank0["policy"][name], value, atol=PARAM_ATOL), name
    moved = max(float((rank0["policy"][n] - v).abs().max()) for n, v in _initial_policy().items())
    assert moved > 100 * PARAM_ATOL  # the comparison is not trivially met by weights that did not train


def test_a_metric_only_one_rank_has_is_combined_by_its_rule_and_the_gap_is_counted(runs):
    """Rank 0's keys decided what was combined: a metric rank 0 lacked was dropped (one rank 1 lacked raised
    KeyError), and rates were summed over ranks."""
    (rank0, _), one, _ = runs
    for step in range(1, 5):
        assert rank0["metrics"][step]["wm/malformed_rate"] == one["metrics"][step]["wm/malformed_rate"] == 0.25
        assert rank0["metrics"][step]["ddp/missing_metrics"] == 2  # rank 0 lacked both of the rate's counts
        assert "ddp/missing_metrics" not in one["metrics"][step] and "wm/answers" not in rank0["metrics"][step]


def test_a_ddp_run_resumes_to_the_end_of_an_uninterrupted_one(runs):
    (ref, _), _, tmp = runs
    stopped = _run(tmp / "stopped", 2, 4, "--stop-after", "2")
    assert [r["rl_step"] for r in stopped] == [2, 2]
    resumed = _run(tmp / "resumed", 2, 4, "--resume", str(tmp / "stopped" / "ckpt" / "last.ckpt"))
    for r in resumed:
        assert r["rl_step"] == 4
        for key in ("debiaser", "s2", "budget"):
            assert _equal(r[key], ref[key]), key
        for name, value in ref["policy"].items():
            assert torch.allclose(r["policy"][name], value, atol=PARAM_ATOL), name


@pytest.mark.slow
def test_train_py_runs_the_smoke_preset_on_two_processes(tmp_path, session_cache):
    import mlflow

    from wmrl.domains.research.sandbox import read_log

    r = subprocess.run([sys.executable, str(ROOT / "train.py"), "experiment=smoke", "trainer.strategy=ddp",
                        "trainer.devices=2", "trainer.accelerator=cpu", f"run_dir={tmp_path}/runs",
                        f"logger.tracking_uri=sqlite:///{tmp_path}/mlruns.db", f"task.cache_dir={session_cache}",
                        "trainer.progress_bar=true"], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    # a rank that crashes makes the other fail on a closed connection: show the crashed rank's own lines too
    other = "\n".join(line for line in r.stderr.splitlines() if "[rank1]" in line)[-3000:]
    assert r.returncode == 0, other + "\n---\n" + r.stderr[-4000:]
    [run_dir] = list((tmp_path / "runs").iterdir())  # one run directory for both ranks
    summary = json.loads((run_dir / "summary.json").read_text())
    assert r.stdout.count("wmrl smoke · run dir") == 1 and "step 4/4" in r.stdout
    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlruns.db")
    [run] = client.search_runs([client.get_experiment_by_name("wmrl").experiment_id])  # rank 0's only
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "time/step_s")) == [1, 2, 3, 4]
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["wmrl"]["rl_step"] == 4 and len(ckpt["RolloutDataModule"]["pending_anchors_by_rank"]) == 2
    log = read_log(run_dir / "executions.sqlite")
    train = [row for row in log if row["meta"]["purpose"] == "train"]
    # routing is decided over all groups, as in one process: warm-up 16 programs, then one anchor group of 8
    assert len(train) == 16 + 3 * 8 and summary["cost/real_executions"] == sum(row["outcome"]["attempts"] > 0 for row in train)
    # rank 0 alone evaluates: at steps 0, 2, 4, 4 samples x 2 turns of the one held-out task
    assert len([row for row in log if row["meta"]["purpose"] == "eval"]) == 3 * 4 * 2


def _initial_policy() -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    import ddp_run
    from wmrl.config import PolicyConfig
    from wmrl.policy.model import build_policy

    torch.manual_seed(0)
    return build_policy(PolicyConfig(hidden_size=32, layers=1, heads=2, max_length=ddp_run.T), ddp_run.VOCAB, 0, 1).state_dict()
