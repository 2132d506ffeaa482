"""The research domain behind the seam (`wmrl.domain.Domain`): the agent writes a program, the sandbox runs
it on a data task and the task grades it on the reward ladder; the world model predicts that outcome."""
from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from omegaconf import OmegaConf

from wmrl.domains.research.outcome import Outcome, Status, render_observation
from wmrl.domains.research.sandbox.program import extract_program
from wmrl.domains.research.tasks import TaskSuite
from wmrl.domains.research.world_model.base import WMQuery

if TYPE_CHECKING:
    from wmrl.domains.research.sandbox import Sandbox
    from wmrl.domains.research.world_model import WorldModel
    from wmrl.rollout.types import Judgement, TrajectoryRecord, TurnItem

# What a pretrained instruct model reads before every task: the two program interfaces, shown by example,
# so that it can answer zero-shot. The task prompt after it says which interface, the data and the score.
SYSTEM = """You are a machine-learning research agent. Answer with one Python program in a ```python block, nothing else.
A build() task: define build() returning an unfitted scikit-learn estimator; the harness loads the data, fits and predicts. Example:
```python
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.linear_model import LogisticRegression

def build():
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
```
Text columns in a DataFrame: encode them inside the estimator (a ColumnTransformer). A script task: read ./input/*.csv with pandas and write the submission file the task names."""

# the statuses whose predicted feedback names an error (compared by type with the real one)
FAILURES = (Status.RUNTIME_ERROR, Status.TIMEOUT, Status.NO_VALID_OUTPUT, Status.SYNTAX_ERROR, Status.MALFORMED)


@dataclass
class ResearchDomain:
    suite: TaskSuite
    sandbox: "Sandbox | None" = None  # None: nothing executes (tests of the parts around it)
    world_model: "WorldModel | None" = None
    cache_dir: Path = field(default_factory=lambda: Path("~/.cache/wmrl").expanduser())
    log_path: Path | None = None  # the sandbox's execution log
    name: str = "research"
    system: str = SYSTEM

    @property
    def slots(self) -> int:
        return int(self.sandbox.slots)

    # acting and judging
    def action(self, completion: str) -> str:
        return extract_program(completion)

    def submit(self, items: Sequence["TurnItem"], split: str):
        from wmrl.domains.research.sandbox import ExecRequest

        return self.sandbox.submit([ExecRequest(self.suite.get(i.task), i.action, split, i.meta) for i in items])

    def query(self, item: "TurnItem") -> WMQuery:
        task = self.suite.get(item.task)
        return WMQuery(task=task.name, descriptor=task.descriptor(), program=item.action, history=item.history,
                       metric=task.metric, interface=task.interface)

    def observe(self, outcome: Outcome) -> str:
        return render_observation(outcome)

    def shows_reward(self, predicted: Outcome) -> bool:
        return predicted.status is Status.VALID  # a valid program's feedback shows its score and position

    def with_reward(self, predicted: Outcome, reward: float, task: str) -> Outcome:
        """The ladder read backwards: a valid reward 0.5 + 0.5 pos shows position pos and the metric value the
        world model has seen real executions of this task reach there."""
        predicted.pos = min(1.0, max(0.0, (reward - 0.5) * 2.0))
        value = self.world_model.value_at(task, predicted.pos)
        predicted.value = None if math.isnan(value) else value
        return predicted

    # records
    def status(self, word: str) -> Status:
        return Status(word)

    def outcome(self, record: dict) -> Outcome:
        return Outcome.from_dict(record)

    def examples(self, records: Sequence["TrajectoryRecord"]) -> list[tuple[WMQuery, Outcome]]:
        """(WMQuery, Outcome) of every executed program, with the history its trajectory had; infra errors left out."""
        out = []
        for rec in records:
            if not rec.executed:
                continue
            task = self.suite.get(rec.task)
            history = ""
            for turn in rec.turns:
                o = turn.judgement.real
                if not o.missing:
                    out.append((WMQuery(task.name, task.descriptor(), turn.action, history, task.metric, task.interface), o))
                history = (history + "\n" + turn.judgement.observation).strip()
        return out

    def observation_fidelity(self, judgements: Sequence["Judgement"]) -> dict[str, float]:
        """Predicted feedback against the real one: does a predicted failure name the error that happened
        (`wm/obs_error_type_agree`), is the feedback word for word the same (`wm/obs_exact`)."""
        out = {}
        both_failed = [j for j in judgements if j.wm_status is j.real.status and j.real.status in FAILURES]
        if both_failed:
            same = [_error_type(j.wm_observation) == _error_type(render_observation(j.real)) for j in both_failed]
            out["wm/obs_error_type_agree"] = sum(same) / len(same)
        out["wm/obs_exact"] = sum(j.wm_observation == render_observation(j.real) for j in judgements) / len(judgements)
        return out

    # the run
    def tokenizer_corpus(self, seed: int) -> list[str]:
        return tokenizer_corpus(self.suite.train_tasks(), seed)

    def warm_start(self, policy, chat, policy_cfg, turns: int, seed: int, key_tok: str, progress: bool) -> dict:
        from wmrl.domains.research.warmstart import warm_start, warm_start_key

        tasks = self.suite.train_tasks()
        key = warm_start_key(policy_cfg, key_tok + ("" if chat.builtin else chat.system), tasks, turns, seed)
        return warm_start(policy, chat, tasks, policy_cfg, turns, seed, self.cache_dir, key, progress)

    def rewind(self, step: int, replayed: set[tuple[int, int]]) -> None:
        from wmrl.domains.research.sandbox import rewind

        rewind(self.log_path, step, replayed)

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()


def _error_type(observation: str) -> str:
    """The exception type an observation names ("" when it names none): `...; error: ValueError: ...`."""
    _, sep, rest = observation.partition("; error: ")
    return rest.split(":", 1)[0].strip() if sep else ""


def tokenizer_corpus(tasks: list, seed: int, n_programs: int = 3000) -> list[str]:
    """Texts the built-in tokenizer is trained on: every prompt, grammar programs, feedback lines."""
    from wmrl.domains.research import grammar
    from wmrl.policy.chat import NEXT_TURN

    rng = random.Random(seed)
    corpus = [t.prompt() for t in tasks] * 4
    for _ in range(n_programs):
        corpus.append(grammar.sample_program(rng.choice(["classification", "regression"]), rng, 0.2).source)
    # tasks whose programs differ (tables, scripts): their own programs too, from a separate stream
    # so that the corpus of array-only suites is unchanged
    own = random.Random(seed + 1)
    corpus += [grammar.sample_for(t, own, 0.2).source for t in tasks if grammar.has_own_programs(t) for _ in range(200)]
    for t in tasks:
        for status in Status:
            if status is Status.VALID:
                o = Outcome(t.name, status, t.metric, value=rng.random(), pos=rng.random())
            else:
                o = Outcome(t.name, status, t.metric, stderr_tail="ValueError: Unknown label type: continuous")
            corpus.append(render_observation(o) + "\n" + NEXT_TURN)
    return corpus


# ---- the registry's entry points (wmrl.domains) ---------------------------------------------------

def load_suite(cfg) -> TaskSuite:
    from wmrl.domains.research.tasks import load_suite as load

    return load(cfg.task)


def make(cfg, suite: TaskSuite, run_dir: Path, world: int = 1,
         wrap_world_model: "Callable[[WorldModel], WorldModel] | None" = None) -> ResearchDomain:
    from wmrl.domains.research.sandbox import make_sandbox

    for task in suite.train_tasks() + suite.eval_tasks() + suite.transfer_tasks():  # build missing leaderboards now,
        task.leaderboard()  # not in a sandbox slot mid-step
    world_model = None
    if cfg.env.mode == "wm":
        from wmrl.domains.research.world_model import make_world_model

        world_model = make_world_model(cfg.world_model, seed=cfg.seed, base_model=cfg.policy.model)
        if wrap_world_model is not None:
            world_model = wrap_world_model(world_model)
    log_path = Path(run_dir) / "executions.sqlite"
    sandbox = make_sandbox(sandbox_share(cfg.sandbox, world), log_path=log_path, private_paths=suite.private_paths())
    return ResearchDomain(suite, sandbox, world_model, Path(cfg.task.cache_dir).expanduser(), log_path)


def sandbox_share(sandbox_cfg: Any, world: int) -> Any:
    """One rank's sandbox: `sandbox.slots` (0: every core) shared out over the ranks, at least one each."""
    if world == 1:
        return sandbox_cfg
    total = int(sandbox_cfg.slots) or os.cpu_count() or 1
    return OmegaConf.merge(sandbox_cfg, {"slots": max(1, total // world)})
