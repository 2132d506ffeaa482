"""Batched sampling with transformers' `generate`: the CPU path, and a GPU path without vLLM."""
from __future__ import annotations

import torch

from wmrl.generation.base import Completion


class HFGenerator:
    def __init__(self, model, tokenizer, eos_ids: list[int], chunk: int = 64):
        self.model, self.tok, self.eos_ids, self.chunk = model, tokenizer, eos_ids, chunk

    def sync_weights(self, model) -> None:
        self.model = model  # same object as the trained policy: nothing to copy

    @torch.no_grad()
    def generate(self, prompts, *, temperature, top_p, max_new_tokens, seed) -> list[Completion]:
        out: list[Completion] = []
        gen = torch.Generator().manual_seed(seed)
        for start in range(0, len(prompts), self.chunk):
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
            out += self._generate(prompts[start:start + self.chunk], temperature, top_p, max_new_tokens)
        return out

    def _generate(self, prompts, temperature, top_p, max_new_tokens) -> list[Completion]:
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        pad = self.tok.pad_token_id
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):  # left padding: every row's next token is at the end
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        was_training = self.model.training
        self.model.eval()
        res = self.model.generate(
            input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=True,
            temperature=max(temperature, 1e-4), top_p=top_p, top_k=0, max_new_tokens=max_new_tokens,
            eos_token_id=self.eos_ids, pad_token_id=pad, output_logits=True, return_dict_in_generate=True,
        )
        self.model.train(was_training)
        new = res.sequences[:, width:].cpu()
        logits = torch.stack(res.logits, dim=1).float().cpu() / max(temperature, 1e-4)  # [B, S, V]
        logp = torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        completions = []
        for i in range(len(prompts)):
            row = new[i].tolist()
            end = next((j for j, t in enumerate(row) if t in self.eos_ids), None)
            n = len(row) if end is None else end + 1
            completions.append(Completion(row[:n], logp[i, :n].tolist(), end is not None))
        return completions
