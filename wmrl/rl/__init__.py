"""The GRPO math: group advantages and the clipped policy loss (pure functions on tensors)."""
from wmrl.rl.advantages import group_advantages, group_reward_std
from wmrl.rl.loss import dr_grpo_normaliser, policy_loss, token_entropy

__all__ = ["dr_grpo_normaliser", "group_advantages", "group_reward_std", "policy_loss", "token_entropy"]
