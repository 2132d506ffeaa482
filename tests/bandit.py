"""A synthetic bandit that runs the WMRL corrections end to end, without a language model or sandbox.

Each arm stands for one program the agent could write; arms fall into classes (model families).
A trajectory is one pull: one "token", the arm. The world model scores a pull as
true reward + a bias that depends on the arm's class + heteroscedastic noise, and reports its
predictive variance; anchor groups are also executed for real. Batches are `RolloutBatch`es,
and training goes through the same callbacks, `group_advantages` and `policy_loss` as the
trainer, so the bandit shows what the corrections buy: a class-dependent WM bias steers raw
GRPO to the wrong arm, stratified debiasing recovers the best arm, and inverse-variance weights
make the gradient estimate less noisy.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
from lightning.pytorch import Callback

from wmrl.rollout import Source, RolloutBatch
from wmrl.rl import group_advantages, policy_loss


@dataclass
class Bandit:
    true_reward: list[float]  # per arm: what a real execution scores, on average
    arm_class: list[str]  # per arm: its stratum (action_class)
    class_bias: dict[str, float]  # the WM's error on every arm of a class
    wm_noise_std: list[float]  # per arm: std of the WM's score around (true + bias); the WM knows it
    real_noise_std: float = 0.02  # a real execution's own noise

    @property
    def best_arm(self) -> int:
        return max(range(len(self.true_reward)), key=self.true_reward.__getitem__)


def default_bandit() -> Bandit:
    """Nine arms in three classes. The WM overrates forests by 0.3, enough to make the forest arm 1
    the best-looking arm although linear arm 3 is truly best; noisy arms are noisy in the WM only."""
    return Bandit(
        true_reward=[0.45, 0.65, 0.30, 0.80, 0.55, 0.40, 0.70, 0.50, 0.35],
        arm_class=["forest"] * 3 + ["linear"] * 3 + ["boost"] * 3,
        class_bias={"forest": 0.30, "linear": 0.0, "boost": -0.05},
        wm_noise_std=[0.05, 0.05, 0.40, 0.05, 0.40, 0.40, 0.40, 0.05, 0.40],
    )


def sample_batch(bandit: Bandit, logits: torch.Tensor, groups: int, group_size: int, anchor_rate: float,
                 gen: torch.Generator) -> RolloutBatch:
    """One step of rollouts: `groups` groups of `group_size` pulls; round(anchor_rate·groups) anchor groups."""
    n = groups * group_size
    with torch.no_grad():
        logp = torch.log_softmax(logits, 0)
    arms = torch.multinomial(logp.exp(), n, replacement=True, generator=gen)
    group_ids = torch.arange(n) // group_size
    anchor_groups = torch.randperm(groups, generator=gen)[: round(anchor_rate * groups)]
    is_anchor = torch.isin(group_ids, anchor_groups)

    true = torch.tensor(bandit.true_reward)[arms]
    bias = torch.tensor([bandit.class_bias[bandit.arm_class[a]] for a in arms.tolist()])
    wm_std = torch.tensor(bandit.wm_noise_std)[arms]
    wm = true + bias + wm_std * torch.randn(n, generator=gen)
    real = torch.where(is_anchor, true + bandit.real_noise_std * torch.randn(n, generator=gen), torch.tensor(float("nan")))
    return RolloutBatch(
        input_ids=arms[:, None], attention_mask=torch.ones(n, 1, dtype=torch.long), loss_mask=torch.ones(n, 1),
        old_logprobs=logp[arms][:, None], group_ids=group_ids, reward=torch.where(is_anchor, real, wm),
        real_reward=real, wm_reward=wm, wm_var=wm_std**2, reward_var=torch.where(is_anchor, 0.0, wm_std**2),
        source=torch.where(is_anchor, int(Source.REAL), int(Source.WM)), is_anchor=is_anchor,
        valid=torch.ones(n, dtype=torch.bool), weight=torch.ones(n),
        strata={"action_class": [bandit.arm_class[a] for a in arms.tolist()], "task": ["bandit"] * n},
    )


class MetricLog:
    """Stands in for the LightningModule's `log`/`log_dict`: keeps the last value of every name."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}

    def log(self, name: str, value: float, **_: object) -> None:
        self.last[name] = float(value)

    def log_dict(self, metrics: dict[str, float], **_: object) -> None:
        self.last.update({k: float(v) for k, v in metrics.items()})


def loss_on_batch(logits: torch.Tensor, batch: RolloutBatch, callbacks: Sequence[Callback], step: int,
                  metrics: MetricLog, scale: str = "group") -> torch.Tensor:
    """What the trainer does per batch: the step's corrections (`callbacks.step_of`), then advantages and the
    clipped loss."""
    from callbacks import step_of

    batch, logged = step_of(callbacks, update=lambda b: {})(batch)
    metrics.log_dict(logged)
    adv = group_advantages(batch.reward, batch.group_ids, batch.weight, batch.valid, scale=scale)
    logp = torch.log_softmax(logits, 0)[batch.input_ids]
    loss, _ = policy_loss(logp, batch.old_logprobs, adv, batch.loss_mask, weight=batch.weight)
    return loss


@dataclass
class BanditRun:
    probs: list[float]  # final policy
    greedy_arm: int  # the arm the final policy prefers
    true_value: list[float] = field(default_factory=list)  # expected true reward of the policy, per step
    metrics: dict[str, float] = field(default_factory=dict)  # last values the callbacks logged


def train(bandit: Bandit, callbacks: Sequence[Callback] = (), steps: int = 150, groups: int = 8, group_size: int = 8,
          anchor_rate: float = 0.25, lr: float = 0.1, seed: int = 0, scale: str = "group") -> BanditRun:
    """GRPO on tabular softmax logits, one Adam update per batch."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    logits = torch.zeros(len(bandit.true_reward), requires_grad=True)
    opt = torch.optim.Adam([logits], lr=lr)
    true = torch.tensor(bandit.true_reward)
    metrics, curve = MetricLog(), []
    for step in range(steps):
        batch = sample_batch(bandit, logits, groups, group_size, anchor_rate, gen)
        opt.zero_grad()
        loss_on_batch(logits, batch, callbacks, step, metrics, scale).backward()
        opt.step()
        curve.append(float(torch.softmax(logits.detach(), 0) @ true))
    probs = torch.softmax(logits.detach(), 0)
    return BanditRun(probs.tolist(), int(probs.argmax()), curve, metrics.last)


def gradient_variance(bandit: Bandit, callbacks: Sequence[Callback], logits: torch.Tensor | None = None,
                      batches: int = 300, groups: int = 8, group_size: int = 8, anchor_rate: float = 0.25,
                      seed: int = 0, scale: str = "group") -> dict[str, float]:
    """Spread of the policy-gradient estimate at fixed logits over many independent batches.

    Returns trace(Cov[g]) (total variance), |E g|² and their ratio (noise-to-signal); the same
    seed gives the same batches, so two callback lists are compared on identical rollouts.
    """
    gen = torch.Generator().manual_seed(seed)
    logits = torch.zeros(len(bandit.true_reward)) if logits is None else logits.detach().clone()
    logits.requires_grad_(True)
    metrics, grads = MetricLog(), []
    for step in range(batches):
        batch = sample_batch(bandit, logits, groups, group_size, anchor_rate, gen)
        (grad,) = torch.autograd.grad(loss_on_batch(logits, batch, callbacks, step, metrics, scale), logits)
        grads.append(grad)
    g = torch.stack(grads)
    variance, signal = float(g.var(0).sum()), float(g.mean(0).pow(2).sum())
    return {"variance": variance, "signal": signal, "noise_to_signal": variance / signal}
