"""The RL step's order is the step function's (`wmrl.step.Step`), not the order of a callback list."""
import random

import pytest
import torch

from callbacks import AnchorBudgetCallback, CostCallback, DebiasCallback, DenoiseCallback, WorldModelCallback, step_of
from wmrl.step import STAGES, TIMERS, Step


class Stage:
    """Stands in for a stage's callback: records when it ran and what batch it saw."""

    def __init__(self, name, calls, transform=False):
        self.name, self.calls, self.transform = name, calls, transform

    def __call__(self, batch):
        self.calls.append((self.name, batch))
        if self.transform:
            return f"{batch}>{self.name}", {f"{self.name}/ran": 1.0}
        return {f"{self.name}/ran": 1.0}


def _stub(kind, name, calls):
    stage = Stage(name, calls, transform=name in ("debias", "denoise"))
    cb = kind.__new__(kind)  # the callback's type, for step_of; its behaviour is the recorder's
    cb.__class__ = type(kind.__name__, (kind,), {"__call__": lambda self, b: stage(b)})
    return cb


KINDS = {"debias": DebiasCallback, "denoise": DenoiseCallback, "world_model": WorldModelCallback,
         "anchor_budget": AnchorBudgetCallback, "cost": CostCallback}


def test_the_stages_run_in_the_documented_order_each_on_the_batch_the_previous_returned():
    assert STAGES == ("collect", "debias", "denoise", "update", "world_model", "anchor_budget", "cost")
    calls = []
    step = Step(update=Stage("update", calls), debias=Stage("debias", calls, True), denoise=Stage("denoise", calls, True),
                world_model=Stage("world_model", calls), anchor_budget=Stage("anchor_budget", calls),
                cost=Stage("cost", calls))
    batch, metrics = step("b")
    assert [name for name, _ in calls] == list(STAGES[1:]) and step.ran == list(STAGES)
    # the update and everything after it see the corrected batch
    assert dict(calls) == {"debias": "b", "denoise": "b>debias", **{n: "b>debias>denoise" for n in STAGES[3:]}}
    assert batch == "b>debias>denoise"
    assert {f"{n}/ran" for n in STAGES[1:]} | set(TIMERS.values()) == set(metrics)  # one dict, every stage timed


@pytest.mark.parametrize("seed", range(3))
def test_the_order_of_the_callback_list_does_not_change_the_step(seed):
    calls = []
    callbacks = [_stub(kind, name, calls) for name, kind in KINDS.items()]
    random.Random(seed).shuffle(callbacks)
    step = step_of(callbacks, update=Stage("update", calls))
    step("b")
    assert [name for name, _ in calls] == list(STAGES[1:])


def test_a_dropped_callback_drops_its_stage_and_a_duplicate_is_refused():
    calls = []
    step = step_of([_stub(CostCallback, "cost", calls), _stub(DenoiseCallback, "denoise", calls)],
                   update=Stage("update", calls))
    batch, _ = step("b")
    assert step.ran == ["collect", "denoise", "update", "cost"] and batch == "b>denoise"
    with pytest.raises(ValueError, match="two CostCallbacks"):
        step_of([_stub(CostCallback, "cost", calls), _stub(CostCallback, "cost", calls)], update=Stage("update", calls))


def test_every_stage_metric_reaches_the_tracker_at_the_rl_step(tmp_path):
    """One logging path: the corrections' metrics used to go through Lightning's log_dict (its optimizer-step
    counter), the rest at rl_step; now the module logs the step's one dict at rl_step."""
    from wmrl.module import WMRLModule

    logged = []

    class Logger:
        def log_metrics(self, metrics, step):
            logged.append((step, dict(metrics)))

    module = WMRLModule.__new__(WMRLModule)
    torch.nn.Module.__init__(module)
    module.rl_step = 0
    module.step = Step(update=lambda b: {"reward/train_mean": 0.5}, debias=lambda b: (b, {"debias/pairs": 4.0}))
    module.log_dict = lambda *a, **k: None
    module._trainer_stub = type("T", (), {"loggers": [Logger()]})()
    type(module).trainer = property(lambda self: self._trainer_stub)
    try:
        module.training_step(type("B", (), {"step": 6, "__len__": lambda self: 1})(), 0)
    finally:
        del type(module).trainer
    (step, metrics), = logged
    assert step == 7 and metrics["debias/pairs"] == 4.0 and metrics["reward/train_mean"] == 0.5


def test_the_smoke_metrics_script_names_every_metric_that_moved():
    """scripts/smoke_metrics.py is how a refactor shows it left training as it was."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "smoke_metrics.py"
    spec = importlib.util.spec_from_file_location("smoke_metrics", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    nan = float("nan")
    before = {"a": [[1, 0.5], [2, nan]], "b": [[0, 1.0]], "gone": [[1, 1.0]]}
    after = {"a": [[1, 0.5], [2, nan]], "b": [[1, 1.0]], "new": [[1, 2.0]]}
    assert mod.compare(before, after) == ["only in the first: gone", "only in the second: new", "b: steps [0] -> [1]"]
    assert mod.compare(before, before) == []
