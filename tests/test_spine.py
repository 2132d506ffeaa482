"""The step's path reads one way: the DataModule collects for the step it is on (and resumes there),
pushes the policy's weights into the generator before sampling, and every preset builds the parts
it names, wired by construction. No module imports a layer above it."""
import ast
from pathlib import Path

import pytest
import torch

from datamodules.rollout import RolloutDataModule
from wmrl.generation import WeightSync
from wmrl.rollout import RolloutBatch

ROOT = Path(__file__).resolve().parent.parent


class RecordingGenerator:
    """Stands in for a vLLM engine: records every weight sync, in order with the collections."""

    def __init__(self, events):
        self.events = events

    def sync_weights(self, model):
        self.events.append(("sync", float(model.weight.detach().sum())))


class RecordingRollout:
    def __init__(self, events):
        self.events = events

    def collect_train(self, step, tasks, group_size, defer=False, handoff=None):
        self.events.append(("collect", step))
        self.handed = getattr(self, "handed", []) + [handoff]
        n = len(tasks) * group_size
        z = torch.zeros(n)
        return RolloutBatch(torch.zeros(n, 2, dtype=torch.long), torch.ones(n, 2, dtype=torch.long), torch.ones(n, 2),
                            torch.zeros(n, 2), torch.arange(n) // group_size, z, z, z, z, z, torch.zeros(n, dtype=torch.long),
                            torch.zeros(n, dtype=torch.bool), torch.ones(n, dtype=torch.bool), torch.ones(n))

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def _datamodule(events, policy, steps=3):
    return RolloutDataModule(RecordingRollout(events), WeightSync(RecordingGenerator(events), policy), ["t0", "t1"],
                             groups_per_step=2, group_size=2, steps=steps, seed=0, async_anchors=False)


def test_the_datamodule_syncs_the_policys_latest_weights_into_the_generator_before_each_collection():
    events, policy = [], torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        policy.weight.fill_(0.5)
    dm = _datamodule(events, policy)
    batches = []
    for batch in dm.train_dataloader():
        batches.append(batch)
        with torch.no_grad():
            policy.weight.add_(1.0)  # the optimizer step between two collections
    # the weights each collection samples from: two weights, +1 each per step
    assert events == [("sync", 1.0), ("collect", 0), ("sync", 3.0), ("collect", 1), ("sync", 5.0), ("collect", 2)]
    assert [b.step for b in batches] == [0, 1, 2]
    assert all(b.stats["time/rollout_s"] >= 0 for b in batches)


def test_each_collection_gets_by_name_what_the_step_before_it_left():
    """The back-edges are one argument: the DataModule hands every collection the step's `Handoff` (the world
    model, anchor budget and debiaser its stages update in place), the very object the step holds."""
    from callbacks import step_of
    from wmrl.step import Handoff

    events, policy = [], torch.nn.Linear(2, 1, bias=False)
    handoff = Handoff(world_model=object(), budget=object(), debiaser=object())
    step = step_of([], update=lambda b: {}, handoff=handoff)
    dm = RolloutDataModule(RecordingRollout(events), WeightSync(RecordingGenerator(events), policy), ["t0", "t1"],
                           groups_per_step=2, group_size=2, steps=2, seed=0, async_anchors=False, handoff=step.handoff)
    list(dm.train_dataloader())
    assert len(dm.rollout.handed) == 2 and all(h is handoff for h in dm.rollout.handed) and step.handoff is handoff


def test_evaluation_after_a_step_reuses_the_sync_of_that_step():
    events = []
    sync = WeightSync(RecordingGenerator(events), torch.nn.Linear(2, 1, bias=False))
    sync(3), sync(3), sync(4)
    assert [e[0] for e in events] == ["sync", "sync"]


def test_a_restored_datamodule_collects_from_the_step_after_its_checkpoint():
    events, policy = [], torch.nn.Linear(2, 1, bias=False)
    dm = _datamodule(events, policy, steps=4)
    it = iter(dm.train_dataloader())
    next(it), next(it)
    state = dm.state_dict()  # as ModelCheckpoint saves it while step 1 trains
    resumed_events = []
    resumed = _datamodule(resumed_events, policy, steps=4)
    resumed.load_state_dict(state)
    assert [b.step for b in resumed.train_dataloader()] == [2, 3]
    assert [e for e in resumed_events if e[0] == "collect"] == [("collect", 2), ("collect", 3)]
    assert resumed_events[0][0] == "sync"  # a resumed generator was built before the checkpoint loaded


# ---- layers ----------------------------------------------------------------------------------

def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _files(*dirs):
    return [p for d in dirs for p in sorted((ROOT / d).rglob("*.py"))]


LAYERS = {  # a file under the key may not import any module starting with these
    "wmrl": ("callbacks", "datamodules", "wmrl.recipe", "benchmarks"),
    "callbacks": ("datamodules", "wmrl.recipe", "benchmarks"),
    "datamodules": ("callbacks", "wmrl.recipe", "benchmarks"),
}
PURE = ("wmrl/corrections", "wmrl/rl")  # the math: no Lightning, no rollout, no environment


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_no_module_imports_a_layer_above_it(layer):
    bad = []
    for path in _files(layer):
        if path == ROOT / "wmrl" / "recipe.py":
            continue  # the recipe is the top: it assembles every layer
        bad += [f"{path.relative_to(ROOT)} imports {m}" for m in _imports(path) if m.startswith(LAYERS[layer])]
    assert bad == []


def test_the_math_is_pure():
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in _files(*PURE) for m in _imports(p)
           if m.startswith(("lightning", "wmrl.rollout", "wmrl.env", "wmrl.module", "wmrl.domains"))]
    assert bad == []


def test_no_part_searches_the_trainers_callbacks_or_probes_another_with_hasattr():
    offenders = []
    for path in _files("wmrl", "callbacks", "datamodules"):
        text = path.read_text()
        if "trainer.callbacks" in text:
            offenders.append(f"{path.relative_to(ROOT)}: trainer.callbacks")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "hasattr":
                # inspecting agent programs (module attributes of sklearn etc.) is not probing a part
                if path.relative_to(ROOT).as_posix() not in ("wmrl/domains/research/world_model/catalog.py",):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: hasattr")
    assert offenders == []


# The method (rollout loop, routing, anchoring, corrections, GRPO, the step, cost, tracking, report, benchmark,
# and the recipe and callbacks that assemble them) knows a domain only through `wmrl.domain` and reaches one by
# its name (`wmrl.domains`), so that a second domain plugs in beside the research one without a fork.
METHOD = ("wmrl/rollout", "wmrl/env.py", "wmrl/background.py", "wmrl/anchoring", "wmrl/corrections", "wmrl/rl",
          "wmrl/step.py", "wmrl/module.py", "wmrl/evaluate.py", "wmrl/report", "wmrl/benchmark", "wmrl/summary.py",
          "wmrl/fidelity.py", "wmrl/strata.py", "wmrl/distributed.py", "wmrl/tracking.py", "wmrl/generation",
          "wmrl/policy", "wmrl/domain.py", "wmrl/domains/__init__.py", "wmrl/recipe.py", "wmrl/config.py",
          "wmrl/stop.py", "wmrl/seeding.py", "datamodules", "callbacks", "train.py")
DOMAINS = "wmrl.domains."  # a domain's own modules: wmrl.domains.<name>...


def _method_files():
    files = [p for m in METHOD for p in ([ROOT / m] if m.endswith(".py") else _files(m))]
    assert len(files) > 40 and all(p.exists() for p in files)
    return files


def test_the_method_imports_no_domain():
    edges = {p.relative_to(ROOT).as_posix(): sorted(m for m in _imports(p) if m.startswith(DOMAINS))
             for p in _method_files()}  # at the top or in a function, typing-only too
    assert {f: m for f, m in edges.items() if m} == {}


def test_every_module_is_the_method_or_a_domain():
    """A new module under wmrl/ must be placed: in the method (and checked above) or in a domain."""
    method = set(_method_files())
    stray = [p.relative_to(ROOT).as_posix() for p in _files("wmrl")
             if p not in method and not p.is_relative_to(ROOT / "wmrl" / "domains")
             and p.name not in ("__init__.py", "__main__.py")]
    assert stray == []


def test_the_research_domain_implements_the_seam():
    """Every method of `wmrl.domain.Domain` exists on the research domain with the protocol's parameters."""
    import inspect

    from wmrl.domain import Domain
    from wmrl.domains.research.domain import ResearchDomain

    wanted = {n for n, v in vars(Domain).items() if callable(v) and not n.startswith("_")}
    assert {"action", "submit", "query", "observe", "examples", "rewind", "close"} <= wanted
    for name in wanted:
        ours = inspect.signature(getattr(ResearchDomain, name)).parameters
        theirs = inspect.signature(getattr(Domain, name)).parameters
        assert list(ours) == list(theirs), name
    for attr in ("name", "suite", "world_model", "slots"):
        assert attr in {f for f in ResearchDomain.__dataclass_fields__} | set(dir(ResearchDomain)), attr


def test_collection_does_not_reach_into_the_updates_math():
    """The rollout side (environment, rollout loop) runs before the update: it may use what the update's stages
    fitted (the debiaser, handed over), never import their math; routing predicts advantages through anchoring."""
    bad = []
    for path in [ROOT / "wmrl" / "env.py", *_files("wmrl/rollout")]:
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and getattr(node.test, "id", "") == "TYPE_CHECKING" for n in ast.walk(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and id(node) not in typing_only and node.module \
                    and node.module.startswith(("wmrl.rl", "wmrl.corrections")):
                bad.append(f"{path.relative_to(ROOT)} imports {node.module}")
    assert bad == []
