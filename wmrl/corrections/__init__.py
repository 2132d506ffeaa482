"""The two corrections as pure estimators (no Lightning): debiasing maps and denoising weights,
and where to spend real executions (anchor selection, anchor rate, the reward-hacking guard)."""
from wmrl.corrections.anchors import (adaptive_anchor_rate, anchor_scores, inclusion_probabilities,
                                      select_anchors)
from wmrl.corrections.budget import AnchorBudget
from wmrl.corrections.guard import RewardHackingGuard
from wmrl.corrections.isotonic import IsotonicMap, apply_isotonic, crossfit_isotonic, fit_isotonic
from wmrl.corrections.offset import OffsetRectifier
from wmrl.corrections.strata import Debiaser
from wmrl.corrections.turns import aggregate_turns, best_turn, correct_turns, turn_pairs
from wmrl.corrections.weights import (anchor_upweight_weights, inverse_variance_weights,
                                      within_group_residual_s2)

__all__ = ["AnchorBudget", "Debiaser", "IsotonicMap", "OffsetRectifier", "RewardHackingGuard", "adaptive_anchor_rate",
           "aggregate_turns", "anchor_scores", "anchor_upweight_weights", "apply_isotonic",
           "best_turn", "correct_turns", "crossfit_isotonic", "fit_isotonic",
           "inclusion_probabilities", "inverse_variance_weights", "select_anchors", "turn_pairs",
           "within_group_residual_s2"]
