"""Anchoring: where a run spends its real executions. Which trajectories become anchors (random groups, or by
the world model's uncertainty or predicted advantage, with inclusion probabilities), how many (fixed, or
adaptive from the world model's recent fidelity), and which classes must be executed whatever the budget
(the reward-hacking guard). Routing, not a correction: the corrections (`wmrl.corrections`) learn from the
anchors this package chooses."""
from wmrl.anchoring.budget import AnchorBudget
from wmrl.anchoring.guard import RewardHackingGuard
from wmrl.anchoring.selection import (adaptive_anchor_rate, anchor_scores, choose_anchor_groups, inclusion_probabilities,
                                      predicted_advantage, select_anchors)

__all__ = ["AnchorBudget", "RewardHackingGuard", "adaptive_anchor_rate", "anchor_scores", "choose_anchor_groups",
           "inclusion_probabilities", "predicted_advantage", "select_anchors"]
