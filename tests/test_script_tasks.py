"""Script tasks (MLE-bench layout): the program reads ./input/ and writes ./submission/submission.csv,
the host grades the file against answers the sandbox never sees; `python -m wmrl.domains.research.tasks import`."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wmrl.config import SandboxConfig, TaskConfig
from wmrl.domains.research.outcome import RawResult, Status
from wmrl.domains.research.sandbox.base import ExecRequest
from wmrl.domains.research.sandbox.program import precheck
from wmrl.domains.research.tasks import TaskError, load_suite

REPO = Path(__file__).resolve().parent.parent
SECRET = "q" * 64
GOOD = """
import pandas as pd
from sklearn.compose import make_column_selector, make_column_transformer
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OrdinalEncoder

train, test = pd.read_csv("input/train.csv"), pd.read_csv("input/test.csv")
sub = pd.read_csv("input/sample_submission.csv")
X = train.drop(columns=["loan_id", "default"])
codes = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1, encoded_missing_value=-1)
model = make_pipeline(make_column_transformer((codes, make_column_selector(dtype_exclude="number")),
                                              remainder="passthrough"), HistGradientBoostingClassifier(max_iter=60))
model.fit(X, train["default"])
sub["default"] = model.predict_proba(test[X.columns])[:, 1]
sub.to_csv("submission/submission.csv", index=False)
"""


def config(cache_dir, **kw):
    return TaskConfig(cache_dir=str(cache_dir), secret_seed=SECRET, **kw)


@pytest.fixture(scope="module")
def loan(tmp_path_factory):
    task = load_suite(config(tmp_path_factory.mktemp("cache"))).get("loan_default")
    task.leaderboard()
    return task


@pytest.fixture(scope="module")
def sandbox():
    from wmrl.domains.research.sandbox.local import LocalSandbox

    with LocalSandbox(SandboxConfig(slots=1)) as sb:
        yield sb


def run(sandbox, task, program, split="val"):
    [out] = sandbox.run([ExecRequest(task, program, split=split)])
    return out


def test_builtin_script_tasks_are_optional_and_messy(loan):
    suite = load_suite(config(loan.cache_dir))
    default = {t.name for t in [*suite.train_tasks(), *suite.eval_tasks()]}
    assert {"loan_default", "house_prices"} & default == set()  # default runs keep their suite
    s = loan.splits()
    assert s.X_train.isna().any().any() and "employment" in s.X_train.columns and "loan_id" not in s.X_train.columns
    assert loan.interface == "script" and loan.method == "predict_proba" and "interface=script" in loan.descriptor()
    files = loan.inputs("val")
    assert sorted(files) == ["description.md", "sample_submission.csv", "test.csv", "train.csv"]
    assert b"default" not in files["test.csv"].splitlines()[0]  # the test file carries no labels


def test_val_and_test_halves_split_the_test_rows(loan):
    s = loan.splits()
    assert len(s.y_val) + len(s.y_test) == len(loan._ids)
    assert set(loan._rows["val"]).isdisjoint(loan._rows["test"])


def test_a_correct_program_scores_valid_on_both_splits(sandbox, loan):
    val, test = run(sandbox, loan, GOOD), run(sandbox, loan, GOOD, split="test")
    for out in (val, test):
        assert out.status is Status.VALID and out.value > 0.55 and out.reward >= 0.5, out.stderr_tail
    assert val.value != test.value  # scored on different rows


@pytest.mark.parametrize("change, status, why", [
    (("sub.to_csv(", "sub.head(10).to_csv("), "no_valid_output", "10 rows, expected"),
    (("sub.to_csv(", "sub.drop(columns=['default']).to_csv("), "no_valid_output", "columns"),
    (("sub.to_csv(", "pd.concat([sub, sub]).to_csv("), "no_valid_output", "rows, expected"),
    (("sub[\"default\"] = ", "sub[\"default\"] = 'x' or "), "no_valid_output", "empty or non-numeric"),
    (("sub.to_csv(\"submission/submission.csv\", index=False)", "print(sub.head())"), "no_valid_output",
     "no ./submission/submission.csv written"),
    (("\"submission/submission.csv\"", "\"/tmp/submission.csv\""), "runtime_error", "PermissionError"),
    (("\"submission/submission.csv\"", "\"../submission.csv\""), "runtime_error", "PermissionError"),
    (("sub.to_csv(\"submission/submission.csv\", index=False)",
      "import os; os.symlink('/etc/passwd', 'submission/submission.csv')"), "no_valid_output", "cannot be read"),
    (("train, test =", "open('input/train.csv', 'a').write('x')\ntrain, test ="), "runtime_error", "PermissionError"),
])
def test_bad_submissions_and_writes_outside_get_the_right_status(sandbox, loan, change, status, why):
    out = run(sandbox, loan, GOOD.replace(*change))
    assert out.status is Status(status) and why in out.stderr_tail, (out.status, out.stderr_tail[-500:])


def test_the_answers_file_is_unreachable(sandbox, loan):
    answers = loan.folder() / "private" / "answers.csv"
    assert answers.is_file()  # on the host
    out = run(sandbox, loan, f"""
import os
seen = [p for p in ({str(answers)!r}, {str(loan.folder())!r}, {str(loan.cache_dir)!r}) if os.path.exists(p)]
raise RuntimeError("visible: " + repr(seen) + " submission")
""")
    assert out.status is Status.RUNTIME_ERROR and "visible: []" in out.stderr_tail
    out = run(sandbox, loan, f"open({str(answers)!r}).read()  # then write submission")
    assert out.status is Status.RUNTIME_ERROR and "FileNotFoundError" in out.stderr_tail


def test_precheck_follows_the_interface(sandbox, loan):
    assert precheck("print('hello')", "script")[0] is Status.MALFORMED  # never writes a submission
    assert precheck("def f(:\n submission", "script")[0] is Status.SYNTAX_ERROR
    assert precheck(GOOD, "script") == (None, "")
    assert precheck(GOOD)[0] is Status.MALFORMED  # estimator tasks still want build()
    out = run(sandbox, loan, "Here is my plan: fit a forest.")
    assert out.status is Status.MALFORMED and out.attempts == 0


def test_world_model_learns_from_script_programs(loan):
    """A script has no build(): under the estimator rule the world model would never train on it."""
    from wmrl.domains.research.outcome import Outcome
    from wmrl.domains.research.world_model.base import WMQuery
    from wmrl.domains.research.world_model.ensemble import LearnedEnsembleWM

    outcome = Outcome(loan.name, Status.NO_VALID_OUTPUT, loan.metric, reward=0.2)
    assert LearnedEnsembleWM._trainable(WMQuery(loan.name, loan.descriptor(), GOOD, "", loan.metric, loan.interface), outcome)
    prose = WMQuery(loan.name, loan.descriptor(), "I would fit a forest.", "", loan.metric, loan.interface)
    assert not LearnedEnsembleWM._trainable(prose, outcome)  # decided by the precheck, as in the sandbox


def test_grader_checks_ids_and_labels(loan):
    s = loan.splits()
    ids = loan._ids
    def csv(rows):
        return ("loan_id,default\n" + "\n".join(rows) + "\n").encode()
    ok = csv(f"{i},0.5" for i in ids)
    assert loan.parse_submission(ok, "val")[0].shape == (len(s.y_val), 2)
    dup = csv([f"{ids[0]},0.5"] * len(ids))
    assert "every test id exactly once" in loan.parse_submission(dup, "val")[1]
    assert "not a readable CSV" in loan.parse_submission(b"\x00\xff" * 10, "val")[1] or \
        loan.parse_submission(b"\x00\xff" * 10, "val")[0] is None
    out = loan.judge(RawResult(Status.VALID, predictions=b""), "val")
    assert out.status is Status.NO_VALID_OUTPUT and out.reward == pytest.approx(0.2)


def _mlebench_folder(root: Path, loan) -> Path:
    """A competition prepared offline as MLE-bench lays it out: prepared/public and prepared/private/test.csv."""
    src = loan.folder()
    comp = root / "my-competition"
    (comp / "prepared" / "public").mkdir(parents=True)
    (comp / "prepared" / "private").mkdir()
    for f in (src / "public").iterdir():
        shutil.copy(f, comp / "prepared" / "public" / f.name)
    shutil.copy(src / "private" / "answers.csv", comp / "prepared" / "private" / "test.csv")
    return comp


def test_import_registers_an_mlebench_folder_with_its_leaderboard_on_first_use(tmp_path, loan):
    comp = _mlebench_folder(tmp_path, loan)
    cache = tmp_path / "cache"
    r = subprocess.run([sys.executable, "-m", "wmrl.domains.research.tasks", "import", str(comp), "--kind", "classification",
                        "--metric", "roc_auc", "--name", "loans", f"task.cache_dir={cache}", f"task.secret_seed={SECRET}"],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (cache / "tasks" / "loans" / "private" / "answers.csv").is_file()
    task = load_suite(config(cache)).get("loans")
    assert task.interface == "script" and task.metric == "roc_auc"
    assert not list((cache / "leaderboards").glob("loans-*.json"))  # not built at import
    task.leaderboard()
    assert list((cache / "leaderboards").glob("loans-*.json"))
    again = subprocess.run([sys.executable, "-m", "wmrl.domains.research.tasks", "import", str(comp), "--kind", "classification",
                            "--name", "loans", f"task.cache_dir={cache}"], capture_output=True, text=True, cwd=REPO)
    assert again.returncode == 2 and "already imported" in again.stderr


def test_import_refuses_a_folder_without_answers(tmp_path, loan):
    from wmrl.domains.research.tasks.importer import import_folder

    comp = _mlebench_folder(tmp_path, loan)
    (comp / "prepared" / "private" / "test.csv").unlink()
    with pytest.raises(TaskError, match="private"):
        import_folder(comp, config(tmp_path / "cache"), {"kind": "classification"})
    assert not (tmp_path / "cache" / "tasks" / "my-competition").exists()


def test_private_task_files_outside_covered_places_are_hidden_in_unshare_mode(tmp_path):
    """unshare shows the host tree: a user's table or task folder elsewhere (here /var/cache) is hidden
    because the suite names it private; bwrap never mounts it."""
    import tempfile

    from wmrl.domains.research.sandbox import isolation
    from wmrl.domains.research.sandbox.local import LocalSandbox

    sys.path.insert(0, str(Path(__file__).parent))
    from test_tabular_tasks import write_penguins, write_task

    if not isolation.available("unshare")[0] or not os.access("/var/cache", os.W_OK):
        pytest.skip("needs unshare and a writable /var/cache")
    d = Path(tempfile.mkdtemp(prefix="wmrl-test-", dir="/var/cache"))
    try:
        d.chmod(0o755)  # readable by anyone, as a user's data folder usually is
        csv = write_penguins(d / "penguins.csv")
        suite = load_suite(config(tmp_path / "cache", files=[str(write_task(d))]))
        task = suite.get("penguins")
        assert str(csv.resolve()) in suite.private_paths()
        probe = f"""
import os
def build():
    p = {str(csv)!r}
    raise RuntimeError("readable: " + repr(os.path.exists(p) and os.path.getsize(p) > 0))
"""
        with LocalSandbox(SandboxConfig(slots=1, isolation="unshare"), private_paths=suite.private_paths()) as sb:
            [out] = sb.run([ExecRequest(task, probe)])
        assert "readable: False" in out.stderr_tail, out.stderr_tail[-500:]
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_multiclass_probabilities_are_graded_per_class_column(tmp_path):
    """Kaggle-style log loss: one probability column per class, in any order, matched by label."""
    import pandas as pd
    from sklearn.datasets import load_iris

    from wmrl.domains.research.tasks.generated import write_folder
    from wmrl.domains.research.tasks.script import ScriptTask
    from wmrl.domains.research.tasks.spec import TaskSpec

    X, y = load_iris(return_X_y=True)
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    df = pd.DataFrame(X, columns=["a", "b", "c", "d"]).assign(id=np.arange(150), species=names)
    idx = np.random.default_rng(1).permutation(150)
    train, test = df.iloc[idx[:100]], df.iloc[idx[100:]]
    sample = test[["id"]].assign(virginica=1 / 3, setosa=1 / 3, versicolor=1 / 3)  # not in label order
    write_folder(tmp_path / "f", train, test.drop(columns=["species"]), test[["id", "species"]], sample, "iris",
                 {"name": "iris_ll"})
    task = ScriptTask(TaskSpec("iris_ll", str(tmp_path / "f"), "classification", "neg_log_loss", 5.0,
                               interface="script", target="species", id_column="id"), SECRET, tmp_path / "cache")
    onehot = pd.get_dummies(test.set_index("id")["species"]).astype(float)
    perfect = sample.set_index("id").assign(**{c: onehot[c] for c in onehot}).reset_index().to_csv(index=False)
    out = task.judge(RawResult(Status.VALID, predictions=perfect.encode()), "val")
    assert out.status is Status.VALID and out.value == pytest.approx(0.0, abs=1e-6)
    uniform = task.judge(RawResult(Status.VALID, predictions=sample.to_csv(index=False).encode()), "test")
    assert uniform.value == pytest.approx(-np.log(3), abs=1e-6) and uniform.pos < out.pos


def test_the_grader_survives_every_mutated_submission(loan):
    """What a script writes reaches the host's grader as bytes: each mutation of a good submission (NUL bytes,
    odd encodings, huge fields, quoting, extra columns, binary junk) is judged valid or no_valid_output, never
    raises, and a judged reward is the ladder's."""
    import random

    ids = loan._ids
    good = ("loan_id,default\n" + "\n".join(f"{i},0.5" for i in ids) + "\n").encode()
    pieces = [b"\x00", b"\xff\xfe", b"\xef\xbb\xbf", b'"', b'""', b",", b"\n", b"\r\n", b"\r", b"nan", b"inf", b"-1e309",
              b"1" * 5000, b"loan_id", b"default", b"\\", b"\t", "é".encode(), b"\x1a", b"1,2,3,4,5,6,7,8,9"]
    rng = random.Random(0)
    for k in range(600):
        blob = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(blob) + 1)
            op = rng.randrange(4)
            if op == 0:
                blob[i:i] = rng.choice(pieces)
            elif op == 1:
                del blob[i:i + rng.randint(1, 40)]
            elif op == 2:
                blob[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 30)))
            else:
                blob = blob[:i] + blob[i:i + 200] * rng.randint(1, 50) + blob[i:]
        try:
            out = loan.judge(RawResult(Status.VALID, predictions=bytes(blob)), "val")
        except Exception as e:  # noqa: BLE001
            raise AssertionError(f"mutation {k} raised {type(e).__name__}: {e}\n{bytes(blob)[:300]!r}") from None
        assert out.status in (Status.VALID, Status.NO_VALID_OUTPUT)
        assert out.reward == pytest.approx(0.2) or (out.status is Status.VALID and 0.5 <= out.reward <= 1.0)
