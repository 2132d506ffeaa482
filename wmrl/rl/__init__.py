"""The GRPO math: group advantages and the clipped policy loss (pure functions on tensors)."""
from wmrl.rl.advantages import group_advantages
from wmrl.rl.loss import policy_loss, token_entropy

__all__ = ["group_advantages", "policy_loss", "token_entropy"]
