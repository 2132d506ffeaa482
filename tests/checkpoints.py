"""Local Hugging Face chat checkpoints built from a config (no hub, no download), for tests."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from wmrl.policy.model import build_policy

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CORPUS = ["def build():\n    return RandomForestClassifier()\n", "system user assistant",
          '{"status": "valid", "quality": 3, "confidence": 0.5, "error": ""}']


def make_checkpoint(path: Path, hidden_size: int = 32, layers: int = 1, heads: int = 2, vocab_size: int = 400,
                    arch: str = "llama", corpus: list[str] | None = None) -> Path:
    """A local checkpoint whose tokenizer uses ChatML, unlike the built-in one; random weights."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tok.train_from_iterator((corpus or CORPUS) * 20,
                            trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<|im_end|>",
                                     chat_template=CHATML)
    cfg = SimpleNamespace(hidden_size=hidden_size, layers=layers, heads=heads, max_length=2048, arch=arch)
    model = build_policy(cfg, len(hf_tok), hf_tok.pad_token_id, hf_tok.eos_token_id)
    model.save_pretrained(path)
    hf_tok.save_pretrained(path)
    return Path(path)
