"""The frozen causal LM behind the prompted world model: greedy answers, and the log-likelihood of
given answers after a shared prompt. On transformers (CPU or GPU) or on a vLLM engine (GPU, optional
extra, imported only when asked for; tests/test_prompted_world_model.py checks it against a fake engine).
"""
from __future__ import annotations

import inspect
from typing import Protocol

import torch


class FrozenLM(Protocol):
    tokenizer: object

    def complete(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """Greedy continuation of each prompt (token ids), up to an end-of-turn id."""

    def score(self, items: list[tuple[list[int], list[list[int]]]]) -> list[list[list[float]]]:
        """For each (prefix, answers): the log-prob of every token of every answer, given the prefix."""


def end_ids(tokenizer) -> list[int]:
    """Ids that end an answer: the tokenizer's end of sequence and the usual end-of-turn markers."""
    ids = {tokenizer.eos_token_id}
    for t in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"):
        i = tokenizer.convert_tokens_to_ids(t)
        if isinstance(i, int) and i >= 0 and i != tokenizer.unk_token_id:
            ids.add(i)
    return sorted(i for i in ids if i is not None)


def load_frozen(name_or_path: str, backend: str) -> FrozenLM:
    """The checkpoint at `name_or_path` (local files), frozen, on `backend` (hf | vllm)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(name_or_path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if backend == "vllm":
        return VLLMFrozenLM(name_or_path, tok)
    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch.float32)
    return HFFrozenLM(model.to("cuda" if torch.cuda.is_available() else "cpu"), tok)


class HFFrozenLM:
    """transformers: greedy answers through the policy's own sampling loop; scoring runs the prefix
    once and all its answers as one batch on top of its cached keys and values."""

    def __init__(self, model, tokenizer):
        from wmrl.generation.hf import HFGenerator

        self.model = model.eval().requires_grad_(False)
        self.tokenizer = tokenizer
        self.generator = HFGenerator(self.model, tokenizer, end_ids(tokenizer))
        self._cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def complete(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        # temperature -> 0 is argmax (the generator divides logits by max(t, 1e-4))
        outs = self.generator.generate(prompts, temperature=0.0, top_p=1.0, max_new_tokens=max_new_tokens, seed=0)
        return [c.token_ids for c in outs]

    @torch.inference_mode()
    def score(self, items: list[tuple[list[int], list[list[int]]]]) -> list[list[list[float]]]:
        return [self._score_one(prefix, answers) for prefix, answers in items]

    def _score_one(self, prefix: list[int], answers: list[list[int]]) -> list[list[float]]:
        device = next(self.model.parameters()).device
        cache_kw = self._cache_kw
        out = self.model(input_ids=torch.tensor([prefix], device=device), use_cache=True)
        first = out.logits[0, -1].float().log_softmax(-1)  # distribution of every answer's first token
        cache = out[cache_kw]
        n, width = len(answers), max(len(a) for a in answers)
        cache.batch_repeat_interleave(n)
        ids = torch.full((n, width), self.tokenizer.pad_token_id, dtype=torch.long, device=device)
        for i, a in enumerate(answers):  # right padding: pads come after every answer token, causally unseen
            ids[i, :len(a)] = torch.tensor(a, device=device)
        mask = torch.ones((n, len(prefix) + width), dtype=torch.long, device=device)
        pos = torch.arange(len(prefix), len(prefix) + width, device=device).expand(n, -1)
        logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                            **{cache_kw: cache}).logits.float()
        lp = logits.log_softmax(-1)
        rows = []
        for i, a in enumerate(answers):
            rest = lp[i, torch.arange(len(a) - 1, device=device), ids[i, 1:len(a)]] if len(a) > 1 else lp.new_zeros(0)
            rows.append([float(first[a[0]])] + rest.tolist())
        return rows


class VLLMFrozenLM:
    """A vLLM engine with prefix caching: every query's answers share its prompt's cached blocks."""

    def __init__(self, name_or_path: str, tokenizer, gpu_memory_utilization: float = 0.25):
        try:
            import vllm
        except ImportError as e:  # pragma: no cover - depends on the machine
            raise ImportError("world_model.backend=vllm needs the optional extra on a GPU machine: "
                              "pip install 'wmrl[vllm]'") from e
        self._vllm, self.tokenizer = vllm, tokenizer
        self.end_ids = end_ids(tokenizer)
        self.llm = vllm.LLM(model=name_or_path, gpu_memory_utilization=gpu_memory_utilization,
                            enable_prefix_caching=True, dtype="auto")

    def complete(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        params = self._vllm.SamplingParams(temperature=0.0, max_tokens=max_new_tokens, stop_token_ids=self.end_ids)
        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]

    def score(self, items: list[tuple[list[int], list[list[int]]]]) -> list[list[list[float]]]:
        # one token generated (discarded); prompt_logprobs=0 returns each prompt token's own log-prob
        params = self._vllm.SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0)
        flat = [(prefix, a) for prefix, answers in items for a in answers]
        outs = self.llm.generate([{"prompt_token_ids": prefix + a} for prefix, a in flat], params, use_tqdm=False)
        rows = iter([[o.prompt_logprobs[len(prefix) + k][t].logprob for k, t in enumerate(a)]
                     for o, (prefix, a) in zip(outs, flat)])
        return [[next(rows) for _ in answers] for _, answers in items]
