"""Multi-process training (Lightning DDP, one process per device): which rank this process is, and the
collectives that keep every rank's learned state identical.

Each rank collects its own share of a step's groups. Whatever learns from a batch (debiasing, denoising's
s², the world model, the anchor budget) learns from every rank's rows, gathered in rank order, so all
ranks hold the same state after each step; the policy's gradient is summed over ranks. Outside a process
group (one process) every collective is the identity, so a 1-process run is unchanged.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

RUN_ENV = "WMRL_DDP_RUN"  # rank 0 hands its run directory and checkpoint to the processes Lightning starts


def world_size(trainer_cfg: Any) -> int:
    """Processes the trainer config asks for: `trainer.devices` under a ddp strategy, else 1."""
    devices = str(trainer_cfg.devices)
    if str(trainer_cfg.strategy).startswith("ddp") and devices.isdigit():
        return max(1, int(devices))
    return 1


def rank() -> int:
    """This process's rank, known before Lightning starts the others (it sets LOCAL_RANK in theirs)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def _group() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def gather(obj: Any) -> list:
    """Every rank's `obj` (picklable), in rank order; [obj] outside a process group."""
    if not _group():
        return [obj]
    import torch.distributed as dist

    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def all_sum(value: float) -> float:
    """The sum of `value` over ranks; `value` outside a process group."""
    return float(sum(gather(float(value))))


def sum_gradients(params: Sequence[Any]) -> None:
    """Replace each parameter's gradient by its sum over ranks (missing gradients count as 0)."""
    if not _group():
        return
    import torch
    import torch.distributed as dist

    params = [p for p in params if p.requires_grad]
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    dist.all_reduce(flat)
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset:offset + n].view_as(p).clone()
        offset += n


def shard(items: Sequence[Any], rank_: int, world: int) -> list:
    """This rank's share of a step's items: every world-th, starting at its rank."""
    return list(items[rank_::world])


# How a step's per-rank statistics (`RolloutBatch.stats`) become one value. Rates are never summed: each is
# carried as a (numerator, denominator) pair of counts and divided once the counts are summed over ranks.
RATES = {"wm/malformed_rate": ("wm/malformed_answers", "wm/answers")}
MISSING = "ddp/missing_metrics"  # (rank, metric) pairs a rank lacked, under DDP only


def combine_stats(ranks: Sequence[dict]) -> dict:
    """One step's statistics from every rank's: `time/*` the slowest rank's, rates from the summed counts
    (absent when no rank had a denominator), everything else a count summed over the ranks that have it.
    A metric some rank lacks is never a crash: it is combined over the others and counted in MISSING."""
    keys = list(dict.fromkeys(k for r in ranks for k in r))
    parts = {k for pair in RATES.values() for k in pair}
    out: dict = {}
    for k in keys:
        if k in parts:
            continue
        values = [r[k] for r in ranks if k in r]
        out[k] = max(values) if k.startswith("time/") else sum(values)
    for rate, (num, den) in RATES.items():
        total = sum(r.get(den, 0) for r in ranks)
        if total:
            out[rate] = sum(r.get(num, 0) for r in ranks) / total
    if len(ranks) > 1:
        out[MISSING] = float(sum(k not in r for r in ranks for k in keys))
    return out
