"""The policy network: a tiny causal LM built from a transformers config, or a real checkpoint."""
from __future__ import annotations

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


def load_pretrained(name_or_path: str):
    """A Hugging Face checkpoint with its own tokenizer and chat template (local files only)."""
    tok = AutoTokenizer.from_pretrained(name_or_path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if tok.chat_template is None:
        raise ValueError(f"{name_or_path}: tokenizer has no chat template; wmrl needs one for multi-turn prompts")
    model = AutoModelForCausalLM.from_pretrained(name_or_path, torch_dtype=torch.float32)
    model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok
