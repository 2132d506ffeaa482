"""The environment spends real executions as the anchor budget says: per-trajectory anchors chosen
after the world model scored them (with their inclusion probabilities), and every trajectory of a
class the guard flagged executed whatever the budget."""
from types import SimpleNamespace

import numpy as np

from wmrl.config import EnvConfig
from wmrl.corrections import AnchorBudget
from wmrl.env import Environment
from wmrl.rollout import Judgement, Trajectory, Turn


def _env(**overrides) -> Environment:
    cfg = EnvConfig(**{"mode": "wm", "warmup_steps": 0, **overrides})
    return Environment(sandbox=None, world_model=SimpleNamespace(), env_cfg=cfg, suite=None,
                       budget=AnchorBudget.from_config(cfg))


def _trajs(variances, classes=None, group_size=4):
    classes = classes or ["linear"] * len(variances)
    return [Trajectory("wine", i // group_size, [1], [0.0], [0.0], scored=True,
                       turns=[Turn("p", c, Judgement(wm_reward=0.5 + 0.01 * i, wm_var=v, wm_status="valid"))])
            for i, (v, c) in enumerate(zip(variances, classes))]


def test_random_selection_anchors_whole_groups_before_sampling():
    env = _env(anchor_selection="random", anchor_rate=0.25)
    executed, scored = env.routing(8, step=5, rng=__import__("random").Random(0))
    assert sum(executed) == 2 and all(scored)
    todo, prob = env.after_scoring(_trajs([0.01] * 8), np.random.default_rng(0))
    assert not todo.any() and (prob == 1).all()  # nothing more to choose after scoring


def test_uncertainty_selection_executes_where_the_world_model_is_least_sure():
    env = _env(anchor_selection="uncertainty", anchor_rate=0.25, anchor_floor=0.2)
    assert env.routing(4, step=5, rng=__import__("random").Random(0)) == ([False] * 4, [True] * 4)
    variances = [0.0001] * 12 + [0.04] * 4
    counts, probs = np.zeros(16), None
    for seed in range(400):
        todo, probs = env.after_scoring(_trajs(variances), np.random.default_rng(seed))
        assert todo.sum() == 4  # rate x N trajectories
        counts += todo
    assert np.isclose(probs.sum(), 4.0) and probs[12:].min() > 5 * probs[:12].max()
    assert np.allclose(counts / 400, probs, atol=0.06)  # chosen with the recorded probability
    assert probs.min() >= 0.2 * 0.25 - 1e-9  # the uniform floor bounds 1/p


def test_a_flagged_class_is_executed_whatever_the_budget():
    env = _env(anchor_selection="random", anchor_rate=0.25)
    env.budget.guard.flagged = {"forest"}
    classes = ["forest", "linear"] * 4
    todo, prob = env.after_scoring(_trajs([0.01] * 8, classes), np.random.default_rng(0))
    assert todo.tolist() == [c == "forest" for c in classes] and (prob[todo] == 1).all()
