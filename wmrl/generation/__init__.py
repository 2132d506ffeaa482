"""Generators: how the policy's completions are sampled (HF `generate` on CPU/GPU, vLLM on GPU)."""
from __future__ import annotations

from wmrl.generation.base import Completion, Generator, WeightSync


def make_generator(gen_cfg, model, tokenizer, eos_ids: list[int]) -> Generator:
    if gen_cfg.backend == "hf":
        from wmrl.generation.hf import HFGenerator

        return HFGenerator(model, tokenizer, eos_ids)
    if gen_cfg.backend == "vllm":
        from wmrl.generation.vllm import VLLMGenerator  # optional extra, GPU only

        return VLLMGenerator(model, tokenizer, eos_ids)
    raise ValueError(f"generation.backend must be hf or vllm, got {gen_cfg.backend!r}")


__all__ = ["Completion", "Generator", "WeightSync", "make_generator"]
