"""The environment router: each group of completions is judged by the real sandbox or the world model.

`sandbox` mode executes everything. `wm` mode executes everything during warm-up, then sends
`anchor_rate` of the groups to the sandbox *and* the world model (anchor pairs) and the rest to
the world model alone, whose predicted outcome is also what the agent reads next turn.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from wmrl.outcome import Outcome, Status, render_observation


@dataclass
class Judgement:
    """What one turn of one trajectory got from its environment."""

    real: Outcome | None = None  # executed outcome (None when not executed)
    wm_reward: float = math.nan  # world-model reward mean (NaN when not scored)
    wm_var: float = math.nan
    wm_status: str = ""
    observation: str = ""  # the feedback the agent reads next turn


@dataclass
class EnvTimes:
    real_s: float = 0.0
    wm_s: float = 0.0
    executions: int = 0
    slot_s: float = 0.0
    infra_errors: int = 0


def choose_anchors(n_groups: int, rate: float, rng: random.Random) -> list[bool]:
    """Random anchor groups: round(rate * n) of them, at least one when rate > 0.

    The one place a smarter selection (e.g. where the world model is least trusted) plugs in.
    """
    k = min(n_groups, max(1 if rate > 0 else 0, round(rate * n_groups)))
    chosen = set(rng.sample(range(n_groups), k))
    return [g in chosen for g in range(n_groups)]


class Environment:
    def __init__(self, sandbox, world_model, env_cfg, suite, observation_correction: Callable | None = None,
                 bias: dict | None = None):
        self.sandbox, self.wm, self.cfg, self.suite = sandbox, world_model, env_cfg, suite
        self.correct = observation_correction  # debiasing of the predicted score shown to the agent
        self.bias = dict(bias or {})

    def routing(self, n_groups: int, step: int, rng: random.Random) -> tuple[list[bool], list[bool]]:
        """(executed, scored_by_wm) per group for this step."""
        if self.cfg.mode == "sandbox" or self.wm is None:
            return [True] * n_groups, [False] * n_groups
        if step < self.cfg.warmup_steps:
            return [True] * n_groups, [False] * n_groups
        anchors = choose_anchors(n_groups, self.cfg.anchor_rate, rng)
        return anchors, [True] * n_groups

    def judge(self, items: Sequence[dict], executed: Sequence[bool], scored: Sequence[bool],
              split: str, times: EnvTimes) -> list[Judgement]:
        """items: dicts with task, program, history, meta. One Judgement per item, in order."""
        out = [Judgement() for _ in items]
        real_idx = [i for i, e in enumerate(executed) if e]
        wm_idx = [i for i, s in enumerate(scored) if s]
        if real_idx:
            future = self.execute([items[i] for i in real_idx], split)
        if wm_idx:  # the world model predicts while the sandbox executes
            t1 = time.perf_counter()
            self._predict(items, wm_idx, out)
            times.wm_s += time.perf_counter() - t1
        if real_idx:
            outcomes = self.collect(future, times)
            for i, o in zip(real_idx, outcomes):
                out[i].real = o
                out[i].observation = render_observation(o)
        return out

    def execute(self, items: Sequence[dict], split: str):
        """Start real executions without waiting; `collect` gathers them."""
        from wmrl.sandbox import ExecRequest

        reqs = [ExecRequest(self.suite.get(i["task"]), i["program"], split, i.get("meta", {})) for i in items]
        return self.sandbox.submit(reqs)

    def collect(self, future, times: EnvTimes) -> list[Outcome]:
        t0 = time.perf_counter()
        outcomes = future.result()
        times.real_s += time.perf_counter() - t0  # only the wait shows: the rest overlapped other work
        for o in outcomes:
            times.executions += o.attempts > 0
            times.slot_s += o.wall_s
            times.infra_errors += o.status is Status.INFRA_ERROR
        return outcomes

    def _predict(self, items, idx, out) -> None:
        from wmrl.world_model import WMQuery

        queries = []
        for i in idx:
            task = self.suite.get(items[i]["task"])
            queries.append(WMQuery(task=task.name, descriptor=task.descriptor(), program=items[i]["program"],
                                   history=items[i].get("history", ""), metric=task.metric))
        pred = self.wm.predict(queries)
        for k, i in enumerate(idx):
            # benchmark scenario: a class-correlated error of the world model (0 unless configured)
            out[i].wm_reward = float(pred.reward_mean[k]) + self.bias.get(items[i].get("action_class", ""), 0.0)
            out[i].wm_var = float(pred.reward_var[k])
            predicted = pred.outcome(k)
            out[i].wm_status = predicted.status.value
            if self.correct is not None and predicted.status is Status.VALID:
                strata = {"task": [items[i]["task"]], "action_class": [items[i].get("action_class", "")],
                          "status": [predicted.status.value]}
                shown = float(self.correct([out[i].wm_reward], strata)[0])
                predicted.pos = min(1.0, max(0.0, (shown - 0.5) * 2.0))
                if hasattr(self.wm, "value_at"):  # show the metric value that matches the corrected position
                    value = self.wm.value_at(items[i]["task"], predicted.pos)
                    predicted.value = None if math.isnan(value) else value
            out[i].observation = render_observation(predicted)
