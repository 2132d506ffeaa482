"""The LightningModule: the policy, and the RL step (`wmrl.step.Step`) on every rollout batch.

`training_step` runs the step: the corrections, then the GRPO update (`update`, from the corrected
`batch.reward` and `batch.weight`), world-model training, the anchor budget and the cost, in that order;
each stage but the update is a callback the recipe hands over (`callbacks.step_of`). Every
metric of the step is logged once, at the RL step.
Under DDP each rank holds its share of the step's groups: the loss is a mean over every rank's valid
trajectories and the gradient is summed over ranks, so the update is the one a single process would
take on the union of the ranks' batches.
"""
from __future__ import annotations

import copy
import math
import random

import lightning as L
import numpy as np
import torch

from wmrl import distributed
from wmrl.rollout import RolloutBatch, Source
from wmrl.rl import group_advantages, policy_loss
from wmrl.rl.logprobs import token_logprobs
from wmrl.seeding import stream_seed
from wmrl.step import Step
from wmrl.tracking import log_metrics


def sequence_logprobs(model, input_ids, attention_mask, temperature: float, with_entropy_mask=None,
                      chunk_mb: float = 256.0, positions=None):
    """log π(token_t | tokens_<t) at every position t ≥ 1 (position 0 gets 0), aligned with input_ids, and the
    mean entropy over `with_entropy_mask`; through the output head a slice at a time, at `positions` only
    (`wmrl.rl.logprobs`)."""
    return token_logprobs(model, input_ids, attention_mask, temperature, with_entropy_mask, chunk_mb, positions)


class WMRLModule(L.LightningModule):
    """`rl`: the RL config section (loss, clip, KL, optimizer). `temperature`: the sampling
    temperature the old log-probs were computed at. `max_completion_tokens`: the constant
    normaliser of `dr_grpo` (generation.max_new_tokens x turns)."""

    def __init__(self, policy, rl, temperature: float, seed: int, max_completion_tokens: int):
        super().__init__()
        self.policy, self.rl, self.temperature, self.seed = policy, rl, temperature, seed
        self.max_completion_tokens = max_completion_tokens
        self.ref_policy = copy.deepcopy(policy).eval().requires_grad_(False) if rl.kl_beta > 0 else None
        self.automatic_optimization = False
        self.rl_step = 0  # RL steps trained (one per rollout batch, whatever the optimizer did)
        self.tied_streak = 0  # the last steps in a row whose groups were all tied (the progress line warns)
        self.step = Step(update=self.update)  # the recipe gives it its other stages (`callbacks.step_of`)

    def configure_optimizers(self):
        # only what trains: every weight, or the LoRA adapters (policy.lora_rank)
        opt = torch.optim.AdamW([p for p in self.policy.parameters() if p.requires_grad], lr=self.rl.lr,
                                weight_decay=self.rl.weight_decay)
        warmup = self.rl.lr_warmup_steps
        if warmup <= 0:
            return opt
        # Linear warm-up: optimizer step k (0-based) uses lr * min(1, (k+1)/warmup). Adam's first steps move
        # every weight by about lr whatever the gradient's size. Manual optimization never steps a scheduler,
        # so the optimizer steps it itself, right after each opt.step(); Lightning still checkpoints its state.
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: min(1.0, (k + 1) / warmup))
        opt.register_step_post_hook(lambda *_: sched.step())
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        return batch.to(device) if isinstance(batch, RolloutBatch) else super().transfer_batch_to_device(batch, device, dataloader_idx)

    def training_step(self, batch: RolloutBatch, batch_idx: int):
        batch, metrics = self.step(batch)
        self.rl_step = batch.step + 1
        tied = metrics.get("rl/groups") and metrics.get("rl/tied_groups") == metrics["rl/groups"]
        self.tied_streak = self.tied_streak + 1 if tied else 0  # steps in a row that could teach nothing
        log_metrics(self.trainer.loggers, metrics, step=self.rl_step)
        self.log_dict({"reward": metrics["reward/train_mean"]}, prog_bar=True, logger=False, on_step=True,
                      batch_size=len(batch))

    def update(self, batch: RolloutBatch) -> dict[str, float]:
        """The step's `update` stage: GRPO on the (corrected, weighted) batch, under the step's own seed."""
        seed = stream_seed(self.seed, batch.step, "train")
        torch.manual_seed(seed), np.random.seed(seed), random.seed(seed)
        stats = self._policy_update(batch)
        valid = batch.valid
        return {**stats, **_means_over_ranks({  # every rank's rows
            "reward/train_mean": batch.reward[valid], "reward/wm_raw_mean": batch.wm_reward[valid],
            "reward/real_mean": batch.real_reward[valid], "rollout/anchor_share": batch.is_anchor.float(),
            "rollout/real_share": (batch.source == Source.REAL).float()})}

    def _policy_update(self, batch: RolloutBatch) -> dict:
        cfg = self.rl
        adv = group_advantages(batch.reward, batch.group_ids, batch.weight, batch.valid, cfg.scale_rewards,
                               std_floor=cfg.adv_std_floor)
        n_valid = distributed.all_sum(int(batch.valid.sum()))  # every rank's valid trajectories
        active = batch.valid & (adv != 0) if cfg.kl_beta == 0 else batch.valid
        rows = torch.nonzero(active).flatten()  # rows with A = 0 and no KL term add exactly 0: skip their compute
        opt = self.optimizers()
        stats: dict[str, float] = {"rl/active_share": len(rows) / max(1, len(batch)), "rl/adv_abs_mean": float(adv.abs().mean()),
                                   **_tied_groups(batch, adv)}
        if distributed.all_sum(len(rows)) == 0:
            return stats  # every group of every rank tied: nothing to learn from this batch
        for update in range(cfg.updates_per_batch):
            opt.zero_grad(set_to_none=True)
            acc: dict[str, float] = {}
            # ranks run different numbers of micro-batches: DDP's per-backward sync is off, gradients are summed once
            with opt.toggle_model(sync_grad=False):
                self._accumulate(batch, rows, adv, n_valid, acc)
            distributed.sum_gradients(list(self.policy.parameters()))
            grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.grad_clip)
            opt.step()
            acc["loss"] = distributed.all_sum(acc.get("loss", 0.0))  # the loss over every rank's rows
            acc["grad_norm"] = float(grad_norm)
        stats.update({f"rl/{k}": v for k, v in acc.items()})
        return stats

    def _accumulate(self, batch: RolloutBatch, rows: torch.Tensor, adv: torch.Tensor, n_valid: float, acc: dict) -> None:
        """Backward passes of this rank's `rows`, micro-batch by micro-batch, into the gradients; `acc` gets
        the loss (its share of the mean over `n_valid` trajectories) and per-row diagnostics."""
        cfg, temperature = self.rl, self.temperature
        if len(rows):
            for chunk in rows.split(cfg.micro_batch_size):
                width = int(batch.attention_mask[chunk].sum(1).max())
                ids, attn = batch.input_ids[chunk, :width], batch.attention_mask[chunk, :width]
                mask = batch.loss_mask[chunk, :width]
                lp, entropy = sequence_logprobs(self.policy, ids, attn, temperature, with_entropy_mask=mask,
                                                chunk_mb=cfg.logprob_chunk_mb, positions=mask > 0)
                ref = None
                if self.ref_policy is not None:
                    with torch.no_grad():
                        ref, _ = sequence_logprobs(self.ref_policy, ids, attn, temperature, chunk_mb=cfg.logprob_chunk_mb,
                                                   positions=mask > 0)
                loss, s = policy_loss(lp, batch.old_logprobs[chunk, :width], adv[chunk], mask, batch.weight[chunk],
                                      cfg.clip_eps, cfg.loss, ref, cfg.kl_beta, self.max_completion_tokens)
                share = len(chunk) / n_valid  # the loss is a mean over all valid trajectories
                self.manual_backward(loss * share)
                acc["loss"] = acc.get("loss", 0.0) + float(loss.detach()) * share
                for k, v in {"entropy": entropy, **s}.items():  # diagnostics: means over the rows trained on
                    acc[k] = acc.get(k, 0.0) + float(v.detach()) * len(chunk) / len(rows)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint.setdefault("wmrl", {})["rl_step"] = self.rl_step  # beside what the callbacks keep there

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.rl_step = checkpoint["wmrl"]["rl_step"]


def _tied_groups(batch: RolloutBatch, adv: torch.Tensor) -> dict[str, float]:
    """`rl/tied_groups` of `rl/groups` (every rank's): groups none of whose valid rows has an advantage, so
    they teach the policy nothing (every program got the same reward)."""
    groups = torch.unique(batch.group_ids)
    signal = torch.zeros(len(groups), dtype=torch.bool)
    index = torch.searchsorted(groups, batch.group_ids)
    signal.index_put_((index.cpu(),), (batch.valid & (adv != 0)).cpu(), accumulate=True)
    return {"rl/tied_groups": float(distributed.all_sum(int((~signal).sum()))),
            "rl/groups": float(distributed.all_sum(len(groups)))}


def _means_over_ranks(columns: dict[str, torch.Tensor]) -> dict[str, float]:
    """The NaN-ignoring mean of each column over every rank's rows."""
    local = {k: (float(torch.nansum(x.float())), int((~torch.isnan(x.float())).sum())) for k, x in columns.items()}
    ranks = distributed.gather(local)
    out = {}
    for k in columns:
        total, n = sum(r[k][0] for r in ranks), sum(r[k][1] for r in ranks)
        out[k] = total / n if n else math.nan
    return out

