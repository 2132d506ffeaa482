"""The environment router: each group of completions is judged by real execution or the world model.

The environment knows its domain only through `wmrl.domain.Domain`: the domain executes an action for real,
turns it into a world-model query, and renders an outcome as the agent's feedback.
`sandbox` mode executes everything. `wm` mode executes everything during warm-up; afterwards
the world model scores every group, and the anchor budget decides what is also executed for
real (anchor pairs): whole random groups, chosen before sampling (`anchor_selection=random`), or
single trajectories chosen after the world model scored them, by its uncertainty or by the
advantage the update would give them, each with its inclusion probability. Trajectories of a class
the guard flagged are executed whatever the budget. A world-model-only trajectory's next
observation is the world model's predicted outcome.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from wmrl import stop
from wmrl.background import BackgroundExecutions, BackgroundPool
from wmrl.anchoring import choose_anchor_groups, predicted_advantage
from wmrl.rollout.types import Judgement, Source, Trajectory, TurnItem

if TYPE_CHECKING:
    from wmrl.domain import Domain, Outcome
    from wmrl.step import Handoff  # collection uses what the last step fitted, never the corrections' math


@dataclass
class EnvTimes:
    real_s: float = 0.0
    wm_s: float = 0.0
    executions: int = 0
    slot_s: float = 0.0
    infra_errors: int = 0
    wm_answers: int = 0  # actions a language-model world model answered (not decided by the checks)
    wm_malformed: int = 0  # of those, answers that did not parse


class Environment:
    """What the previous step left (`wmrl.step.Handoff`) is an argument of every call that uses it: its world
    model scores, its anchor budget decides the real executions, its debiaser (when handed over) corrects the
    score shown to the agent in a predicted observation (its metric value follows)."""

    def __init__(self, domain: Domain, env_cfg, background_slots: int = 0):
        """`background_slots`: executions `execute_background` keeps running at once (0: no limit)."""
        self.domain, self.cfg, self.background_slots = domain, env_cfg, background_slots
        self.background: BackgroundPool | None = None  # started by the first background submission

    def routing(self, n_groups: int, step: int, rng: random.Random, handoff: Handoff) -> tuple[list[bool], list[bool]]:
        """(executed, scored_by_wm) per group for this step, before sampling."""
        if self.cfg.mode == "sandbox" or handoff.world_model is None or step < self.cfg.warmup_steps:
            return [True] * n_groups, [False] * n_groups
        if handoff.budget.per_trajectory:  # chosen after the world model scored them
            return [False] * n_groups, [True] * n_groups
        return choose_anchor_groups(n_groups, handoff.budget.rate, rng), [True] * n_groups

    def after_scoring(self, trajs: list[Trajectory], rng: np.random.Generator, handoff: Handoff
                      ) -> tuple[np.ndarray, np.ndarray]:
        """(execute now, inclusion probability) per trajectory, once the world model scored them:
        the budget's per-trajectory anchors and the guard's flagged classes (probability 1)."""
        n = len(trajs)
        todo, prob = np.zeros(n, dtype=bool), np.ones(n)
        open_ = np.array([t.scored and not t.executed and not t.deferred for t in trajs], dtype=bool)
        if not open_.any():
            return todo, prob
        budget = handoff.budget
        if budget.per_trajectory:
            wm = torch.tensor([max(turn.judgement.wm_reward for turn in t.turns) for t in trajs])
            var = np.array([t.turns[int(np.argmax([turn.judgement.wm_reward for turn in t.turns]))].judgement.wm_var
                            for t in trajs])
            adv = predicted_advantage(wm, torch.tensor([t.group for t in trajs]))
            chosen, pi = budget.choose(var[open_], adv[open_], rng)
            todo[np.flatnonzero(open_)[chosen]] = True
            prob[open_] = pi
        forced = budget.forced([[turn.action_class for turn in t.turns] for t in trajs]) & open_
        todo |= forced
        prob[forced] = 1.0
        return todo, prob

    def judge(self, items: Sequence[TurnItem], executed: Sequence[bool], scored: Sequence[bool],
              split: str, times: EnvTimes, handoff: Handoff | None = None) -> list[Judgement]:
        """One Judgement per item, in order; `handoff` scores the items `scored` marks (none: no item is)."""
        out = [Judgement() for _ in items]
        real_idx = [i for i, e in enumerate(executed) if e]
        wm_idx = [i for i, s in enumerate(scored) if s]
        if real_idx:
            future = self.execute([items[i] for i in real_idx], split)
        if wm_idx:  # the world model predicts while the real executions run
            t1 = time.perf_counter()
            self._predict([items[i] for i in wm_idx], [out[i] for i in wm_idx], times, handoff)
            times.wm_s += time.perf_counter() - t1
        if real_idx:
            outcomes = self.collect(future, times)
            for i, o in zip(real_idx, outcomes):
                out[i].real = o
                out[i].observation, out[i].observed = self.domain.observe(o), Source.REAL
        return out

    def execute(self, items: Sequence[TurnItem], split: str):
        """Start real executions without waiting; `collect` gathers them."""
        return self.domain.submit(items, split)

    def execute_background(self, items: Sequence[TurnItem], split: str) -> BackgroundExecutions:
        """`execute`, with at most `background_slots` executions running at once over every submission still
        in flight (`wmrl.background`) while the trainer works; once it waits for one (`hurry`), every slot."""
        if self.background_slots <= 0:
            return BackgroundExecutions(None, len(items), self.execute(items, split))
        if self.background is None:
            self.background = BackgroundPool(self.execute, self.background_slots, int(self.domain.slots))
        return self.background.submit(items, split)

    def collect(self, future, times: EnvTimes) -> list[Outcome]:
        t0 = time.perf_counter()
        outcomes = stop.wait(future)
        times.real_s += time.perf_counter() - t0  # only the wait shows: the rest overlapped other work
        for o in outcomes:
            times.executions += o.attempts > 0
            times.slot_s += o.wall_s
            times.infra_errors += o.missing
        return outcomes

    def _predict(self, items: Sequence[TurnItem], out: Sequence[Judgement], times: EnvTimes, handoff: Handoff) -> None:
        queries = [self.domain.query(item) for item in items]
        pred = handoff.world_model.predict(queries)
        correction = handoff.debiaser
        if pred.malformed is not None:
            times.wm_answers += int((~pred.prechecked).sum()) if pred.prechecked is not None else len(queries)
            times.wm_malformed += int(pred.malformed.sum())
        for k, (item, j) in enumerate(zip(items, out)):
            j.wm_reward, j.wm_var = float(pred.reward_mean[k]), float(pred.reward_var[k])
            predicted = pred.outcome(k)
            j.wm_status = predicted.status
            j.wm_exact = pred.prechecked is not None and bool(pred.prechecked[k])
            if correction is not None and self.domain.shows_reward(predicted):
                strata = {"task": [item.task], "action_class": [item.action_class], "status": [j.wm_status.value]}
                shown = float(correction.correct([j.wm_reward], correction.keys_of(strata))[0])
                predicted = self.domain.with_reward(predicted, shown, item.task)
            j.observation = j.wm_observation = self.domain.observe(predicted)
            j.observed = Source.WM
