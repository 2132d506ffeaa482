"""Behaviour of the research tasks: secret splits, judging, leaderboards, YAML tasks, CLI."""
from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wmrl.config import TaskConfig
from wmrl.domains.research.outcome import RawResult, Status
from wmrl.domains.research.tasks import TaskError, action_class, load_suite
from wmrl.domains.research.tasks import leaderboard as leaderboard_mod

REPO = Path(__file__).resolve().parent.parent
SECRET = "a" * 64


def suite_for(cache_dir, secret=SECRET, **kw):
    return load_suite(TaskConfig(cache_dir=str(cache_dir), secret_seed=secret, **kw))


@pytest.fixture
def cache_dir(tmp_path):
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def wine(tmp_path_factory):
    """Wine with its leaderboard built once for the module (the cheapest bundled task)."""
    task = suite_for(tmp_path_factory.mktemp("cache")).get("wine")
    task.leaderboard()
    return task


def _rows(X):
    return {tuple(r) for r in X}


# --- secrets and splits -------------------------------------------------------------------

def test_host_secret_is_made_once_with_mode_0600(cache_dir):
    first = load_suite(TaskConfig(cache_dir=str(cache_dir)))
    path = cache_dir / "secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_text().strip()) == 64
    again = load_suite(TaskConfig(cache_dir=str(cache_dir)))
    np.testing.assert_array_equal(first.get("wine").splits().y_val, again.get("wine").splits().y_val)


def test_splits_are_disjoint_and_cover_the_data(cache_dir):
    s = suite_for(cache_dir).get("wine").splits()
    train, val, test = _rows(s.X_train), _rows(s.X_val), _rows(s.X_test)
    assert not (train & val) and not (train & test) and not (val & test)
    assert len(train) + len(val) + len(test) == 178
    assert s.X_train.dtype == np.float64 and s.y_train.dtype == np.int64
    assert set(np.unique(s.y_val)) == {0, 1, 2}  # stratified: every class in validation


def test_splits_are_deterministic_for_a_secret_and_change_with_it(cache_dir):
    a = suite_for(cache_dir).get("digits").splits()
    b = suite_for(cache_dir).get("digits").splits()
    c = suite_for(cache_dir, secret="b" * 64).get("digits").splits()
    np.testing.assert_array_equal(a.X_val, b.X_val)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.y_val, c.y_val)


def test_synthetic_data_changes_with_the_secret(cache_dir):
    a = suite_for(cache_dir).get("friedman1").splits()
    b = suite_for(cache_dir, secret="c" * 64).get("friedman1").splits()
    all_a = _rows(np.vstack([a.X_train, a.X_val, a.X_test]))
    all_b = _rows(np.vstack([b.X_train, b.X_val, b.X_test]))
    assert not (all_a & all_b)


def test_bundled_rows_cannot_be_looked_up_in_the_public_dataset(cache_dir):
    from sklearn.datasets import load_wine

    public = _rows(load_wine().data.astype(np.float64))
    s = suite_for(cache_dir).get("wine").splits()
    assert not (_rows(s.X_val) & public)
    y_val = suite_for(cache_dir).get("wine").splits().y_val
    assert not np.all(np.diff(y_val) >= 0)  # not in the public file's class-sorted order


def test_inputs_hold_no_eval_labels(cache_dir):
    task = suite_for(cache_dir).get("moons")
    X_train, y_train, X_eval = task.inputs("test")
    s = task.splits()
    assert len(task.inputs("val")) == 3
    np.testing.assert_array_equal(X_eval, s.X_test)
    np.testing.assert_array_equal(y_train, s.y_train)
    with pytest.raises(ValueError):
        task.inputs("train")
    assert task.fingerprint() == suite_for(cache_dir).get("moons").fingerprint()
    assert task.fingerprint() != suite_for(cache_dir, secret="d" * 64).get("moons").fingerprint()


# --- judging ---------------------------------------------------------------------------------

def test_judge_scores_valid_predictions(wine):
    y = wine.splits().y_val
    out = wine.judge(RawResult(Status.VALID, predictions=y.reshape(-1, 1).astype(np.float64), wall_s=1.5), "val")
    assert out.status is Status.VALID and out.value == 1.0 and out.metric == "accuracy"
    assert out.pos == wine.pos(1.0) and 0.5 <= out.pos <= 1.0
    assert out.reward == pytest.approx(0.5 + 0.5 * out.pos)
    assert out.wall_s == 1.5 and out.task == "wine"
    worse = wine.judge(RawResult(Status.VALID, predictions=np.zeros_like(y)), "val")
    assert worse.value < 1.0 and worse.reward < out.reward


@pytest.mark.parametrize("make, why", [
    (lambda y: y[:-1], "shape"),
    (lambda y: np.stack([y, y], axis=1), "shape"),
    (lambda y: np.where(np.arange(len(y)) == 0, np.nan, y), "NaN"),
    (lambda y: np.full(len(y), 7), "never seen"),
    (lambda y: y + 0.5, "never seen"),
    (lambda y: y.astype(object), "not numeric"),
    (lambda y: np.array(["a"] * len(y)), "not numeric"),
    (lambda y: None, "none returned"),
])
def test_judge_rejects_invalid_predictions(wine, make, why):
    out = wine.judge(RawResult(Status.VALID, predictions=make(wine.splits().y_val), stderr_tail="fit ok\n"), "val")
    assert out.status is Status.NO_VALID_OUTPUT
    assert out.reward == 0.2 and out.value is None and out.pos is None
    assert why in out.stderr_tail.splitlines()[-1]


@pytest.mark.parametrize("status, reward", [
    (Status.MALFORMED, 0.0), (Status.SYNTAX_ERROR, 0.0), (Status.RUNTIME_ERROR, 0.1),
    (Status.TIMEOUT, 0.1), (Status.NO_VALID_OUTPUT, 0.2),
])
def test_judge_passes_failed_executions_through(wine, status, reward):
    out = wine.judge(RawResult(status, stderr_tail="Traceback...\nValueError: boom"), "val")
    assert out.status is status and out.reward == reward
    assert out.stderr_tail.endswith("ValueError: boom")


def test_infra_error_is_missing_not_a_failure(wine):
    assert math.isnan(wine.judge(RawResult(Status.INFRA_ERROR), "val").reward)


def test_regression_judge_uses_r2(cache_dir):
    task = suite_for(cache_dir).get("friedman2")
    y = task.splits().y_test
    # pos needs the leaderboard; build it from precomputed scores to keep the test fast
    task._board = {"references": [{"name": "a", "val": 0.0, "test": 0.0}, {"name": "b", "val": 0.9, "test": 0.9}]}
    perfect = task.judge(RawResult(Status.VALID, predictions=y), "test")
    mean = task.judge(RawResult(Status.VALID, predictions=np.full(len(y), y.mean())), "test")
    assert perfect.value == pytest.approx(1.0) and perfect.pos == 1.0 and perfect.reward == 1.0
    assert mean.value == pytest.approx(0.0) and mean.pos == 0.25


# --- leaderboard -----------------------------------------------------------------------------

def test_pos_is_monotone_and_bounded(wine):
    board = wine.leaderboard("val")
    assert board == sorted(board) and len(board) >= 8
    values = np.linspace(board[0] - 0.1, board[-1] + 0.1, 50)
    positions = [wine.pos(v) for v in values]
    assert all(a <= b for a, b in zip(positions, positions[1:]))
    assert wine.pos(board[0] - 1e-6) == 0.0
    assert wine.pos(board[-1] + 1e-6) == 1.0
    assert leaderboard_mod.position(0.5, [0.2, 0.5, 0.8]) == pytest.approx(0.5)  # a tie counts half


def test_leaderboard_is_cached_across_processes(wine, monkeypatch):
    fresh = suite_for(wine.cache_dir).get("wine")  # same cache and secret, nothing in memory

    def refit(task):
        raise AssertionError("references were refitted")

    monkeypatch.setattr(leaderboard_mod, "fit_references", refit)
    assert fresh.leaderboard("test") == wine.leaderboard("test")
    with pytest.raises(AssertionError, match="refitted"):
        fresh.leaderboard_table(rebuild=True)


def test_leaderboard_cache_is_keyed_by_the_data(wine):
    other = suite_for(wine.cache_dir, secret="e" * 64).get("wine")
    assert leaderboard_mod.cache_path(other) != leaderboard_mod.cache_path(wine)


# --- YAML tasks ------------------------------------------------------------------------------

def _write_csv(path: Path, n=240, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    label = np.where(X[:, 0] + 0.5 * X[:, 1] > 0, "yes", "no")
    lines = ["a,b,outcome,c"] + [f"{x[0]:.5f},{x[1]:.5f},{l},{x[2]:.5f}" for x, l in zip(X, label)]
    path.write_text("\n".join(lines) + "\n")


def _write_task(dir: Path, **fields) -> Path:
    import yaml

    doc = {"name": "churn", "data": "churn.csv", "target": "outcome", "kind": "classification",
           "split": {"val": 0.25, "test": 60}, "time_limit_s": 5, "held_out": True, **fields}
    path = dir / "churn.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in doc.items() if v is not None}))
    return path


def test_yaml_task_from_csv_works_end_to_end(tmp_path, cache_dir):
    _write_csv(tmp_path / "churn.csv")
    suite = suite_for(cache_dir, files=[str(_write_task(tmp_path))])
    task = suite.get("churn")
    assert task in suite.eval_tasks() and task not in suite.train_tasks()
    s = task.splits()
    assert (len(s.y_train), len(s.y_val), len(s.y_test)) == (120, 60, 60)
    assert s.X_train.shape[1] == 3 and set(np.unique(s.y_train)) == {0, 1}
    assert task.metric == "accuracy" and task.time_limit_s == 5.0
    out = task.judge(RawResult(Status.VALID, predictions=s.y_val), "val")
    assert out.status is Status.VALID and out.value == 1.0 and out.pos > 0.5
    assert list((cache_dir / "leaderboards").glob("churn-*.json"))
    assert "churn" in task.prompt() and "n=120 d=3 classes=2" in task.descriptor()


@pytest.mark.parametrize("fields, bad_field", [
    ({"kind": None}, "'kind'"),
    ({"kind": "ranking"}, "'kind'"),
    ({"metric": "r2"}, "'metric'"),
    ({"tim_limit_s": 3}, "'time_limit_s'"),  # the typo is named, with the intended field
    ({"time_limit_s": -1}, "'time_limit_s'"),
    ({"target": "churned"}, "'target'"),
    ({"data": "missing.csv"}, "'data'"),
    ({"data": "bundled:titanic"}, "'data'"),
    ({"split": {"val": 0.5, "test": 0.45}}, "'split'"),
    ({"held_out": "maybe"}, "'held_out'"),
])
def test_broken_yaml_names_the_bad_field(tmp_path, cache_dir, fields, bad_field):
    _write_csv(tmp_path / "churn.csv")
    path = _write_task(tmp_path, **fields)
    with pytest.raises(TaskError, match=bad_field) as e:
        suite_for(cache_dir, files=[str(path)])
    assert str(path) in str(e.value)


def test_yaml_task_cannot_shadow_a_builtin(tmp_path, cache_dir):
    path = _write_task(tmp_path, name="wine", data="bundled:wine", target=None)
    with pytest.raises(TaskError, match="already a task"):
        suite_for(cache_dir, files=[str(path)])


# --- registry --------------------------------------------------------------------------------

def test_default_train_and_eval_tasks(cache_dir):
    suite = suite_for(cache_dir)
    train, held = suite.train_tasks(), suite.eval_tasks()
    assert len(train) >= 8 and not {t.name for t in train} & {t.name for t in held}
    assert all(t.held_out for t in held) and {t.kind for t in held} == {"classification", "regression"}
    assert {t.kind for t in train} == {"classification", "regression"}
    assert {t.name for t in train if t.time_limit_s >= 30} >= {"large_clf", "large_reg"}
    chosen = suite_for(cache_dir, train=["wine"], eval=["iris"])
    assert [t.name for t in chosen.train_tasks()] == ["wine"] and [t.name for t in chosen.eval_tasks()] == ["iris"]


def test_unknown_task_names_the_closest(cache_dir):
    with pytest.raises(TaskError, match="wine"):
        suite_for(cache_dir).get("wien")
    with pytest.raises(TaskError, match="digits"):
        suite_for(cache_dir, train=["digit"])


def test_prompts_and_descriptors_are_compact(cache_dir):
    for task in suite_for(cache_dir):
        words = len(task.prompt().split())
        assert 60 <= words <= 150, (task.name, words)
        entry = "./submission/submission.csv" if task.interface == "script" else "build()"  # what the program must do
        assert entry in task.prompt() and task.metric in task.prompt()
        assert task.descriptor().startswith(f"task={task.name} kind={task.kind} n=")
    assert "classes=3 metric=accuracy" in suite_for(cache_dir).get("wine").descriptor()


# --- action classes --------------------------------------------------------------------------

@pytest.mark.parametrize("source, expected", [
    ("from sklearn.ensemble import RandomForestClassifier\ndef build():\n    return RandomForestClassifier()", "forest"),
    ("def build():\n    return make_pipeline(StandardScaler(), LogisticRegression())", "linear"),
    ("def build():\n    steps = [('s', StandardScaler()), ('m', HistGradientBoostingRegressor())]\n"
     "    model = Pipeline(steps)\n    return model", "boosting"),
    ("import sklearn.neighbors as nb\ndef build():\n    return GridSearchCV(nb.KNeighborsClassifier(), {})", "knn"),
    ("from sklearn.svm import SVC as S\ndef make():\n    return S()\ndef build():\n    return make()", "svm"),
    ("def build():\n    return DecisionTreeRegressor().set_params(max_depth=3)", "tree"),
    ("def build(): return GaussianNB()", "naive_bayes"),
    ("def build():\n    return Pipeline(steps=[('p', PCA()), ('m', MLPRegressor())])", "neural_net"),
    ("def build():\n    return DummyRegressor()", "dummy"),
    ("def build():\n    return make_pipeline(RandomForestClassifier(), Ridge())", "linear"),  # final step counts
    ("def build():\n    return MyModel()", "other"),
    ("def build(:\n    return", "unparsable"),
    ("```python\nthis is not code", "unparsable"),
])
def test_action_class(source, expected, wine):
    assert action_class(source) == expected
    assert wine.action_class(source) == expected


# --- CLI and import cost ---------------------------------------------------------------------

def _cli(*args, cwd=REPO):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "wmrl.domains.research.tasks", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def test_cli_json_lists_tasks_with_held_out_flag(cache_dir):
    proc = _cli("--json", f"task.cache_dir={cache_dir}", f"task.secret_seed={SECRET}")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert rows["iris"]["held_out"] is True and rows["wine"]["held_out"] is False
    assert rows["wine"]["n_train"] + rows["wine"]["n_val"] + rows["wine"]["n_test"] == 178
    assert {"dataset", "kind", "metric", "time_limit_s"} <= set(rows["diabetes"])


@pytest.mark.parametrize("args, message", [
    (["leaderboard", "--task", "wnie"], "closest: wine"),
    (["lst"], "unknown command"),
    (["task.cachedir=x"], "task.cache_dir"),
])
def test_cli_usage_errors_exit_2(cache_dir, args, message):
    proc = _cli(*args, f"task.secret_seed={SECRET}", f"task.cache_dir={cache_dir}")
    assert proc.returncode == 2 and message in proc.stderr


def test_importing_tasks_does_not_import_sklearn():
    code = "import sys, wmrl.domains.research.tasks; print(any(m.startswith('sklearn') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.strip() == "False", out.stderr
