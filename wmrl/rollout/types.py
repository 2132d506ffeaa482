"""The typed pieces of a rollout: what the environment judges (`TurnItem`), what it answers
(`Judgement`), one turn of a trajectory (`Turn`), a trajectory being played (`Trajectory`), and
the token-free record of one that travels with the batch (`TrajectoryRecord`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from enum import Enum

    from wmrl.domain import Domain, Outcome


class Source(IntEnum):
    """Where a reward or an observation came from (an int: a batch keeps one per row in a tensor)."""

    REAL = 0  # a real execution (sandbox mode, warm-up, an anchor)
    WM = 1  # the world model's prediction

    @property
    def word(self) -> str:
        """How records and metric names spell it: real, wm."""
        return self.name.lower()

    @classmethod
    def of_word(cls, word: str) -> "Source":
        return cls[word.upper()]


@dataclass
class TurnItem:
    """One action for the environment to judge (the research domain: a program): its task, the feedback seen
    so far, its class."""

    task: str
    action: str
    history: str = ""
    action_class: str = ""
    meta: dict = field(default_factory=dict)  # written to the execution log (step, purpose, group, turn, ...)


@dataclass
class Judgement:
    """What one turn of one trajectory got from its environment."""

    real: Outcome | None = None  # executed outcome (None when not executed)
    wm_reward: float = math.nan  # world-model reward mean (NaN when not scored)
    wm_var: float = math.nan  # world-model reward variance (NaN when not scored)
    wm_status: Enum | None = None  # the world model's predicted status (None when not scored)
    wm_exact: bool = False  # the deterministic checks decided it: wm_reward is the real reward, not an estimate
    observation: str = ""  # the feedback the agent reads next turn
    observed: Source | None = None  # where that feedback came from (None before the environment answered)
    wm_observation: str = ""  # the world model's predicted feedback (when scored), shown or not

    def to_dict(self) -> dict:
        return {"real": None if self.real is None else self.real.to_dict(),
                "wm_reward": None if math.isnan(self.wm_reward) else self.wm_reward,
                "wm_var": None if math.isnan(self.wm_var) else self.wm_var,
                "wm_status": None if self.wm_status is None else self.wm_status.value, "wm_exact": self.wm_exact,
                "observation": self.observation,
                "observed": None if self.observed is None else self.observed.word,
                "wm_observation": self.wm_observation}

    @classmethod
    def from_dict(cls, d: dict, domain: "Domain") -> "Judgement":
        """What `to_dict` wrote; the `domain` reads its outcomes and statuses back."""
        return cls(real=None if d["real"] is None else domain.outcome(d["real"]),
                   wm_reward=math.nan if d["wm_reward"] is None else d["wm_reward"],
                   wm_var=math.nan if d["wm_var"] is None else d["wm_var"],
                   wm_status=None if d["wm_status"] is None else domain.status(d["wm_status"]),
                   wm_exact=bool(d.get("wm_exact", False)), observation=d["observation"],
                   observed=None if d["observed"] is None else Source.of_word(d["observed"]),
                   wm_observation=d["wm_observation"])


@dataclass
class Turn:
    action: str
    action_class: str
    judgement: Judgement

    def to_dict(self) -> dict:
        return {"action": self.action, "action_class": self.action_class, **self.judgement.to_dict()}

    @classmethod
    def from_dict(cls, d: dict, domain: "Domain") -> "Turn":
        return cls(d["action"], d["action_class"], Judgement.from_dict(d, domain))


@dataclass
class TrajectoryRecord:
    """A trajectory without its tokens: for world-model training, fidelity, evaluation and artifacts."""

    task: str
    group: int
    executed: bool
    anchor: bool  # executed for real and scored by the world model
    turns: list[Turn]

    def to_dict(self) -> dict:
        return {"task": self.task, "group": self.group, "executed": self.executed, "anchor": self.anchor,
                "turns": [t.to_dict() for t in self.turns]}


@dataclass
class Trajectory:
    """A trajectory being played: its tokens so far (prompt, completions, observations) and turns."""

    task: str
    group: int
    ids: list[int]
    loss_mask: list[float]  # 1 on generated tokens
    logprobs: list[float]  # sampling log-prob of each generated token, 0 elsewhere
    turns: list[Turn] = field(default_factory=list)
    history: str = ""  # observations so far, as the world model reads them
    executed: bool = False
    scored: bool = False
    deferred: bool = False  # trained next step: an anchor (or a group mate of one) whose execution runs in the background
    pending: bool = False  # deferred and executed in the background (a deferred group mate that is not: False)
    anchor_prob: float = 1.0  # probability it was chosen as an anchor (random groups and forced rows: 1)

    def best_turn(self) -> int:
        """The turn whose reward counts: real when executed, else the world model's."""
        rewards = [t.judgement.real.reward if self.executed and t.judgement.real is not None else t.judgement.wm_reward
                   for t in self.turns]
        rewards = [-math.inf if (r is None or math.isnan(r)) else r for r in rewards]
        return max(range(len(rewards)), key=lambda k: rewards[k])

    def record(self) -> TrajectoryRecord:
        return TrajectoryRecord(self.task, self.group, self.executed, self.executed and self.scored, list(self.turns))

    def to_dict(self) -> dict:
        """Plain data for a checkpoint (real outcomes dropped: a resumed run executes again)."""
        turns = []
        for t in self.turns:
            d = t.to_dict()
            d["real"] = None
            turns.append(d)
        return {"task": self.task, "group": self.group, "ids": self.ids, "loss_mask": self.loss_mask,
                "logprobs": self.logprobs, "turns": turns, "history": self.history, "executed": self.executed,
                "scored": self.scored, "deferred": self.deferred, "pending": self.pending, "anchor_prob": self.anchor_prob}

    @classmethod
    def from_dict(cls, d: dict, domain: "Domain") -> "Trajectory":
        # checkpoints written before group mates could be deferred: every deferred trajectory executes
        return cls(**{"pending": d.get("deferred", False), **d, "turns": [Turn.from_dict(t, domain) for t in d["turns"]]})
