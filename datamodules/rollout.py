"""The rollout DataModule: one batch per RL step, collected with the policy's current weights.

The DataModule owns the step counter of data collection: it collects for step k, k+1, ... from
where the checkpoint it was restored from left off, and pushes the policy's weights into the
generator before each collection. Rollout logic itself lives in `wmrl.rollout`.
"""
from __future__ import annotations

import random
import time

import lightning as L
from torch.utils.data import DataLoader, IterableDataset

from wmrl.generation import WeightSync
from wmrl.rollout.collect import Rollout
from wmrl.seeding import stream_seed
from wmrl.step import Handoff


class _Stream(IterableDataset):
    """One rollout batch per remaining training step; sized, so Lightning does not prefetch
    (a prefetched rollout would be sampled from weights one update old)."""

    def __init__(self, dm: "RolloutDataModule"):
        self.dm = dm

    def __len__(self) -> int:  # all steps: a resumed fit restores the count of those already trained
        return self.dm.steps

    def __iter__(self):
        while self.dm.next_step < self.dm.steps:
            yield self.dm.collect()


class RolloutDataModule(L.LightningDataModule):
    def __init__(self, rollout: Rollout, sync: WeightSync, train_tasks: list, groups_per_step: int, group_size: int,
                 steps: int, seed: int, async_anchors: bool, handoff: Handoff | None = None):
        """`handoff`: what each step leaves the next collection (`Step.handoff`, the same object)."""
        super().__init__()
        self.rollout, self.sync, self.train_tasks, self.groups_per_step = rollout, sync, train_tasks, groups_per_step
        self.group_size, self.steps, self.seed, self.async_anchors = group_size, steps, seed, async_anchors
        self.handoff = Handoff() if handoff is None else handoff
        self.next_step = 0  # the step the next batch is collected for

    def collect(self):
        """The batch of step `next_step` (counted before it is handed out: a checkpoint written while
        that step trains resumes at the step after it)."""
        step = self.next_step
        self.next_step += 1
        t0 = time.perf_counter()
        self.sync(step)
        batch = self.rollout.collect_train(step, self.sample_tasks(step), self.group_size,
                                           defer=self.async_anchors and step < self.steps - 1, handoff=self.handoff)
        batch.step, batch.collected_at = step, time.perf_counter()
        batch.stats["time/rollout_s"] = batch.collected_at - t0
        return batch

    def sample_tasks(self, step: int) -> list:
        """Task prompts of a step: a fixed function of (seed, step), so data order survives resume."""
        rng = random.Random(stream_seed(self.seed, step, "tasks"))
        return [rng.choice(self.train_tasks) for _ in range(self.groups_per_step)]

    def train_dataloader(self):
        return DataLoader(_Stream(self), batch_size=None, num_workers=0)

    def state_dict(self) -> dict:
        return {"next_step": self.next_step, **self.rollout.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.next_step = state_dict["next_step"]
        self.rollout.load_state_dict(state_dict)
