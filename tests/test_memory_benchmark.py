"""benchmarks/memory.py's parts and scripts/gpu_check.py's logic, on the CPU (the GPU run needs a device)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import memory  # noqa: E402


def test_one_case_reports_memory_and_time_and_the_arms_differ_in_the_path():
    case = {"model": "builtin", "arm": "after", "kind": "builtin", "spec": {}, "checkpoint": False,
            "overrides": [], "rows": 2, "tokens": 64, "steps": 2}
    after = memory.run_case(case)
    assert after["peak_rss_gb"] > 0 and after["s_per_step"] > 0 and after["vocab"] == 2048
    args = type("A", (), {"quick": False, "gemma": "/x/gemma", "rows": 2, "tokens": 64, "steps": 2})()
    cases = memory.cases(args)
    by = {(c["model"], c["arm"]): c for c in cases}
    assert by[("builtin", "before")]["overrides"] == ["rl.logprob_chunk_mb=0"]
    assert ("builtin", "logprobs") not in by  # the built-in policy has no checkpoint defaults to separate
    assert "policy.checkpoint.lora_rank=0" in by[("gemma3-270M-v262k", "logprobs")]["overrides"]
    assert by[("gemma3-270M-v262k", "after")]["overrides"] == []
    table = memory.table([{**after, "model": "builtin", "arm": "before"}, {**after, "model": "builtin", "arm": "after"},
                          {"model": "x", "arm": "before", "error": "rc=-9 killed"}])
    assert "1.00x" in table and "failed" in table


def test_gpu_check_sees_the_update_in_the_generator_on_cpu(tmp_path, session_cache):
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), f"task.cache_dir={session_cache}",
                        "generation.max_new_tokens=16"], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["device"] == "cpu" and out["backend"] == "hf" and out["weights_synced"] is True
