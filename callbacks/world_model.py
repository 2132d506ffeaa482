"""World-model training, the step's `world_model` stage (`wmrl.step`): after the update, the world model
learns from the step's newly executed actions and is scored against real execution on its anchors."""
from __future__ import annotations

import json
from pathlib import Path

from lightning.pytorch import Callback

from wmrl import distributed
from wmrl.domain import Domain
from wmrl.fidelity import reward_fidelity
from wmrl.rollout import RolloutBatch, Source, TrajectoryRecord


class WorldModelCallback(Callback):
    """After the policy update (`__call__`, returns its metrics): `world_model.update` on every executed action
    (warm-up, sandbox and anchor groups; missing outcomes left out: `Domain.examples`), then fidelity on the
    anchored actions (`wm/spearman`, `wm/mae`, `wm/coverage_2sigma`, `wm/status_acc`, the domain's feedback
    metrics), each anchored turn
    appended to `anchor_log` (jsonl) for reports. Returns `wm/new_examples` and
    the world model's own training stats. The world model's state goes into checkpoints.
    Under DDP every rank's world model learns from every rank's executions (gathered in rank order), so the
    ranks' world models take identical updates; pass `anchor_log` on one rank only."""

    def __init__(self, domain: Domain, anchor_log: Path | None = None):
        self.domain, self.world_model, self.anchor_log = domain, domain.world_model, anchor_log
        # turn-2 improvements (real reward of turn 2 > turn 1) by where turn 1's feedback came from
        self.feedback = {Source.REAL.word: [0, 0], Source.WM.word: [0, 0]}  # observed -> [improved, trajectories]

    def __call__(self, batch: RolloutBatch) -> dict[str, float]:
        ranks = distributed.gather((batch.records, batch.valid.tolist()))
        records, valid = [r for rec, _ in ranks for r in rec], [v for _, val in ranks for v in val]
        examples = self.domain.examples(records)
        stats = {"wm/new_examples": float(len(examples))}
        if examples:
            stats.update({k if k.startswith("wm/") else f"wm/{k}": float(v)
                          for k, v in self.world_model.update(examples).items()})
        stats.update(self.fidelity(records, valid, batch.step))
        stats.update(self.feedback_effect(records, valid))
        return stats

    def fidelity(self, records: list[TrajectoryRecord], valid: list[bool], step: int) -> dict:
        """The world model against real execution on every anchored program of a step's valid `records`."""
        anchored = [r for r, ok in zip(records, valid) if r.anchor and ok]
        turns = [t for r in anchored for t in r.turns]
        if not turns:
            return {}
        if self.anchor_log is not None:
            with open(self.anchor_log, "a") as f:
                for r in anchored:
                    for t in r.turns:
                        j = t.judgement
                        f.write(json.dumps({"step": step, "task": r.task, "action_class": t.action_class,
                                            "wm_reward": j.wm_reward, "wm_var": j.wm_var, "real_reward": j.real.reward,
                                            "real_status": j.real.status.value, "wm_status": j.wm_status.value}) + "\n")
        js = [t.judgement for t in turns]
        out = reward_fidelity([j.wm_reward for j in js], [j.wm_var for j in js], [j.real.reward for j in js],
                              [j.wm_status for j in js], [j.real.status for j in js])
        out.update(self.domain.observation_fidelity(js))
        return out

    def feedback_effect(self, records: list[TrajectoryRecord], valid: list[bool]) -> dict:
        """How often turn 2 improves on turn 1 (real rewards) after real vs predicted feedback, cumulative."""
        for rec, ok in zip(records, valid):
            if not (ok and rec.executed and len(rec.turns) >= 2):
                continue
            first, second = rec.turns[0].judgement, rec.turns[1].judgement
            if first.observed is not None:
                counts = self.feedback[first.observed.word]
                counts[0] += second.real.reward > first.real.reward
                counts[1] += 1
        return {f"feedback/improve_rate_{src}_obs": c[0] / c[1] for src, c in self.feedback.items() if c[1]} | \
            {f"feedback/trajectories_{src}_obs": float(c[1]) for src, c in self.feedback.items()}

    def state_dict(self) -> dict:
        return {"world_model": self.world_model.state_dict(), "feedback": {k: list(v) for k, v in self.feedback.items()}}

    def load_state_dict(self, state_dict: dict) -> None:
        self.world_model.load_state_dict(state_dict["world_model"])
        self.feedback = {k: list(v) for k, v in state_dict["feedback"].items()}

