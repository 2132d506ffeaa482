"""The seam between the method and a domain.

The method (rollout loop, routing, anchoring, corrections, GRPO, the step, cost, tracking, report,
benchmark) knows a domain only through `Domain`: its tasks and prompts, what an agent's completion does,
the real executor, the world model's queries and examples, how an outcome reads as feedback, the
policy's warm start, and the run's execution record. A domain lives under `wmrl/domains/<name>/` and is
named by `domain:` in the config (`wmrl.domains.make_domain`); the research domain (an agent writes
programs, a sandbox runs them) is the first. Nothing in the method imports a domain: a test enforces it.
"""
from __future__ import annotations

import enum
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    from wmrl.rollout.types import Judgement, TrajectoryRecord, TurnItem


@runtime_checkable
class Outcome(Protocol):
    """What the method reads of one real execution (or of the world model's predicted one)."""

    status: enum.Enum  # how it ended; `status.value` names it in strata, logs and metrics
    reward: float  # NaN when missing
    wall_s: float  # executor time it occupied
    attempts: int  # executions it took (0: none ran)

    @property
    def missing(self) -> bool:
        """The executor failed, not the agent: no reward, left out of training and of the world model's data."""

    def to_dict(self) -> dict: ...


class Task(Protocol):
    name: str
    task_family: str  # what the evaluation reports per family

    def prompt(self) -> str: ...

    def action_class(self, action: str) -> str:
        """The class of an action (strata of the corrections, the guard)."""


class Suite(Protocol):
    def get(self, name: str) -> Task: ...

    def train_tasks(self) -> list[Task]: ...

    def eval_tasks(self) -> list[Task]: ...

    def transfer_tasks(self) -> list[Task]: ...


class WorldModel(Protocol):
    """Predicts outcomes for a domain's queries, learns from (query, real outcome) pairs."""

    def predict(self, queries: Sequence[Any]) -> Any:
        """A prediction over the batch: `reward_mean`, `reward_var` [B], `outcome(k)` (an `Outcome`),
        `malformed`, `prechecked` ([B] bool or None)."""

    def update(self, examples: Sequence[tuple[Any, Outcome]]) -> dict[str, float]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class Domain(Protocol):
    """What the method asks of a domain."""

    name: str
    suite: Suite
    world_model: WorldModel | None  # None: every turn is executed for real
    slots: int  # real executions the executor runs at once
    system: str  # the system turn a checkpoint's chat template opens with: what a capable model needs to answer zero-shot

    # acting and judging
    def action(self, completion: str) -> str:
        """What the agent did, read from its completion (the research domain: the program in it)."""

    def submit(self, items: Sequence["TurnItem"], split: str) -> "Future[list[Outcome]]":
        """Execute `items` for real (one `Outcome` each, in order), without waiting."""

    def query(self, item: "TurnItem") -> Any:
        """The world model's query for one turn."""

    def observe(self, outcome: Outcome) -> str:
        """The feedback an agent reads after a turn, for real and predicted outcomes alike."""

    def shows_reward(self, predicted: Outcome) -> bool:
        """Whether the feedback of a predicted outcome shows its reward (so a corrected one replaces it)."""

    def with_reward(self, predicted: Outcome, reward: float, task: str) -> Outcome:
        """`predicted` as it reads when its reward is `reward` (the debiased one)."""

    # records
    def status(self, word: str) -> enum.Enum:
        """The status `status.value` wrote."""

    def outcome(self, record: dict) -> Outcome:
        """The outcome `Outcome.to_dict` wrote."""

    def examples(self, records: Sequence["TrajectoryRecord"]) -> list[tuple[Any, Outcome]]:
        """(query, real outcome) of every executed turn the world model learns from."""

    def observation_fidelity(self, judgements: Sequence["Judgement"]) -> dict[str, float]:
        """How the world model's predicted feedback compares with the real feedback, on anchored turns."""

    # the run
    def tokenizer_corpus(self, seed: int) -> list[str]:
        """Texts a built-in policy tokenizer is trained on."""

    def warm_start(self, policy, chat, policy_cfg, turns: int, seed: int, key_tok: str, progress: bool) -> dict:
        """Fine-tune the policy before RL (or load the cached result); what happened."""

    def rewind(self, step: int, replayed: set[tuple[int, int]]) -> None:
        """Forget the execution record a resumed run replays (steps >= `step`, the background work `replayed`)."""

    def close(self) -> None: ...
