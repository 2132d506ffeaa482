"""`policy.model=<path>` trains a Hugging Face checkpoint with its own tokenizer and chat template."""
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from wmrl.policy.chat import ChatFormat
from wmrl.policy.model import build_policy, load_pretrained
from wmrl.sandbox import read_log

ROOT = Path(__file__).resolve().parent.parent
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def make_checkpoint(path: Path) -> None:
    """A tiny local checkpoint whose tokenizer uses ChatML, unlike the built-in one."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tok.train_from_iterator(["def build():\n    return RandomForestClassifier()\n", "system user assistant"] * 20,
                            trainers.BpeTrainer(vocab_size=400, special_tokens=["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<|im_end|>",
                                     chat_template=CHATML)
    cfg = SimpleNamespace(hidden_size=32, layers=1, heads=2, max_length=1024, arch="llama")
    model = build_policy(cfg, len(hf_tok), hf_tok.pad_token_id, hf_tok.eos_token_id)
    model.save_pretrained(path)
    hf_tok.save_pretrained(path)


def test_pretrained_checkpoint_keeps_its_own_chat_template(tmp_path):
    make_checkpoint(tmp_path / "ckpt")
    model, tok = load_pretrained(str(tmp_path / "ckpt"))
    chat = ChatFormat(tok)
    assert not chat.builtin
    prompt = tok.decode(chat.prompt_ids("Task: iris"))
    assert prompt.startswith("<|im_start|>system") and prompt.endswith("<|im_start|>assistant\n")
    obs = tok.decode(chat.observation_ids(chat.observation_text("status: valid")))
    assert obs.startswith("<|im_start|>user\nstatus: valid") and obs.endswith("<|im_start|>assistant\n")
    assert tok.convert_tokens_to_ids("<|im_end|>") in chat.eos_ids


def test_train_runs_a_local_checkpoint_end_to_end(tmp_path, session_cache):
    make_checkpoint(tmp_path / "ckpt")
    r = subprocess.run([sys.executable, str(ROOT / "train.py"), "experiment=smoke", f"policy.model={tmp_path}/ckpt",
                        "policy.warm_start=false", "rl.steps=2", "eval.at_start=false", "generation.max_new_tokens=24",
                        f"run_dir={tmp_path}/runs", f"logger.tracking_uri=sqlite:///{tmp_path}/ml.db",
                        f"task.cache_dir={session_cache}", "trainer.progress_bar=false"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = next((tmp_path / "runs").iterdir())
    log = read_log(run_dir / "executions.sqlite")
    assert {row["meta"]["purpose"] for row in log} == {"train", "eval"}  # it generated, was judged, evaluated
    assert (run_dir / "checkpoints" / "last.ckpt").exists()
