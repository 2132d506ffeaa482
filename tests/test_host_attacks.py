"""Red-team of the host surfaces that read what users and agents hand the trainer without executing it: the
execution log, the sandbox command line, task import (YAML, links, special files, names), user tables
(Parquet bombs, messy CSV headers). Each test failed on the code before its fix."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wmrl.domains.research.outcome import Outcome, Status
from wmrl.domains.research.sandbox.log import ExecutionLog, ExecutionLogError, read_log
from wmrl.domains.research.tasks.spec import TaskError

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parent.parent


def test_a_program_that_is_not_valid_utf8_is_logged_and_judged_a_syntax_error(tmp_path):
    """A program file with bytes that are not UTF-8 crashed `python -m wmrl.domains.research.sandbox` (UnicodeDecodeError), and
    such text reaching the execution log raised in SQLite (it cannot store lone surrogates)."""
    program = tmp_path / "latin1.py"
    program.write_bytes(b"x = '\xff\xfe'\ndef build():\n    return 1\n")
    deep = tmp_path / "deep.py"
    deep.write_text("def build():\n    return " + "1 + " * 3500 + "1\n")
    log = tmp_path / "log.sqlite"
    r = subprocess.run([sys.executable, "-m", "wmrl.domains.research.sandbox", "--task", "wine", "--log", str(log), str(program), str(deep),
                        f"task.cache_dir={tmp_path / 'cache'}"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["status"] for row in rows] == ["syntax_error", "syntax_error"]
    assert "not valid UTF-8" in rows[0]["stderr_tail"] and "nested too deeply" in rows[1]["stderr_tail"]
    logged = read_log(log)
    assert len(logged) == 2 and "\\udcff" in logged[0]["program"]  # kept, as an escape


def test_an_execution_the_log_cannot_hold_stops_the_caller_and_the_slot_serves_on(tmp_path):
    """A full disk raised inside the slot's thread: the thread died, the batch's future never resolved."""
    from sandbox_fakes import IrisTask

    from wmrl.config import SandboxConfig
    from wmrl.domains.research.sandbox import ExecRequest
    from wmrl.domains.research.sandbox.local import LocalSandbox

    fine = "from sklearn.dummy import DummyClassifier\n\ndef build():\n    return DummyClassifier()\n"
    task = IrisTask(time_limit_s=10.0)
    with LocalSandbox(SandboxConfig(slots=1), log_path=tmp_path / "log.sqlite") as sb:
        sb.run([ExecRequest(task, fine)])
        sb._log._db.execute("PRAGMA max_page_count = 1")  # SQLite's own 'database or disk is full' from here on
        future = sb.submit([ExecRequest(task, fine + "#" * 15_000 + "\n")])  # needs pages the log cannot add
        with pytest.raises(ExecutionLogError, match="cannot record an execution"):
            future.result(timeout=120)  # it resolves: before, it waited forever
        sb._log._db.execute("PRAGMA max_page_count = 1073741823")
        [again] = sb.run([ExecRequest(task, fine + "# once more\n")])  # the slot's thread is alive
        assert again.status is Status.VALID
    assert len(read_log(tmp_path / "log.sqlite")) == 2


def test_the_log_refuses_loudly_when_full(tmp_path):
    log = ExecutionLog(tmp_path / "log.sqlite")
    log._db.execute("PRAGMA max_page_count = 1")
    with pytest.raises(ExecutionLogError, match="disk|full"):
        log.append(Outcome("t", Status.VALID, reward=0.5), "x" * 100_000)


def _script_folder(root: Path) -> Path:
    folder = root / "comp"
    (folder / "public").mkdir(parents=True)
    (folder / "private").mkdir()
    (folder / "public" / "description.md").write_text("Predict y.\n")
    (folder / "public" / "train.csv").write_text("id,a,y\n" + "".join(f"{i},{i % 7},{i % 2}\n" for i in range(40)))
    (folder / "public" / "test.csv").write_text("id,a\n" + "".join(f"{i},{i % 5}\n" for i in range(40, 60)))
    (folder / "public" / "sample_submission.csv").write_text("id,y\n" + "".join(f"{i},0\n" for i in range(40, 60)))
    (folder / "private" / "answers.csv").write_text("id,y\n" + "".join(f"{i},{i % 2}\n" for i in range(40, 60)))
    return folder


def _import(folder: Path, tmp_path: Path, **fields):
    from omegaconf import OmegaConf

    from wmrl.config import TaskConfig
    from wmrl.domains.research.tasks.importer import import_folder

    cfg = OmegaConf.merge(OmegaConf.structured(TaskConfig), {"cache_dir": str(tmp_path / "cache")})
    return import_folder(folder, cfg, {"kind": "classification", **fields})


def test_import_refuses_links_out_of_the_folder_and_special_files(tmp_path):
    """The copied public files are mounted for every agent: a link in the folder published what it pointed at
    (here the host secret), and a FIFO made the import wait forever."""
    secret = tmp_path / "host-secret"
    secret.write_text("hunter2\n")
    folder = _script_folder(tmp_path)
    (folder / "public" / "description.md").unlink()
    (folder / "public" / "description.md").symlink_to(secret)
    with pytest.raises(TaskError, match="links outside the folder"):
        _import(folder, tmp_path)
    (folder / "public" / "description.md").unlink()
    os.mkfifo(folder / "public" / "description.md")
    with pytest.raises(TaskError):
        _import(folder, tmp_path)
    assert not (tmp_path / "cache" / "tasks").exists() or not any((tmp_path / "cache" / "tasks").iterdir())


def test_import_refuses_a_task_name_that_leaves_the_cache(tmp_path):
    folder = _script_folder(tmp_path)
    for name in ("../../escaped", "/tmp/abs", "a/b", "..", "x" * 300):
        with pytest.raises(TaskError, match="task name"):
            _import(folder, tmp_path, name=name)
    assert not (tmp_path / "escaped").exists() and not any(p.name.startswith(".escaped") for p in tmp_path.iterdir())


def test_task_yaml_with_python_tags_or_alias_bombs_is_a_clear_error(tmp_path):
    """yaml.safe_load's ConstructorError escaped the importer as a traceback; nested aliases (a few hundred
    bytes) expanded to billions of nodes once the description was printed."""
    from wmrl.domains.research.tasks.task_file import load_task_file

    folder = _script_folder(tmp_path)
    (folder / "task.yaml").write_text("name: !!python/object/apply:os.system ['echo pwned']\nkind: classification\n")
    with pytest.raises(TaskError, match="not valid YAML"):
        _import(folder, tmp_path)
    bomb = "a: &a ['x','x','x','x','x','x','x','x','x']\n" + "".join(
        f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    (folder / "task.yaml").write_text(bomb + "name: bomb\nkind: classification\ndescription: *i\n")
    with pytest.raises(TaskError, match="aliases"):
        _import(folder, tmp_path)
    user = tmp_path / "user.yaml"
    user.write_text(bomb + "name: bomb\nkind: classification\ndata: bundled:iris\ndescription: *i\n")
    with pytest.raises(TaskError, match="aliases"):
        load_task_file(user)


def test_a_parquet_file_that_decompresses_past_the_limit_is_refused_before_it_is_read(tmp_path):
    import numpy as np
    import pandas as pd

    from wmrl.domains.research.tasks.tabular import read_table
    from wmrl.domains.research.tasks.task_file import load_task_file

    bomb = tmp_path / "bomb.parquet"
    pd.DataFrame({"x": np.zeros(4_000_000), "y": np.zeros(4_000_000)}).to_parquet(bomb, compression="zstd")
    assert bomb.stat().st_size < 1 << 20  # a few KB on disk, 64 MB of columns
    with pytest.raises(TaskError, match="decompresses to"):
        read_table(bomb, "test", max_mb=16)
    spec = tmp_path / "bomb.yaml"
    spec.write_text(f"name: bomb\nkind: regression\ndata: {bomb}\ntarget: y\n")
    with pytest.raises(TaskError, match="decompresses to"):
        load_task_file(spec, max_data_mb=16)
    (tmp_path / "junk.parquet").write_bytes(b"PAR1" + os.urandom(2000) + b"PAR1")
    spec.write_text(f"name: junk\nkind: regression\ndata: {tmp_path / 'junk.parquet'}\ntarget: y\n")
    with pytest.raises(TaskError, match="cannot read junk.parquet"):
        load_task_file(spec)


def test_a_csv_whose_header_is_not_utf8_gets_a_clear_error_not_a_traceback(tmp_path):
    from wmrl.domains.research.tasks.task_file import load_task_file

    csv = tmp_path / "messy.csv"
    csv.write_bytes(b"caf\xe9,y\n1,2\n3,4\n")
    spec = tmp_path / "messy.yaml"
    spec.write_text(f"name: messy\nkind: regression\ndata: {csv}\ntarget: y\n")
    load_task_file(spec)  # the header is read (undecodable bytes replaced): the target is found
    spec.write_text(f"name: messy\nkind: regression\ndata: {csv}\ntarget: z\n")
    with pytest.raises(TaskError, match="column 'z' is not in messy.csv"):
        load_task_file(spec)
