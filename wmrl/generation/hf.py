"""Batched sampling with a transformers model: the CPU path, and a GPU path without vLLM.

A plain prefill + cached decode loop over the model's forward, rather than `generate()`: on a
small policy `generate()`'s per-token bookkeeping costs ~25x the forward itself, and this loop
also yields each sampled token's log-prob directly.
"""
from __future__ import annotations

import inspect

import torch

from wmrl import stop
from wmrl.generation.base import Completion


class HFGenerator:
    def __init__(self, model, tokenizer, eos_ids: list[int], chunk: int = 128, memory_mb: int = 512):
        """`chunk`: most rows sampled at once; fewer where a row's prefill and decode would take more than
        `memory_mb` / `chunk` (see `rows_per_chunk`)."""
        self.model, self.tok, self.eos_ids, self.chunk, self.memory_mb = model, tokenizer, eos_ids, chunk, memory_mb
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"  # renamed in transformers 5
        # the head on the last position only. As an index tensor, not the int 1: the int slices the hidden states
        # ([n, 1, H], not contiguous), and torch's CPU linear on such a view with a frozen bf16 weight (LoRA) takes
        # ~0.6 s per row and 16 bytes per weight transiently (Gemma 3's 262k head: 4.7 s and 2.7 GB for an 8-row
        # prefill, 22 s for 32); an index tensor gathers a contiguous copy (0.04 s, nothing extra)
        self._keep_last = "logits_to_keep" in params

    def sync_weights(self, model) -> None:
        self.model = model  # same object as the trained policy: nothing to copy

    @torch.no_grad()
    def generate(self, prompts, *, temperature, top_p, max_new_tokens, seed) -> list[Completion]:
        gen = torch.Generator(device=next(self.model.parameters()).device).manual_seed(seed)
        was_training = self.model.training
        self.model.eval()
        try:
            out: list[Completion] = []
            chunk = self.rows_per_chunk(max((len(p) for p in prompts), default=1) + max_new_tokens)
            for start in range(0, len(prompts), chunk):
                stop.check()  # a stop need not wait for every chunk of an evaluation
                out += self._sample(prompts[start:start + chunk], temperature, top_p, max_new_tokens, gen)
            return out
        finally:
            self.model.train(was_training)

    def rows_per_chunk(self, width: int) -> int:
        """Rows sampled at once within `memory_mb`: a row costs ~16 bytes per vocabulary entry (the float32
        logits of a decode step and their softmax, cdf and copies) and ~64 per prompt token and hidden unit
        (the prefill's activations and the cache). Measured on Gemma 3 270M (262k vocabulary, 640 hidden,
        ~330-token prompts): 17 MB per row, so 64 rows at once took +1.07 GB and 35 s, 16 at a time none
        extra and 22 s. A small model's rows are cheap: it keeps `chunk` (the built-in policy: 128)."""
        config = self.model.config
        vocab = int(getattr(config, "vocab_size", 0) or 0)
        hidden = int(getattr(config, "hidden_size", 0) or 0)
        row = 16 * vocab + 64 * width * hidden
        return max(1, min(self.chunk, (self.memory_mb << 20) // max(1, row)))

    def _forward(self, ids, mask, pos, cache):
        kwargs = {"input_ids": ids, "attention_mask": mask, "position_ids": pos, "use_cache": True}
        if self._keep_last:
            kwargs["logits_to_keep"] = torch.tensor([ids.shape[1] - 1], device=ids.device)
        if cache is not None:
            kwargs[self._cache_kw] = cache
        out = self.model(**kwargs)
        return out.logits[:, -1].float(), out[self._cache_kw]

    def _sample(self, prompts, temperature, top_p, max_new_tokens, gen) -> list[Completion]:
        device = next(self.model.parameters()).device
        width, n = max(len(p) for p in prompts), len(prompts)
        pad = self.tok.pad_token_id
        ids = torch.full((n, width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):  # left padding: every row's next token is at the end
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        ids, mask = ids.to(device), mask.to(device)
        pos = (mask.cumsum(1) - 1).clamp_min(0)
        eos = torch.tensor(self.eos_ids, device=device)
        logits, cache = self._forward(ids, mask, pos, None)
        done = torch.zeros(n, dtype=torch.bool, device=device)
        tokens, logps = [], []
        for _ in range(max_new_tokens):
            logp = torch.log_softmax(logits / max(temperature, 1e-4), dim=-1)
            tok = _draw(_top_p(logp, top_p).exp(), gen)
            tok = torch.where(done, torch.full_like(tok, pad), tok)
            tokens.append(tok)
            logps.append(logp.gather(1, tok[:, None]).squeeze(1))
            done |= torch.isin(tok, eos)
            if bool(done.all()):
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            pos = pos[:, -1:] + 1
            logits, cache = self._forward(tok[:, None], mask, pos, cache)
        toks = torch.stack(tokens, 1).cpu().tolist()
        lps = torch.stack(logps, 1).cpu().tolist()
        completions = []
        for row, lp in zip(toks, lps):
            end = next((j for j, t in enumerate(row) if t in self.eos_ids), None)
            k = len(row) if end is None else end + 1
            completions.append(Completion(row[:k], lp[:k], end is not None))
        return completions


def _draw(probs: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One token per row with probability `probs` (rows need not sum to 1), by the inverse of the cumulative
    distribution: one uniform number per row. `torch.multinomial` draws one exponential number per vocabulary
    entry instead: 70 ms per decode step of 8 rows over Gemma 3's 262k vocabulary on a CPU core, a third of
    the step; this takes 3 ms. A token of probability 0 (cut by top-p) is never drawn."""
    cdf = probs.float().cumsum(-1)
    total = cdf[:, -1:]
    u = torch.rand(total.shape, generator=gen, device=probs.device, dtype=cdf.dtype) * total
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))  # < total: some entry's cdf exceeds it
    return torch.searchsorted(cdf, u, right=True).squeeze(1)


def _top_p(logp: torch.Tensor, top_p: float) -> torch.Tensor:
    """Log-probs with the tail outside the smallest set of mass ≥ top_p removed (renormalised)."""
    if top_p >= 1.0:
        return logp
    sorted_lp, order = logp.sort(dim=-1, descending=True)
    keep = sorted_lp.exp().cumsum(-1) - sorted_lp.exp() < top_p
    masked = torch.full_like(logp, -float("inf")).scatter(-1, order, torch.where(keep, sorted_lp, -float("inf")))
    return torch.log_softmax(masked, dim=-1)
