"""The built-in policy's tokenizer: byte-level BPE trained offline on the task prompts,
grammar programs and feedback texts, so that it needs nothing from a hub."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from wmrl.policy.chat import BUILTIN_TEMPLATE

SPECIAL = ["<|pad|>", "<|end|>", "<|user|>", "<|assistant|>", "<|unk|>"]


def train_tokenizer(corpus: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<|unk|>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|end|>",
                                   unk_token="<|unk|>", chat_template=BUILTIN_TEMPLATE)


def cached_tokenizer(corpus: list[str], vocab_size: int, cache_dir: Path) -> PreTrainedTokenizerFast:
    """Train once per (corpus, vocab) and reuse: the warm-start checkpoint depends on its ids."""
    key = hashlib.sha256(json.dumps([vocab_size, corpus]).encode()).hexdigest()[:16]
    path = Path(cache_dir).expanduser() / "tokenizers" / key
    if (path / "tokenizer.json").exists():
        return PreTrainedTokenizerFast.from_pretrained(str(path))
    tok = train_tokenizer(corpus, vocab_size)
    path.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(path))
    return tok
