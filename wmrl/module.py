"""The LightningModule: the policy (and the world model it trains on the side), one GRPO update per
rollout batch, cost accounting, periodic held-out evaluation.

Callbacks have already corrected `batch.reward` and set `batch.weight` when `training_step` runs.
"""
from __future__ import annotations

import copy
import json
import math
import random
import time

import lightning as L
import numpy as np
import torch

from wmrl.batch import RolloutBatch
from wmrl.rl import group_advantages, policy_loss, token_entropy
from wmrl.seeding import stream_seed


def sequence_logprobs(model, input_ids, attention_mask, temperature: float = 1.0, with_entropy_mask=None):
    """log π(token_t | tokens_<t) at every position t ≥ 1 (position 0 gets 0), aligned with input_ids."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float() / temperature
    lp = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    lp = torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)
    entropy = None
    if with_entropy_mask is not None:
        with torch.no_grad():
            entropy = token_entropy(logits.detach(), with_entropy_mask[:, 1:])
    return lp, entropy


class WMRLModule(L.LightningModule):
    def __init__(self, cfg, policy, world_model=None, evaluator=None, wm_examples=None, anchor_log=None):
        super().__init__()
        self.cfg = cfg
        self.policy = policy
        self.ref_policy = None
        if cfg.rl.kl_beta > 0:
            self.ref_policy = copy.deepcopy(policy).eval().requires_grad_(False)
        self._wm = [world_model]  # a list keeps it out of the module's parameters: it has its own optimizer
        self.evaluator = evaluator
        self.wm_examples = wm_examples  # batch -> [(WMQuery, Outcome)] of newly executed programs
        self.anchor_log = anchor_log  # jsonl of (world model, real) pairs on anchored programs, for reports
        self.automatic_optimization = False
        self.rl_step = 0
        self.totals = {"cost/real_executions": 0.0, "cost/sandbox_slot_s": 0.0, "cost/train_s": 0.0}
        self.last_eval = math.nan
        self.mlflow_run_id = None

    @property
    def world_model(self):
        return self._wm[0]

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.policy.parameters(), lr=self.cfg.rl.lr, weight_decay=self.cfg.rl.weight_decay)
        warmup = self.cfg.rl.lr_warmup_steps
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

    def on_train_start(self) -> None:
        if self.evaluator is not None and self.rl_step == 0 and self.cfg.eval.at_start:
            self._evaluate()
        self._last_step_end = time.perf_counter()

    def training_step(self, batch: RolloutBatch, batch_idx: int):
        seed = stream_seed(self.cfg.seed, self.rl_step, "train")
        torch.manual_seed(seed), np.random.seed(seed), random.seed(seed)
        t0 = time.perf_counter()
        policy_stats = self._policy_update(batch)
        t1 = time.perf_counter()
        wm_stats = self._world_model_update(batch)
        t2 = time.perf_counter()
        self.rl_step += 1

        stats = dict(batch.stats)
        for k in ("cost/real_executions", "cost/sandbox_slot_s"):
            self.totals[k] += stats.pop(k)
        # wall time since the last step ended (evaluation excluded): rollout, waits, updates, checkpointing
        step_s = t2 - self._last_step_end
        self.totals["cost/train_s"] += step_s
        valid = batch.valid
        metrics = {
            **stats, **policy_stats, **wm_stats, **self.totals,
            "time/policy_train_s": t1 - t0, "time/wm_train_s": t2 - t1, "time/step_s": step_s,
            "throughput/steps_per_s": 1.0 / max(step_s, 1e-9),
            "reward/train_mean": _mean(batch.reward[valid]),
            "reward/wm_raw_mean": _nanmean(batch.wm_reward[valid]),
            "reward/real_mean": _nanmean(batch.real_reward[valid]),
            "rollout/anchor_share": float(batch.is_anchor.float().mean()),
            "rollout/real_share": float((batch.source == 0).float().mean()),
        }
        self._log(metrics)
        self.log_dict({"reward": metrics["reward/train_mean"], "step_s": step_s, "eval": self.last_eval},
                      prog_bar=True, logger=False, on_step=True, batch_size=len(batch))
        every = self.cfg.eval.every_n_steps
        if self.evaluator is not None and (self.rl_step % every == 0 or self.rl_step == self.cfg.rl.steps):
            self._evaluate()
        self._last_step_end = time.perf_counter()

    def _policy_update(self, batch: RolloutBatch) -> dict:
        cfg = self.cfg.rl
        adv = group_advantages(batch.reward, batch.group_ids, batch.weight, batch.valid, cfg.scale_rewards,
                               std_floor=cfg.adv_std_floor)
        n_valid = int(batch.valid.sum())
        active = batch.valid & (adv != 0) if cfg.kl_beta == 0 else batch.valid
        rows = torch.nonzero(active).flatten()  # rows with A = 0 and no KL term add exactly 0: skip their compute
        opt = self.optimizers()
        stats: dict[str, float] = {"rl/active_share": len(rows) / max(1, len(batch)), "rl/adv_abs_mean": float(adv.abs().mean())}
        if len(rows) == 0:
            return stats  # every group tied: nothing to learn from this batch
        max_tokens = int(batch.loss_mask.sum(1).max())
        temperature = self.cfg.generation.temperature
        for update in range(cfg.updates_per_batch):
            opt.zero_grad(set_to_none=True)
            acc: dict[str, float] = {}
            for chunk in rows.split(cfg.micro_batch_size):
                width = int(batch.attention_mask[chunk].sum(1).max())
                ids, attn = batch.input_ids[chunk, :width], batch.attention_mask[chunk, :width]
                mask = batch.loss_mask[chunk, :width]
                lp, entropy = sequence_logprobs(self.policy, ids, attn, temperature, with_entropy_mask=mask)
                ref = None
                if self.ref_policy is not None:
                    with torch.no_grad():
                        ref, _ = sequence_logprobs(self.ref_policy, ids, attn, temperature)
                loss, s = policy_loss(lp, batch.old_logprobs[chunk, :width], adv[chunk], mask, batch.weight[chunk],
                                      cfg.clip_eps, cfg.loss, ref, cfg.kl_beta, max_tokens)
                share = len(chunk) / n_valid  # the loss is a mean over all valid trajectories
                self.manual_backward(loss * share)
                acc["loss"] = acc.get("loss", 0.0) + float(loss.detach()) * share
                for k, v in {"entropy": entropy, **s}.items():  # diagnostics: means over the rows trained on
                    acc[k] = acc.get(k, 0.0) + float(v.detach()) * len(chunk) / len(rows)
            grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.grad_clip)
            opt.step()
            acc["grad_norm"] = float(grad_norm)
        stats.update({f"rl/{k}": v for k, v in acc.items()})
        return stats

    def _world_model_update(self, batch: RolloutBatch) -> dict:
        if self.world_model is None or self.wm_examples is None:
            return {}
        examples = self.wm_examples(batch)
        stats = {"wm/new_examples": float(len(examples))}
        if examples:
            stats.update({k if k.startswith("wm/") else f"wm/{k}": float(v) for k, v in self.world_model.update(examples).items()})
        stats.update(self._fidelity(batch))
        return stats

    def _fidelity(self, batch: RolloutBatch) -> dict:
        """The world model against real execution on every anchored program of the batch."""
        from wmrl.world_model.fidelity import reward_fidelity

        anchored = [r for r, ok in zip(batch.records, batch.valid.tolist()) if r["anchor"] and ok]
        turns = [t for r in anchored for t in r["turns"]]
        if not turns:
            return {}
        if self.anchor_log is not None:
            with open(self.anchor_log, "a") as f:
                for r in anchored:
                    for t in r["turns"]:
                        f.write(json.dumps({"step": self.rl_step, "task": r["task"], "action_class": t["action_class"],
                                            "wm_reward": t["wm_reward"], "wm_var": t["wm_var"],
                                            "real_reward": t["real"]["reward"], "real_status": t["real"]["status"],
                                            "wm_status": t["wm_status"]}) + "\n")
        return reward_fidelity([t["wm_reward"] for t in turns], [t["wm_var"] for t in turns],
                               [t["real"]["reward"] for t in turns], [t["wm_status"] for t in turns],
                               [t["real"]["status"] for t in turns])

    def _evaluate(self) -> None:
        t0 = time.perf_counter()
        metrics, samples = self.evaluator.run(self.rl_step)
        metrics["time/eval_s"] = time.perf_counter() - t0
        self.last_eval = metrics["eval/real_reward"]
        self._log(metrics)
        run_id = getattr(self.logger, "run_id", None)
        if run_id is not None:
            self.logger.experiment.log_text(run_id, json.dumps(samples, indent=1), f"samples/eval_step_{self.rl_step:05d}.json")

    def _log(self, metrics: dict) -> None:
        if self.logger is not None:
            clean = {k: float(v) for k, v in metrics.items() if v is not None and not (isinstance(v, float) and math.isnan(v))}
            self.logger.log_metrics(clean, step=self.rl_step)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["wmrl"] = {"rl_step": self.rl_step, "totals": dict(self.totals), "last_eval": self.last_eval,
                              "mlflow_run_id": getattr(self.logger, "run_id", None),
                              "world_model": self.world_model.state_dict() if self.world_model is not None else None}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint["wmrl"]
        self.rl_step, self.totals, self.last_eval = state["rl_step"], dict(state["totals"]), state["last_eval"]
        self.mlflow_run_id = state["mlflow_run_id"]
        if self.world_model is not None and state["world_model"] is not None:
            self.world_model.load_state_dict(state["world_model"])


def _mean(x: torch.Tensor) -> float:
    return float(x.float().mean()) if x.numel() else math.nan


def _nanmean(x: torch.Tensor) -> float:
    x = x[~torch.isnan(x)]
    return _mean(x)
