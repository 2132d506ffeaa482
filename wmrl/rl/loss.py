"""The clipped policy-gradient loss of GRPO and Dr. GRPO, computed per token."""
from __future__ import annotations

import torch

from wmrl.config import RLConfig  # defaults live in the schema

LOSS_TYPES = ("grpo", "dr_grpo")


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp_min(1.0)


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    weight: torch.Tensor | None = None,
    clip_eps: float = RLConfig.clip_eps,
    loss_type: str = "grpo",
    ref_logprobs: torch.Tensor | None = None,
    kl_beta: float = RLConfig.kl_beta,
    max_tokens: int | None = None,
    kl_ratio: bool = True,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-clipped surrogate on every generated token, reduced per sequence, then over sequences.

    Per token: -min(ρ·A, clip(ρ, 1-ε, 1+ε)·A) with ρ = exp(logπ - logπ_old), plus
    kl_beta · ρ · k3(π‖π_ref) when a reference is given (k3 = e^{Δ} - Δ - 1, Δ = logπ_ref - logπ,
    always ≥ 0). The tokens were sampled from π_old, so E_{π_old}[ρ·k3] = KL(π‖π_ref), and its
    gradient ρ·(logπ - logπ_ref)·∇logπ is the true gradient of KL(π‖π_ref) even on-policy;
    without ρ (`kl_ratio=False`, TRL's `use_bias_correction_kl=False`) the gradient of E[k3] is
    that of the reverse KL(π_ref‖π). Per sequence: "grpo" averages over its own generated tokens,
    so long sequences count no more than short ones; "dr_grpo" sums and divides by one constant
    `max_tokens` (the generation budget, `dr_grpo_normaliser`), removing GRPO's length bias; a
    batch-dependent divisor (its longest completion) would rescale every step differently, so it
    is required. Each sequence's loss is
    multiplied by its `weight` (denoising); the loss is the mean over sequences that have at least
    one generated token (rows dropped with an empty mask do not dilute it).

    Returns (loss, stats) with stats clip_fraction (tokens whose gradient the clip removed),
    approx_kl (k3 of the sampling policy to the current one), ratio_mean and kl (to the
    reference; 0 without one), all detached and averaged over generated tokens.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}; got {loss_type!r}")
    if loss_type == "dr_grpo" and not max_tokens:
        raise ValueError("dr_grpo needs max_tokens, a constant (max_new_tokens × turns: dr_grpo_normaliser)")
    mask = loss_mask.to(logprobs.dtype)
    log_ratio = (logprobs - old_logprobs) * mask  # padding may hold arbitrary log-probs; exp(0) = 1 there
    ratio = log_ratio.exp()
    adv = advantages.to(logprobs.dtype)[:, None]
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps)
    per_token = -torch.min(ratio * adv, clipped * adv)

    kl = torch.zeros_like(per_token)
    if ref_logprobs is not None:
        delta = (ref_logprobs - logprobs) * mask
        kl = delta.exp() - delta - 1.0
        if kl_ratio:
            kl = kl * ratio
        per_token = per_token + kl_beta * kl

    if loss_type == "grpo":
        per_seq = (per_token * mask).sum(1) / mask.sum(1).clamp_min(1.0)
    else:
        per_seq = (per_token * mask).sum(1) / float(max_tokens)
    if weight is not None:
        per_seq = per_seq * weight.to(per_seq.dtype)
    has_tokens = (mask.sum(1) > 0).to(per_seq.dtype)
    loss = (per_seq * has_tokens).sum() / has_tokens.sum().clamp_min(1.0)

    with torch.no_grad():
        clip_active = ((ratio < 1.0 - clip_eps) & (adv < 0)) | ((ratio > 1.0 + clip_eps) & (adv > 0))
        stats = {
            "clip_fraction": _masked_mean(clip_active.to(mask.dtype), mask),
            "approx_kl": _masked_mean(ratio - 1.0 - log_ratio, mask),
            "ratio_mean": _masked_mean(ratio, mask),
            "kl": _masked_mean(kl.detach(), mask),
        }
    return loss, stats


def dr_grpo_normaliser(max_new_tokens: int, turns: int) -> int:
    """Dr. GRPO's constant divisor: the most tokens a trajectory can generate (all its turns)."""
    return int(max_new_tokens) * max(1, int(turns))


def token_entropy(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean entropy (nats) of the next-token distribution [N, T, V] over masked positions [N, T]."""
    entropy = next_token_entropy(logits)
    return _masked_mean(entropy, mask.to(entropy.dtype))


def next_token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each position's next-token distribution: [..., V] -> [...]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)
