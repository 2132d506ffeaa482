"""`python train.py experiment=smoke task.files=[penguins.yaml]`: a user's CSV with text columns and
empty cells trains end to end, its leaderboard built on the way."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_tabular_tasks import write_penguins, write_task  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_smoke_trains_on_a_users_messy_csv(tmp_path, session_cache):
    write_penguins(tmp_path / "penguins.csv")
    task_file = write_task(tmp_path, time_limit_s=5)
    # a smaller warm start than the preset's keeps this test to a couple of minutes; table programs
    # need more tokens than the preset's 72
    r = subprocess.run([sys.executable, str(ROOT / "train.py"), "experiment=smoke", f"task.files=[{task_file}]",
                        "task.train=[penguins]", "task.eval=[iris]", "policy.sft_examples=600",
                        "generation.max_new_tokens=150", f"run_dir={tmp_path}/runs",
                        f"logger.tracking_uri=sqlite:///{tmp_path}/mlruns.db", f"task.cache_dir={session_cache}",
                        "trainer.progress_bar=false"], cwd=tmp_path, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-4000:]
    assert list((session_cache / "leaderboards").glob("penguins-*.json"))
    run_dir = next((tmp_path / "runs").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["cost/real_executions"] >= 0
    from wmrl.domains.research.sandbox import read_log

    train = [row for row in read_log(run_dir / "executions.sqlite") if row["meta"].get("purpose") == "train"]
    assert train and {row["outcome"]["task"] for row in train} == {"penguins"}
