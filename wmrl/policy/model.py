"""The policy network: a tiny causal LM built from a transformers config, or a real checkpoint."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, Qwen2Config


def build_policy(cfg, vocab_size: int, pad_id: int, eos_id: int) -> torch.nn.Module:
    """A small Qwen2- or Llama-style model sized by `policy.*` (weights initialised from the seed)."""
    kwargs = dict(
        vocab_size=vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.hidden_size * 3,
        num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads,
        max_position_embeddings=cfg.max_length, tie_word_embeddings=True, pad_token_id=pad_id,
        eos_token_id=eos_id, bos_token_id=None,
    )
    config = Qwen2Config(**kwargs) if cfg.arch == "qwen2" else LlamaConfig(**kwargs)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.pad_token_id = pad_id
    return model


def resolve_dtype(name: str) -> torch.dtype:
    """`policy.dtype`: auto = bfloat16 where matmuls have bf16 units (a CUDA GPU that supports it; a CPU with
    AVX512-BF16 or AMX, where they run ~10x float32's speed), else float32."""
    if name == "float32":
        return torch.float32
    if name == "bfloat16":
        return torch.bfloat16
    if torch.cuda.is_available():
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    fast = getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)() or getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()
    return torch.bfloat16 if fast else torch.float32


def load_pretrained(name_or_path: str, dtype: torch.dtype = torch.float32):
    """A Hugging Face checkpoint with its own tokenizer and chat template (local files only)."""
    tok = AutoTokenizer.from_pretrained(name_or_path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if tok.chat_template is None:
        raise ValueError(f"{name_or_path}: tokenizer has no chat template; wmrl needs one for multi-turn prompts")
    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype)
    model.generation_config.pad_token_id = tok.pad_token_id
    # from_pretrained returns the model in eval mode; it is trained, so train mode on purpose (Lightning warns
    # "Found N module(s) in eval mode at the start of training" otherwise). Generation switches to eval itself.
    model.train()
    return model, tok


def checkpoint_fingerprint(name_or_path: str) -> str:
    """What identifies a local checkpoint's contents for caches (its files' names, sizes and times), so that
    a checkpoint rebuilt at the same path is not served a stale warm start; a hub id stands for itself."""
    root = Path(name_or_path)
    if not root.is_dir():
        return name_or_path
    files = sorted((str(p.relative_to(root)), p.stat().st_size, int(p.stat().st_mtime)) for p in root.rglob("*") if p.is_file())
    return json.dumps([str(root.resolve()), files])


def prepare_for_training(model: torch.nn.Module, cfg) -> torch.nn.Module:
    """LoRA adapters (`policy.lora_rank` > 0: only they train, through peft) and gradient checkpointing,
    as `policy.*` asks. Returns the same kind of transformers model (adapters injected in place), so
    generation, checkpoints and the loss see nothing different."""
    if cfg.lora_rank > 0:
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                          target_modules=list(cfg.lora_targets), task_type="CAUSAL_LM")
        with warnings.catch_warnings():  # peft reads transformers' deprecated `is_gradient_checkpointing`
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            model = get_peft_model(model, lora).get_base_model()  # base weights frozen, adapters trainable
    if cfg.gradient_checkpointing:
        # non-reentrant: works when the inputs' embeddings are frozen (LoRA)
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model

