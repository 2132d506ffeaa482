"""How well predicted rewards agree with real ones on anchor pairs: the one definition the world model's
`wm/...` metrics (`reward_fidelity`) and the anchor budget's `env/recent_...` metrics (and its adaptive rate)
both read."""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torchmetrics.functional import spearman_corrcoef


def fidelity(pred, real, std=None, *, z: float = 2.0, min_pairs: int = 1) -> dict[str, float]:
    """{pairs, spearman, mae, coverage} over the pairs where neither side is NaN (a real NaN: an infra error).

    coverage: the share of real rewards inside pred ± z·std (NaN without stds); spearman: NaN with fewer
    than 2 pairs or either side constant; every measure NaN with fewer than `min_pairs` pairs."""
    pred, real = _flat(pred), _flat(real)
    keep = ~torch.isnan(pred) & ~torch.isnan(real)
    n = int(keep.sum())
    out = {"pairs": float(n), "spearman": math.nan, "mae": math.nan, "coverage": math.nan}
    if n == 0 or n < min_pairs:
        return out
    pred, real = pred[keep], real[keep]
    err = (pred - real).abs()
    out["mae"] = float(err.mean())
    if std is not None:
        out["coverage"] = float((err <= z * _flat(std)[keep]).double().mean())
    if n >= 2 and float(pred.std()) > 0 and float(real.std()) > 0:
        out["spearman"] = float(spearman_corrcoef(pred.float(), real.float()))
    return out


def reward_fidelity(pred_reward, pred_var, real_reward, pred_status: Sequence | None = None,
                    real_status: Sequence | None = None) -> dict[str, float]:
    """The world model's `wm/...` metrics on anchor pairs: Spearman and MAE of reward, coverage of the ±2σ
    interval, status accuracy (statuses compared as the domain's values; NaN without them)."""
    pred, real = _flat(pred_reward), _flat(real_reward)
    std = _flat(pred_var).clamp_min(0.0).sqrt()
    f = fidelity(pred, real, std, z=2.0)
    out = {"wm/spearman": f["spearman"], "wm/mae": f["mae"], "wm/coverage_2sigma": f["coverage"],
           "wm/status_acc": math.nan, "wm/pairs": f["pairs"]}
    if pred_status is not None and real_status is not None:
        keep = (~torch.isnan(real) & ~torch.isnan(pred)).tolist()
        same = [p == r for p, r, k in zip(pred_status, real_status, keep) if k]
        if same:
            out["wm/status_acc"] = sum(same) / len(same)
    return out


def proxy_vs_real(proxy, real, classes) -> dict[str, float]:
    """One step's anchors: the mean of the reward the policy trains on (the corrected world-model score, out of
    sample), the mean real reward and their paired gap, each with the half-width of its 95 % normal interval
    (`proxy/...`), and the gap per action class (`proxy/gap/<class>`). Logged every step, they show what reward-model
    over-optimisation looks like: the proxy climbing while the real reward stalls."""
    proxy, real = _flat(proxy), _flat(real)
    keep = ~torch.isnan(proxy) & ~torch.isnan(real)
    classes = [c for c, k in zip(classes, keep.tolist()) if k]
    proxy, real = proxy[keep], real[keep]
    out: dict[str, float] = {}

    def put(prefix: str, rows: torch.Tensor, names=("wm_mean", "real_mean", "gap")) -> None:
        for name, x in (("wm_mean", proxy[rows]), ("real_mean", real[rows]), ("gap", proxy[rows] - real[rows])):
            if name not in names:
                continue
            out[f"proxy/{name}{prefix}"] = float(x.mean())
            if len(x) >= 2:
                out[f"proxy/{name}_ci95{prefix}"] = 1.96 * float(x.std()) / math.sqrt(len(x))

    if len(proxy):
        put("", torch.ones(len(proxy), dtype=torch.bool))
        for c in sorted(set(classes)):
            put(f"/{c}", torch.tensor([x == c for x in classes]), names=("gap",))
    return out


def _flat(x) -> torch.Tensor:
    return torch.as_tensor(x, dtype=torch.float64).flatten()
