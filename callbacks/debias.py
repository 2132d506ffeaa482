"""Online debiasing as a Lightning callback: learn from new anchor pairs, then correct WM rewards."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from lightning.pytorch import Callback
from lightning.pytorch.loggers import MLFlowLogger

from wmrl.corrections import Debiaser
from wmrl.rollout import RolloutBatch


class DebiasCallback(Callback):
    """Before the loss of every batch: the Debiaser learns from the batch's anchor pairs, then the
    training reward of every WM-only trajectory becomes its corrected WM score, and its
    `reward_var` the variance of that corrected score. Anchored rows keep their real reward.
    The same Debiaser is handed to the environment (it corrects the score shown to the agent)
    and to denoising (it calibrates anchor scores), so all three see one fit.

    Logs debias/pairs, debias/bias_global, debias/strata (strata with their own fit) and, on steps
    with anchors, debias/mae_before and debias/mae_after (out of sample: the fit before those
    pairs). Every `table_every` batches and at the end of training the per-stratum table goes to
    MLflow as debias/strata_step_N.md when an MLFlowLogger is attached.
    """

    def __init__(self, debiaser: Debiaser, table_every: int = 10):
        self.debiaser, self.table_every = debiaser, table_every
        self.batches = 0

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: RolloutBatch, batch_idx: int) -> None:
        keys = self.debiaser.keys_of(batch.strata, len(batch))
        idx, wm, real = batch.anchor_pairs
        before, after = self.debiaser.update(wm.detach().cpu().numpy(), real.detach().cpu().numpy(),
                                             None if keys is None else [keys[i] for i in idx.tolist()])
        rows = torch.nonzero(batch.wm_only).flatten()
        if len(rows):
            corrected = self.debiaser.correct(batch.wm_reward[rows].detach().cpu().numpy(),
                                              None if keys is None else [keys[i] for i in rows.tolist()])
            reward = batch.reward.clone()  # never write through an alias of wm_reward
            reward[rows] = torch.as_tensor(corrected, dtype=reward.dtype, device=reward.device)
            batch.reward = reward
            # the variance of a corrected score is the WM's variance times the map's local slope squared:
            # where the map flattens, WM noise no longer reaches the reward (denoising reads this)
            if self.debiaser.method == "isotonic":  # an offset is a shift: slope 1
                slope = self.local_slope(batch.wm_reward[rows].detach().cpu().numpy(),
                                         None if keys is None else [keys[i] for i in rows.tolist()])
                var = batch.reward_var.clone()
                var[rows] = batch.wm_var[rows] * torch.as_tensor(slope**2, dtype=var.dtype, device=var.device)
                batch.reward_var = var

        metrics = {"debias/pairs": float(self.debiaser.pairs), "debias/bias_global": self.debiaser.bias(),
                   "debias/strata": float(sum(fit.n > 0 for fit in self.debiaser.strata.values()))}
        if len(before):
            metrics["debias/mae_before"] = float(np.abs(before).mean())
            metrics["debias/mae_after"] = float(np.abs(after).mean())
        pl_module.log_dict(metrics, on_step=True, on_epoch=False, batch_size=len(batch))

        self.batches += 1
        if self.table_every and self.batches % self.table_every == 0:
            self.save_table(trainer)

    def local_slope(self, wm: np.ndarray, keys: list[tuple] | None, h: float = 0.05) -> np.ndarray:
        """d(corrected)/d(wm) by a central difference over ±h (the isotonic map is a step function)."""
        wm = np.clip(wm, 0.0, 1.0)  # an injected or extreme score still gets a two-sided difference
        hi, lo = np.clip(wm + h, 0.0, 1.0), np.clip(wm - h, 0.0, 1.0)
        return (self.debiaser.correct(hi, keys) - self.debiaser.correct(lo, keys)) / np.maximum(hi - lo, 1e-9)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.save_table(trainer)

    def table_markdown(self) -> str:
        head = "| stratum | n | pairs | bias | resid_before | resid_after |\n|---|---|---|---|---|---|\n"
        return head + "".join(f"| {r['stratum']} | {r['n']:.1f} | {r['pairs']} | {r['bias']:+.4f} | "
                              f"{r['resid_before']:+.4f} | {r['resid_after']:+.4f} |\n" for r in self.debiaser.table())

    def save_table(self, trainer: Any) -> None:
        """Write the per-stratum table to every MLflow logger of the trainer."""
        for logger in trainer.loggers:
            if isinstance(logger, MLFlowLogger):
                logger.experiment.log_text(logger.run_id, self.table_markdown(),
                                           f"debias/strata_step_{trainer.global_step}.md")

    def state_dict(self) -> dict:
        return {"debiaser": self.debiaser.state_dict(), "batches": self.batches}

    def load_state_dict(self, state_dict: dict) -> None:
        self.debiaser.load_state_dict(state_dict["debiaser"])
        self.batches = int(state_dict["batches"])
