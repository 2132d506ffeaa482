"""The run's `last.ckpt`, written after every RL step, with the rollout's state under the project's own key."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Checkpoint

ROLLOUT_KEY = "rollout"  # checkpoint["wmrl"][ROLLOUT_KEY]: what a resume rewinds the execution log by


class StepCheckpoint(Checkpoint):
    """Saves `dirpath/last.ckpt` at the end of every RL step (a `Checkpoint`, so Lightning runs it after the
    other callbacks). Lightning's ModelCheckpoint counts optimizer steps: a step whose update was skipped
    (every group tied) wrote no checkpoint, and a resume replayed it. Written to a temporary file and renamed,
    so a kill mid-write leaves the previous checkpoint whole.

    The datamodule's state is also kept in `checkpoint["wmrl"]["rollout"]` and restored from there: the key
    Lightning uses for it (the class's qualified name) is Lightning's to change, and a resume that cannot find
    it must fail loudly rather than replay executions the log already holds."""

    def __init__(self, dirpath: str | Path):
        self.dirpath = Path(dirpath)

    @property
    def last(self) -> Path:
        return self.dirpath / "last.ckpt"

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        tmp = self.dirpath / ".last.ckpt.tmp"
        trainer.save_checkpoint(tmp)  # every rank calls it (a collective); rank 0 writes
        if trainer.is_global_zero:
            os.replace(tmp, self.last)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        checkpoint.setdefault("wmrl", {})[ROLLOUT_KEY] = trainer.datamodule.state_dict()

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        trainer.datamodule.load_state_dict(rollout_state(checkpoint, "the checkpoint"))


class ResumeError(RuntimeError):
    """A checkpoint a run cannot resume from exactly."""


def rollout_state(checkpoint: dict, where: str) -> dict:
    """The rollout's state a checkpoint holds, or a ResumeError saying why it cannot be resumed."""
    state = checkpoint.get("wmrl", {}).get(ROLLOUT_KEY)
    if state is None:
        raise ResumeError(f"{where} holds no rollout state (checkpoint['wmrl']['{ROLLOUT_KEY}']): the execution log "
                          "cannot be rewound to it, and resuming would log executions twice; start a new run instead")
    return state
