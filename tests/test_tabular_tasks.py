"""Tasks from a user's real table: categorical and text columns, empty cells, an id column,
scikit-learn scorer names (probability metrics included), clear errors, and the sandbox path."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from wmrl.config import SandboxConfig, TaskConfig
from wmrl.domains.research.outcome import RawResult, Status
from wmrl.domains.research.tasks import TaskError, load_suite

SECRET = "t" * 64


def write_penguins(path: Path, n: int = 300, seed: int = 0, species=("Adelie", "Chinstrap", "Gentoo")) -> Path:
    """A table as the public penguins CSV is: text columns, empty cells in numeric ones, an id."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    sp = rng.choice(list(species), n)
    base = {s: i for i, s in enumerate(species)}
    code = np.vectorize(base.get)(sp)
    island = np.where(code == 2, "Biscoe", rng.choice(["Dream", "Torgersen", "Biscoe"], n))
    bill = 38 + 5 * code + rng.normal(0, 1.5, n)
    bill[rng.random(n) < 0.1] = np.nan
    flipper = 185 + 12 * (code == 2) + rng.normal(0, 4, n)
    sex = rng.choice(["male", "female", None], n, p=[0.48, 0.48, 0.04])
    df = pd.DataFrame({"penguin_id": np.arange(n), "species": sp, "island": island, "bill_length_mm": bill,
                       "flipper_length_mm": np.round(flipper), "sex": sex})
    if path.suffix == ".parquet":
        df.to_parquet(path, index=False)
    else:
        df.to_csv(path, index=False)
    return path


def write_task(dir: Path, **fields) -> Path:
    import yaml

    doc = {"name": "penguins", "data": "penguins.csv", "target": "species", "id_column": "penguin_id",
           "kind": "classification", "time_limit_s": 10, **fields}
    path = dir / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in doc.items() if v is not None}))
    return path


def suite(tmp_path, *files, **kw):
    return load_suite(TaskConfig(cache_dir=str(tmp_path / "cache"), secret_seed=SECRET, files=[str(f) for f in files], **kw))


@pytest.fixture(scope="module")
def penguins(tmp_path_factory):
    d = tmp_path_factory.mktemp("penguins")
    write_penguins(d / "penguins.csv")
    return suite(d, write_task(d)).get("penguins")


def test_a_csv_with_text_and_empty_cells_becomes_a_dataframe_task(penguins):
    s = penguins.splits()
    assert list(s.X_train.columns) == ["island", "bill_length_mm", "flipper_length_mm", "sex"]  # no id, no target
    assert s.X_train["bill_length_mm"].isna().any() and s.X_train["island"].dtype.kind not in "biuf"
    assert s.classes == ["Adelie", "Chinstrap", "Gentoo"] and set(np.unique(s.y_train)) == {0, 1, 2}
    X_train, y_train, X_eval = penguins.inputs("val")
    assert "species" not in X_eval.columns and len(X_eval) == len(s.y_val)
    assert "island:text" in penguins.prompt() and "missing" in penguins.prompt()
    assert "table=mixed" in penguins.descriptor()


def test_split_is_stratified_and_secret(tmp_path, penguins):
    s = penguins.splits()
    share = lambda y: np.bincount(y, minlength=3) / len(y)  # noqa: E731
    assert np.abs(share(s.y_val) - share(s.y_train)).max() < 0.05
    (tmp_path / "penguins.csv").write_bytes(Path(penguins.spec.data).read_bytes())
    other = load_suite(TaskConfig(cache_dir=str(tmp_path / "c"), secret_seed="u" * 64,
                                  files=[str(write_task(tmp_path))])).get("penguins").splits()
    assert not s.X_val.equals(other.X_val)


def test_leaderboard_of_a_messy_table_is_built_with_preprocessing(penguins):
    refs = {r["name"]: r for r in penguins.leaderboard_table()["references"]}
    assert {"dummy", "logreg", "forest", "boosting"} <= set(refs)
    assert refs["logreg"]["val"] > refs["dummy"]["val"] + 0.3  # imputed, encoded and scaled: it learns
    out = penguins.judge(RawResult(Status.VALID, predictions=penguins.splits().y_val), "val")
    assert out.status is Status.VALID and out.value == 1.0 and out.pos >= 0.5


def test_probability_metric_scores_predict_proba(tmp_path):
    write_penguins(tmp_path / "penguins.csv", species=("no", "yes"))
    task = suite(tmp_path, write_task(tmp_path, metric="roc_auc")).get("penguins")
    assert task.method == "predict_proba"
    y = task.splits().y_val
    perfect = np.column_stack([1.0 - y, y]).astype(float)
    out = task.judge(RawResult(Status.VALID, predictions=perfect), "val")
    assert out.status is Status.VALID and out.value == pytest.approx(1.0)
    labels = task.judge(RawResult(Status.VALID, predictions=y), "val")  # labels where probabilities are due
    assert labels.status is Status.NO_VALID_OUTPUT and "one column per class" in labels.stderr_tail
    assert "svm" not in task.reference_programs()  # no predict_proba


def test_error_names_users_write_are_scikit_learn_scorers(tmp_path):
    write_penguins(tmp_path / "penguins.csv")
    assert suite(tmp_path, write_task(tmp_path, metric="log_loss")).get("penguins").metric == "neg_log_loss"


def test_regression_errors_are_negated_so_higher_is_better(tmp_path):
    write_penguins(tmp_path / "penguins.csv")
    task = suite(tmp_path, write_task(tmp_path, target="flipper_length_mm", kind="regression",
                                      metric="neg_mean_absolute_error")).get("penguins")
    y = task.splits().y_val
    assert task.judge(RawResult(Status.VALID, predictions=y + 2.0), "val").value == pytest.approx(-2.0)


def test_two_files_make_train_and_test(tmp_path):
    write_penguins(tmp_path / "penguins.csv", n=200)
    write_penguins(tmp_path / "held.parquet", n=80, seed=1)
    task = suite(tmp_path, write_task(tmp_path, test_data="held.parquet")).get("penguins")
    s = task.splits()
    assert len(s.y_test) == 80 and len(s.y_train) + len(s.y_val) == 200


@pytest.mark.parametrize("change, words", [
    ({"target": "body_mass"}, ["'target'", "body_mass", "penguins.csv"]),
    ({"id_column": "tag"}, ["'id_column'", "tag", "penguins.csv"]),
])
def test_yaml_errors_name_the_file_and_column(tmp_path, change, words):
    write_penguins(tmp_path / "penguins.csv")
    with pytest.raises(TaskError) as e:
        suite(tmp_path, write_task(tmp_path, **change))
    assert all(w in str(e.value) for w in words), str(e.value)


def test_one_class_and_oversized_files_are_refused_clearly(tmp_path):
    write_penguins(tmp_path / "penguins.csv", species=("Adelie",))
    with pytest.raises(TaskError, match=r"'species' of penguins.csv has one class only"):
        suite(tmp_path, write_task(tmp_path)).get("penguins").splits()
    write_penguins(tmp_path / "penguins.csv")
    with pytest.raises(TaskError, match=r"penguins.csv.*over task.max_data_mb=0.001"):
        suite(tmp_path, write_task(tmp_path), max_data_mb=0.001)


def test_grammar_programs_for_tables_fit_in_process(penguins):
    from wmrl.domains.research import grammar

    rng = random.Random(0)
    X, y, X_eval = penguins.inputs("val")
    fitted = 0
    for _ in range(6):
        sample = grammar.sample_for(penguins, rng)
        assert "make_column_transformer" in sample.source
        namespace: dict = {}
        exec(sample.source, namespace)
        pred = namespace["build"]().fit(X, y).predict(X_eval)
        fitted += len(pred) == len(X_eval)
    assert fitted == 6


def test_sandbox_gives_the_program_a_dataframe_and_scores_probabilities(tmp_path):
    from wmrl.domains.research.sandbox.base import ExecRequest
    from wmrl.domains.research.sandbox.local import LocalSandbox

    write_penguins(tmp_path / "penguins.csv", species=("no", "yes"))
    task = suite(tmp_path, write_task(tmp_path, metric="roc_auc")).get("penguins")
    program = """
from sklearn.compose import make_column_selector, make_column_transformer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder

class Checked(LogisticRegression):
    def fit(self, X, y):
        return super().fit(X, y)

def build():
    pre = make_column_transformer((SimpleImputer(), make_column_selector(dtype_include='number')),
                                  (OneHotEncoder(handle_unknown='ignore'), make_column_selector(dtype_exclude='number')))
    return make_pipeline(CheckColumns(), pre, LogisticRegression(max_iter=500))

from sklearn.base import BaseEstimator, TransformerMixin
class CheckColumns(BaseEstimator, TransformerMixin):
    def fit(self, X, y=None):
        assert list(X.columns) == ['island', 'bill_length_mm', 'flipper_length_mm', 'sex'], list(X.columns)
        assert X['bill_length_mm'].isna().any()
        return self
    def transform(self, X):
        return X
"""
    with LocalSandbox(SandboxConfig(slots=1)) as sb:
        good, labels_only = sb.run([ExecRequest(task, program), ExecRequest(task, program.replace(
            "LogisticRegression(max_iter=500))", "__import__('sklearn.svm').svm.SVC())"))])
    assert good.status is Status.VALID and 0.0 <= good.value <= 1.0 and good.pos is not None, good.stderr_tail
    assert labels_only.status is Status.NO_VALID_OUTPUT and "predict_proba" in labels_only.stderr_tail


def test_warm_start_pairs_table_programs_with_table_prompts_only(penguins):
    """Mixed demonstrations lend context only between prompts of one form: a table program never
    follows an array prompt, and a script task keeps its own prompt."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_warmstart import _Chat, _prompts

    from wmrl.domains.research.warmstart import demonstrations

    suite_ = load_suite(TaskConfig(cache_dir=str(penguins.cache_dir), secret_seed=SECRET))
    tasks = [penguins, suite_.get("wine"), suite_.get("diabetes"), suite_.get("loan_default")]
    rows = demonstrations(tasks, _Chat(), 120, 1, 0.0, seed=1, prompt_mix=0.5)
    for prompt, (ids, mask) in zip(_prompts(rows), rows):
        program = "".join(chr(i) for i, m in zip(ids, mask) if m and i > 2)
        table_prompt = "pandas DataFrame" in prompt or "./input/" in prompt
        assert table_prompt == ("make_column_transformer" in program), (prompt[:60], program[:80])
        if "./input/" in program or "input/train.csv" in program:
            assert prompt == suite_.get("loan_default").prompt()
