"""How well the world model's reward agrees with real execution, on anchor pairs.

`wm/spearman` is NaN when it is undefined (fewer than 2 pairs, or either side constant);
every other key is NaN only with no pairs at all. Pairs whose real reward is NaN
(infra_error) are dropped.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

from wmrl.fidelity import fidelity
from wmrl.domains.research.outcome import PREDICTED_STATUSES, Outcome, Status


def reward_fidelity(pred_reward, pred_var, real_reward, pred_status: Sequence | None = None,
                    real_status: Sequence | None = None) -> dict[str, float]:
    """Spearman and MAE of reward, coverage of the +-2 sigma interval (`wmrl.fidelity`), status accuracy."""
    pred, real = (torch.as_tensor(x, dtype=torch.float64).flatten() for x in (pred_reward, real_reward))
    std = torch.as_tensor(pred_var, dtype=torch.float64).flatten().clamp_min(0.0).sqrt()
    f = fidelity(pred, real, std, z=2.0)
    out = {"wm/spearman": f["spearman"], "wm/mae": f["mae"], "wm/coverage_2sigma": f["coverage"],
           "wm/status_acc": math.nan, "wm/pairs": f["pairs"]}
    if pred_status is not None and real_status is not None:
        keep = (~torch.isnan(real) & ~torch.isnan(pred)).tolist()
        same = [Status(p) == Status(r) for p, r, k in zip(pred_status, real_status, keep) if k]
        if same:
            out["wm/status_acc"] = sum(same) / len(same)
    return out


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
