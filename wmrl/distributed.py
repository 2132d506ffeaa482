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
