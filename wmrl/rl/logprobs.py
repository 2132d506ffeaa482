"""Log-probs of the taken tokens, and the entropy, without a full [batch, tokens, vocab] float32 tensor.

The plain way (the model's logits, a log-softmax, a gather) holds several [B, T, V] copies at once; with a
262k vocabulary, 1024 tokens and 16 rows each one is 17 GB. Here the decoder's last hidden states go
through the output head a slice of positions at a time, in one autograd function (`_HeadLogProbs`, a
selective log-softmax): forward keeps each slice's hidden states and log-sum-exp only, and backward
recomputes the slice's logits and turns them into the softmax's gradient in place. Peak memory is about
one slice's logits, `chunk_mb` megabytes, and each slice takes few passes over them: on a 262k vocabulary
those passes, not the matmuls, are most of the time. Only the positions a loss reads need the head
(`positions`).

A model whose head is not a plain projection of the decoder's output (soft-capped or scaled logits) is
detected once, by comparing the sliced logits with the model's own on a short input, and gets the full path.
"""
from __future__ import annotations

import warnings
import weakref

import torch

from wmrl.rl.loss import token_entropy

_HEAD_OK: "weakref.WeakKeyDictionary[torch.nn.Module, bool]" = weakref.WeakKeyDictionary()


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float,
                   entropy_mask: torch.Tensor | None = None, chunk_mb: float = 256.0,
                   positions: torch.Tensor | None = None):
    """(log π(token_t | tokens_<t) at every position t ≥ 1, position 0 getting 0, aligned with input_ids;
    the mean next-token entropy over `entropy_mask`'s positions, or None). `positions` ([B, T] bool, aligned
    with input_ids): the head runs there only and every other position gets 0 — a loss that masks the prompt
    and the feedback need not pay the vocabulary projection for them. `chunk_mb` ≤ 0: the full path."""
    if chunk_mb <= 0 or not _sliceable(model):
        return _full(model, input_ids, attention_mask, temperature, entropy_mask)
    hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    rows, width = input_ids.shape[0], input_ids.shape[1] - 1
    where = (torch.ones((rows, width), dtype=torch.bool, device=input_ids.device) if positions is None
             else positions[:, 1:].bool())
    hidden, targets = hidden[:, :-1][where], input_ids[:, 1:][where]  # [N, H], [N]: the positions that count
    weights = entropy_mask[:, 1:][where] if entropy_mask is not None else None
    head = model.get_output_embeddings()
    step = max(1, int(chunk_mb * 2**20 // (4 * head.out_features)))  # positions per slice
    parts, ent_sum = [], hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, len(targets), step):
        h, t = hidden[start:start + step], targets[start:start + step]
        picked, ent = _HeadLogProbs.apply(h, head.weight, head.bias, t, float(temperature), weights is not None)
        parts.append(picked)
        if weights is not None:
            ent_sum = ent_sum + (ent * weights[start:start + step]).sum()
    picked = torch.cat(parts) if parts else hidden.new_zeros((0,), dtype=torch.float32)
    lp = hidden.new_zeros((rows, width), dtype=torch.float32).masked_scatter(where, picked)
    lp = torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)
    entropy = None
    if entropy_mask is not None:
        entropy = ent_sum / entropy_mask[:, 1:].sum().clamp_min(1)
    return lp, entropy


class _HeadLogProbs(torch.autograd.Function):
    """log softmax((h Wᵀ + b) / T) at `targets`, and (not differentiated) each row's entropy. The [n, V]
    logits are not kept for backward: it recomputes them from h and the saved log-sum-exp."""

    @staticmethod
    def forward(ctx, h, weight, bias, targets, temperature: float, with_entropy: bool):
        z = _logits(h, weight, bias, temperature)
        lse = torch.logsumexp(z, dim=-1)
        picked = z.gather(1, targets[:, None]).squeeze(1) - lse
        entropy = z.new_zeros((0,))
        if with_entropy:
            logp = z.sub_(lse[:, None])  # z is not needed any more
            entropy = -(logp.exp().mul_(logp)).sum(-1)
        ctx.save_for_backward(h, weight, bias, targets, lse)
        ctx.temperature = temperature
        ctx.mark_non_differentiable(entropy)
        return picked, entropy

    @staticmethod
    def backward(ctx, grad_picked, _grad_entropy):
        h, weight, bias, targets, lse = ctx.saved_tensors
        t = ctx.temperature
        # d picked_i / d z_ij = (onehot_ij - softmax_ij) / T, built in the recomputed logits' storage
        g = _logits(h, weight, bias, t).sub_(lse[:, None]).exp_()
        g.scatter_add_(1, targets[:, None], -torch.ones_like(lse[:, None]))
        g = g.mul_((-grad_picked / t)[:, None]).to(h.dtype)
        grad_h = g @ weight if ctx.needs_input_grad[0] else None
        grad_w = g.t() @ h if ctx.needs_input_grad[1] else None
        grad_b = g.sum(0) if bias is not None and ctx.needs_input_grad[2] else None
        return grad_h, grad_w, grad_b, None, None, None


def _logits(h, weight, bias, temperature: float) -> torch.Tensor:
    """A fresh float32 [n, V] tensor (safe to change in place)."""
    z = torch.nn.functional.linear(h, weight, bias)
    z = z.float() if z.dtype != torch.float32 else z
    return z.div_(temperature) if temperature != 1.0 else z


def _full(model, input_ids, attention_mask, temperature, entropy_mask):
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits[:, :-1].float() / temperature
    lp = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    lp = torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)
    entropy = None
    if entropy_mask is not None:
        with torch.no_grad():
            entropy = token_entropy(logits.detach(), entropy_mask[:, 1:])
    return lp, entropy


def _sliceable(model) -> bool:
    """Whether the model's logits are its output head applied to its decoder's last hidden states (checked
    once per model on a short input, in eval mode so that dropout does not differ)."""
    if model in _HEAD_OK:
        return _HEAD_OK[model]
    ok = False
    try:
        decoder, head = model.get_decoder(), model.get_output_embeddings()
        if decoder is not None and isinstance(head, torch.nn.Linear):
            device = head.weight.device
            ids = torch.arange(min(8, head.out_features), device=device)[None] % head.out_features
            attn = torch.ones_like(ids)
            was = model.training
            model.eval()
            try:
                with torch.no_grad():
                    want = model(input_ids=ids, attention_mask=attn, use_cache=False).logits.float()
                    got = head(decoder(input_ids=ids, attention_mask=attn, use_cache=False).last_hidden_state).float()
            finally:
                model.train(was)
            ok = want.shape == got.shape and torch.allclose(want, got, atol=1e-4, rtol=1e-4)
    except (AttributeError, NotImplementedError, TypeError):
        ok = False
    if not ok:
        warnings.warn(f"{type(model).__name__}: logits are not the output head of the decoder's states; "
                      "log-probs take the full [batch, tokens, vocab] path", stacklevel=3)
    _HEAD_OK[model] = ok
    return ok
