"""How well the world model's reward agrees with real execution, on anchor pairs.

`wm/spearman` is NaN when it is undefined (fewer than 2 pairs, or either side constant);
every other key is NaN only with no pairs at all. Pairs whose real reward is NaN
(infra_error) are dropped.
"""
from __future__ import annotations

import math
from typing import Sequence

from wmrl.fidelity import reward_fidelity
from wmrl.domains.research.outcome import PREDICTED_STATUSES, Outcome, Status


def fidelity_metrics(prediction, outcomes: Sequence[Outcome]) -> dict[str, float]:
    """`reward_fidelity` of a `WMPrediction` against the real outcomes of the same queries."""
    pred_status = [PREDICTED_STATUSES[i] for i in prediction.status_probs.argmax(-1).tolist()]
    real = [o.reward if o.reward is not None else math.nan for o in outcomes]
    keep_status = [o.status if o.status is not Status.INFRA_ERROR else None for o in outcomes]
    pairs = [(p, r) for p, r in zip(pred_status, keep_status) if r is not None]
    out = reward_fidelity(prediction.reward_mean, prediction.reward_var, real)
    if pairs:
        out["wm/status_acc"] = sum(p == r for p, r in pairs) / len(pairs)
    return out
