"""Test scaffolding for tests/test_ddp.py: the real module, correction, world-model, budget and cost callbacks
trained by Lightning on synthetic rollout batches, in N processes (ddp, gloo on CPU) or one.

    python tests/ddp_run.py OUT DEVICES STEPS [--stop-after K] [--resume CKPT]

A step's data is 4 groups of 4 trajectories, a fixed function of (step, group) with class-dependent WM
bias; groups 0 and 1 are anchors. Rank r of N plays groups r, r+N, ... (as `distributed.shard` shares them
out); one process plays them in the order the ranks' rows are gathered (rank 0's, then rank 1's), so both
see the same union. Each rank writes OUT/rank{r}.pt: policy weights, corrections' and world model's state,
the metrics it logged per step.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger
from torch.utils.data import DataLoader, IterableDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from callbacks import (AnchorBudgetCallback, CostCallback, DebiasCallback, DenoiseCallback, WorldModelCallback,  # noqa: E402
                       step_of)
from callbacks.checkpoint import StepCheckpoint  # noqa: E402
from wmrl.config import DebiasConfig, DenoiseConfig, EnvConfig, PolicyConfig, RLConfig, WorldModelConfig  # noqa: E402
from wmrl.anchoring import AnchorBudget  # noqa: E402
from wmrl.corrections import Debiaser  # noqa: E402
from wmrl.module import WMRLModule  # noqa: E402
from wmrl.domains.research.domain import ResearchDomain  # noqa: E402
from wmrl.domains.research.outcome import Outcome, Status  # noqa: E402
from wmrl.policy.model import build_policy  # noqa: E402
from wmrl.rollout import Source, RolloutBatch  # noqa: E402
from wmrl.rollout.types import Judgement, TrajectoryRecord, Turn  # noqa: E402
from wmrl.domains.research.world_model import make_world_model  # noqa: E402

GROUPS, SIZE, T, PROMPT, VOCAB = 4, 4, 12, 4, 64
ANCHORED = (0, 1)
WM_ANSWERED = 3
BIAS = {"forest": 0.25, "linear": -0.1}  # the WM over-rates one class: debiasing has something to learn


def batch_of(step: int, groups: list[int]) -> RolloutBatch:
    """The rows of `groups` of `step`, group ids renumbered 0.. in the order given."""
    rows = []
    for local, g in enumerate(groups):
        rng = np.random.default_rng(1000 * step + g)
        for _ in range(SIZE):
            cls = "forest" if rng.random() < 0.5 else "linear"
            real = float(rng.uniform(0.1, 1.0))
            wm = float(np.clip(real + BIAS[cls] + rng.normal(0, 0.05), 0, 1))
            rows.append((local, g, cls, real, wm, rng.integers(1, VOCAB, T)))
    n = len(rows)
    anchor = torch.tensor([g in ANCHORED for _, g, *_ in rows])
    real = torch.tensor([r if g in ANCHORED else math.nan for _, g, _, r, _, _ in rows])
    wm = torch.tensor([w for *_, w, _ in rows])
    var = torch.full((n,), 0.01)
    loss_mask = torch.zeros(n, T)
    loss_mask[:, PROMPT:] = 1.0
    records = [TrajectoryRecord("toy", local, g in ANCHORED, g in ANCHORED, [Turn(
        f"def build():\n    return {cls}({i})\n", cls,
        Judgement(real=Outcome("toy", Status.VALID, "accuracy", value=r, pos=2 * r - 1 if r > 0.5 else 0.0,
                               reward=r) if g in ANCHORED else None,
                  wm_reward=w, wm_var=0.01, wm_status=Status.VALID, observation="ok", observed=Source.WM))])
               for i, (local, g, cls, r, w, _) in enumerate(rows)]
    b = RolloutBatch(
        input_ids=torch.tensor(np.stack([t for *_, t in rows])), attention_mask=torch.ones(n, T, dtype=torch.long),
        loss_mask=loss_mask, old_logprobs=torch.full((n, T), -4.0) * loss_mask,
        group_ids=torch.tensor([local for local, *_ in rows]), reward=torch.where(anchor, real, wm),
        real_reward=real, wm_reward=wm, wm_var=var, reward_var=torch.where(anchor, torch.zeros(n), var),
        source=torch.where(anchor, int(Source.REAL), int(Source.WM)), is_anchor=anchor, valid=torch.ones(n, dtype=torch.bool),
        weight=torch.ones(n), strata={"task": ["toy"] * n, "action_class": [c for _, _, c, *_ in rows],
                                      "status": ["valid"] * n}, records=records,
        stats={"time/rollout_s": 0.0, "cost/real_executions": float(anchor.sum()), "cost/sandbox_slot_s": 0.0,
               # the world model answered for group 3 alone (1 of its 4 answers unparsable): rank 0 has no such metric
               **({"wm/malformed_answers": 1, "wm/answers": SIZE} if WM_ANSWERED in groups else {})})
    return b


class Data(L.LightningDataModule):
    def __init__(self, steps: int):
        super().__init__()
        self.steps, self.next_step = steps, 0

    def groups(self) -> list[int]:
        world, rank = self.trainer.world_size, self.trainer.global_rank
        if world == 1:
            return [g for r in range(2) for g in range(r, GROUPS, 2)]  # the 2-rank gather order
        return list(range(rank, GROUPS, world))

    def train_dataloader(self):
        dm = self

        class Stream(IterableDataset):
            def __len__(self):
                return dm.steps

            def __iter__(self):
                while dm.next_step < dm.steps:
                    step, dm.next_step = dm.next_step, dm.next_step + 1
                    b = batch_of(step, dm.groups())
                    b.step, b.collected_at = step, time.perf_counter()
                    yield b

        return DataLoader(Stream(), batch_size=None)

    def state_dict(self):
        return {"next_step": self.next_step}

    def load_state_dict(self, state):
        self.next_step = state["next_step"]


class Recorder(Logger):
    """Every metric logged, on every rank."""

    def __init__(self):
        super().__init__()
        self.metrics: dict[int, dict] = {}

    name, version = "recorder", 0

    @property
    def experiment(self):
        return None

    def log_metrics(self, metrics, step=None):
        self.metrics.setdefault(step, {}).update(metrics)

    def log_hyperparams(self, params, *args, **kwargs):
        pass


class StopAfter(Callback):
    def __init__(self, k: int):
        self.k = k

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if pl_module.rl_step >= self.k:
            trainer.should_stop = True


class Toy:
    name, metric, interface = "toy", "accuracy", "estimator"

    def descriptor(self):
        return "task=toy kind=classification n=100 d=4 metric=accuracy"


class Suite:
    def get(self, name):
        return Toy()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("devices", type=int)
    p.add_argument("steps", type=int)
    p.add_argument("--stop-after", type=int, default=0)
    p.add_argument("--resume", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    L.seed_everything(0, verbose=False)
    torch.manual_seed(0)
    policy = build_policy(PolicyConfig(hidden_size=32, layers=1, heads=2, max_length=T), VOCAB, 0, 1)
    rl = RLConfig(micro_batch_size=3, lr=1e-3)  # uneven micro-batches: ranks run different numbers of backward passes
    module = WMRLModule(policy, rl, temperature=1.0, seed=0, max_completion_tokens=T)
    debiaser = Debiaser.from_config(DebiasConfig(min_pairs=4, refit_every=4))
    denoise = DenoiseCallback.from_config(DenoiseConfig(method="anchor_upweight"))
    wm = make_world_model(WorldModelConfig(members=2, d_model=16, layers=1, heads=2, updates_per_step=2, batch_size=8,
                                           max_tokens=32), seed=0)
    budget = AnchorBudget.from_config(EnvConfig(adaptive_rate=True))
    recorder = Recorder()
    callbacks = [DebiasCallback(debiaser), denoise, WorldModelCallback(ResearchDomain(Suite(), world_model=wm)), AnchorBudgetCallback(budget),
                 CostCallback(), StepCheckpoint(Path(args.out) / "ckpt")]
    module.step = step_of(callbacks, update=module.update)
    if args.stop_after:
        callbacks.append(StopAfter(args.stop_after))
    trainer = L.Trainer(accelerator="cpu", devices=args.devices, strategy="ddp" if args.devices > 1 else "auto",
                        max_epochs=1, logger=recorder, callbacks=callbacks, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0, log_every_n_steps=1)
    trainer.fit(module, datamodule=Data(args.steps), ckpt_path=args.resume)
    torch.save({"policy": {k: v.detach().clone() for k, v in policy.state_dict().items()},
                "debiaser": debiaser.state_dict(), "s2": denoise.s2, "world_model": wm.state_dict(),
                "budget": budget.state_dict(), "metrics": recorder.metrics, "rl_step": module.rl_step,
                "world": trainer.world_size}, Path(args.out) / f"rank{trainer.global_rank}.pt")


if __name__ == "__main__":
    main()
