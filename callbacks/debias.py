"""Online debiasing, the step's `debias` stage (`wmrl.step`): learn from new anchor pairs, then correct WM
rewards. A Lightning callback for its checkpointed state and its MLflow table; dropping it drops the stage."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch
from lightning.pytorch import Callback
from lightning.pytorch.loggers import MLFlowLogger

from wmrl import distributed
from wmrl.config import DebiasConfig  # defaults live in the schema
from wmrl.corrections import Debiaser, aggregate_turns, best_turn, correct_turns, turn_pairs
from wmrl.strata import stratum_keys
from wmrl.rollout import RolloutBatch


class DebiasCallback(Callback):
    """A pure transform of the batch (`__call__`), before the update: the Debiaser learns from the batch's anchor pairs, then the
    training reward of every WM-only trajectory becomes its corrected WM score, and its
    `reward_var` the variance of that corrected score. Anchored rows keep their real reward.
    The same Debiaser is handed to the environment (it corrects the score shown to the agent)
    and to denoising (it calibrates anchor scores), so all three see one fit.

    Under DDP the Debiaser learns from every rank's pairs (gathered in rank order), so each rank holds
    the same fit. Returns debias/pairs, debias/bias_global, debias/strata (strata with their own fit) and, on steps
    with anchors, debias/mae_before and debias/mae_after (out of sample: the fit before those
    pairs). Every `table_every` batches and at the end of training the per-stratum table goes to
    MLflow as debias/strata_step_N.md (N the RL step) when an MLFlowLogger is attached.

    A WM reward the deterministic checks decided (`turn_wm_exact`: a syntax error, an empty or malformed
    program) is the real reward, not an estimate: unless `correct_decided`, it is neither a pair of the fit
    nor corrected, and its variance is 0. Corrected, it took the map's value and scatter in its region, and as
    pairs it made about half the fit and flattered its error (issue 27). debias/decided_shift and debias/decided_var
    say what the map does, or would do, to them (mean shift, mean variance over the step's decided turns).
    """

    def __init__(self, debiaser: Debiaser, table_every: int = DebiasConfig.table_every,
                 correct_decided: bool = DebiasConfig.correct_decided):
        self.debiaser, self.table_every, self.correct_decided = debiaser, table_every, correct_decided
        self.batches = 0

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, dict[str, float]]:
        """(the batch with corrected rewards, new tensors; the input is left as it was, metrics)."""
        d = self.debiaser
        wm = batch.turn_wm_reward.detach().cpu().numpy()
        wm_var = batch.turn_wm_var.detach().cpu().numpy()
        decided = batch.turn_wm_exact.detach().cpu().numpy() & ~np.isnan(wm)
        exact = np.zeros_like(decided) if self.correct_decided else decided
        fitted = np.where(exact, np.nan, wm)  # the map learns and corrects the network's estimates only
        real = batch.turn_real_reward.detach().cpu().numpy()
        keys = self.turn_keys(batch)
        anchors = (batch.is_anchor & batch.valid).cpu().numpy()
        # anchors' corrected scores under the fit *before* their own pairs: out of sample, for fidelity,
        # denoising's s² and the guard
        before_fit, before_var = _decided_kept(*correct_turns(d, fitted[anchors], _rows(keys, anchors), wm_var[anchors]),
                                               wm[anchors], exact[anchors])
        # every executed anchor turn is its own pair, filed under its own turn's stratum, weighted 1/p
        pairs = _of_every_rank(turn_pairs(fitted[anchors], real[anchors], _rows(keys, anchors),
                                          1.0 / batch.anchor_prob.detach().cpu().numpy()[anchors]))
        before, after = d.update(pairs[0], pairs[1], pairs[2], sample_weight=pairs[3])
        # each turn corrected in its own stratum, then the max: the trajectory's corrected WM score
        corrected, corrected_var = _decided_kept(*correct_turns(d, fitted, keys, wm_var), wm, exact)
        score, var = aggregate_turns(corrected), _at_best(corrected, corrected_var)
        score[anchors], var[anchors] = aggregate_turns(before_fit), _at_best(before_fit, before_var)
        like = batch.reward
        wm_corrected = torch.as_tensor(score, dtype=like.dtype, device=like.device)
        wm_corrected_var = torch.as_tensor(var, dtype=like.dtype, device=like.device)
        rows = batch.wm_only
        out = replace(batch, wm_corrected=wm_corrected, wm_corrected_var=wm_corrected_var,
                      reward=torch.where(rows, wm_corrected, batch.reward),
                      reward_var=torch.where(rows, wm_corrected_var, batch.reward_var))

        metrics = {"debias/pairs": float(d.pairs), "debias/bias_global": d.bias(),
                   "debias/strata": float(sum(fit.n > 0 for fit in d.strata.values()))}
        if decided.any():  # what the map does (or, passed through, would do) to rewards that are exact
            would, would_var = correct_turns(d, np.where(decided, wm, np.nan), keys, wm_var)
            metrics["debias/decided_turns"] = float(decided.sum())
            metrics["debias/decided_shift"] = float(np.mean(would[decided] - wm[decided]))
            known = would_var[decided][np.isfinite(would_var[decided])]
            metrics["debias/decided_var"] = float(known.mean()) if len(known) else 0.0
        if len(before):
            metrics["debias/mae_before"] = float(np.abs(before).mean())
            metrics["debias/mae_after"] = float(np.abs(after).mean())
        self.batches += 1
        return out, metrics

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.table_every and self.batches % self.table_every == 0:
            self.save_table(trainer, pl_module.rl_step)

    def turn_keys(self, batch: RolloutBatch) -> list[list[tuple]] | None:
        """Each turn's stratum key [N][K]; None for one global fit."""
        if not self.debiaser.stratify_by:
            return None
        by, strata = self.debiaser.stratify_by, batch.turn_strata
        stratum_keys(strata, by)  # a missing column raises here, with an empty batch too
        return [stratum_keys({k: strata[k][i] for k in by}, by) for i in range(len(batch))]

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.save_table(trainer, pl_module.rl_step)

    def table_markdown(self) -> str:
        head = "| stratum | n | pairs | bias | resid_before | resid_after |\n|---|---|---|---|---|---|\n"
        return head + "".join(f"| {r['stratum']} | {r['n']:.1f} | {r['pairs']} | {r['bias']:+.4f} | "
                              f"{r['resid_before']:+.4f} | {r['resid_after']:+.4f} |\n" for r in self.debiaser.table())

    def save_table(self, trainer: Any, step: int) -> None:
        """Write the per-stratum table to every MLflow logger of the trainer (rank 0's: it alone has one)."""
        for logger in trainer.loggers:
            if isinstance(logger, MLFlowLogger):
                logger.experiment.log_text(logger.run_id, self.table_markdown(),
                                           f"debias/strata_step_{step}.md")

    def state_dict(self) -> dict:
        return {"debiaser": self.debiaser.state_dict(), "batches": self.batches}

    def load_state_dict(self, state_dict: dict) -> None:
        self.debiaser.load_state_dict(state_dict["debiaser"])
        self.batches = int(state_dict["batches"])


def _of_every_rank(pairs: tuple) -> tuple:
    """(wm, real, keys, sample_weight) pairs of every rank, concatenated in rank order."""
    ranks = distributed.gather(pairs)
    if len(ranks) == 1:
        return pairs
    wm, real = np.concatenate([r[0] for r in ranks]), np.concatenate([r[1] for r in ranks])
    keys = None if pairs[2] is None else [k for r in ranks for k in r[2]]
    weight = None if pairs[3] is None else np.concatenate([r[3] for r in ranks])
    return wm, real, keys, weight


def _decided_kept(corrected: np.ndarray, var: np.ndarray, wm: np.ndarray, exact: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Corrected turn scores and variances, with the decided turns' exact rewards back at variance 0."""
    return np.where(exact, wm, corrected), np.where(exact, 0.0, var)


def _rows(keys: list | None, mask: np.ndarray) -> list | None:
    return None if keys is None else [k for k, m in zip(keys, mask) if m]


def _at_best(score: np.ndarray, var: np.ndarray) -> np.ndarray:
    """The variance of each row's best turn (the one its max-over-turns score comes from)."""
    best = best_turn(score)
    return np.where(best >= 0, var[np.arange(len(best)), np.maximum(best, 0)], np.nan) if len(best) else np.zeros(0)
