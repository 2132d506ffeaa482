"""The two corrections as pure estimators (no Lightning): debiasing maps and denoising weights. Where real
executions are spent (anchors, their rate, the guard) is `wmrl.anchoring`."""
from wmrl.corrections.isotonic import IsotonicMap, apply_isotonic, crossfit_isotonic, fit_isotonic
from wmrl.corrections.offset import OffsetRectifier
from wmrl.corrections.strata import Debiaser
from wmrl.corrections.turns import aggregate_turns, best_turn, correct_turns, turn_pairs
from wmrl.corrections.weights import (anchor_upweight_weights, inverse_variance_weights,
                                      within_group_residual_s2)

__all__ = ["Debiaser", "IsotonicMap", "OffsetRectifier", "aggregate_turns", "anchor_upweight_weights", "apply_isotonic",
           "best_turn", "correct_turns", "crossfit_isotonic", "fit_isotonic", "inverse_variance_weights", "turn_pairs",
           "within_group_residual_s2"]
