"""A local Hugging Face chat checkpoint built from a config (random weights; nothing downloaded), for
running `policy.model=DIR` and `world_model.kind=prompted world_model.model=DIR` without a hub.

    python benchmarks/local_checkpoint.py DIR [--hidden 768 --layers 14 --heads 12 --vocab 4096 --arch qwen2]

Its tokenizer is byte-level BPE trained on the built-in tasks' prompts, grammar programs, feedback
lines and the prompted world model's prompts and answers; its chat template is ChatML. The defaults
make a ~100M-parameter Qwen2-style model. Prints the parameter count.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def corpus(seed: int = 0) -> list[str]:
    from wmrl.config import load_config
    from wmrl.domains.research.outcome import PREDICTED_STATUSES
    from wmrl.domains.research import grammar
    from wmrl.domains.research.domain import tokenizer_corpus
    from wmrl.domains.research.tasks import load_suite
    from wmrl.domains.research.world_model.base import WMQuery
    from wmrl.domains.research.world_model.prompted import SYSTEM, user_message

    import random

    suite = load_suite(load_config([]).task)
    tasks = suite.train_tasks() + suite.eval_tasks()
    texts = tokenizer_corpus(tasks, seed)
    rng = random.Random(seed)
    for t in tasks:
        src = grammar.sample_program(t.kind, rng, 0.2).source
        texts.append(SYSTEM + "\n" + user_message(WMQuery(t.name, t.descriptor(), src), 5))
    for s in PREDICTED_STATUSES:
        for q in range(5):
            texts.append(json.dumps({"status": s.value, "quality": q, "confidence": 0.5, "error": ""}))
    return texts


def make(out: Path, hidden: int, layers: int, heads: int, vocab: int, arch: str, seed: int = 0) -> int:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from wmrl.policy.model import build_policy

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tok.train_from_iterator(corpus(seed), trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<|im_end|>",
                                     chat_template=CHATML)
    torch.manual_seed(seed)
    model = build_policy(SimpleNamespace(hidden_size=hidden, layers=layers, heads=heads, max_length=4096, arch=arch),
                         len(hf_tok), hf_tok.pad_token_id, hf_tok.eos_token_id)
    model.save_pretrained(out)
    hf_tok.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=14)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--arch", default="qwen2", choices=["qwen2", "llama"])
    a = ap.parse_args()
    n = make(a.out, a.hidden, a.layers, a.heads, a.vocab, a.arch)
    print(json.dumps({"path": str(a.out), "parameters": n}))


if __name__ == "__main__":
    main()
