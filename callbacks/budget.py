"""The step's `anchor_budget` stage (`wmrl.step`): the anchor budget learns from the step's anchors: the world model's recent fidelity sets the next
anchor rate (when adaptive), and the guard updates its per-class gaps and flags."""
from __future__ import annotations

import numpy as np
import torch
from lightning.pytorch import Callback

from wmrl import distributed
from wmrl.anchoring import AnchorBudget
from wmrl.fidelity import proxy_vs_real
from wmrl.rollout import RolloutBatch


class AnchorBudgetCallback(Callback):
    """After the world model (`__call__`, returns its metrics): every valid anchor of the batch is a (WM score
    the policy trains on, real reward) pair — the corrected score, out of sample, when debiasing runs — with its
    action class. Under DDP the budget observes every rank's anchors (gathered in rank order): each rank keeps the
    same rate and guard. Returns the proxy against the real reward (`wmrl.fidelity.proxy_vs_real`),
    env/anchor_rate, env/recent_{spearman,mae,coverage,pairs} and guard/flagged, guard/gap/<class>,
    guard/gap_lower/<class>. The budget (shared with the environment) goes into checkpoints."""

    def __init__(self, budget: AnchorBudget):
        self.budget = budget

    def __call__(self, batch: RolloutBatch) -> dict[str, float]:
        idx = torch.nonzero(batch.is_anchor & batch.valid & ~torch.isnan(batch.real_reward)
                            & ~torch.isnan(batch.wm_corrected)).flatten()
        ranks = distributed.gather((batch.wm_corrected[idx].cpu().numpy(), batch.real_reward[idx].cpu().numpy(),
                                    batch.wm_corrected_var[idx].clamp_min(0).sqrt().cpu().numpy(),
                                    [batch.strata["action_class"][i] for i in idx.tolist()]))
        wm, real, std = (np.concatenate([r[k] for r in ranks]) for k in range(3))
        classes = [c for r in ranks for c in r[3]]
        return {**self.budget.observe(wm, real, std, classes), **proxy_vs_real(wm, real, classes)}

    def state_dict(self) -> dict:
        return self.budget.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        self.budget.load_state_dict(state_dict)
