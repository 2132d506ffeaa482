"""How trajectories become a RolloutBatch: rewards, sources, and the strata the corrections learn on."""
import math
import torch

from wmrl.domains.research.outcome import Outcome, Status
from wmrl.rollout import Source, Judgement, Trajectory, Turn, make_batch


def _traj(group, executed, scored, real_status=None, real_reward=math.nan, wm_reward=math.nan, wm_status=None):
    real = Outcome("wine", real_status, reward=real_reward, pos=0.5 if real_status is Status.VALID else None) \
        if real_status else None
    j = Judgement(real=real, wm_reward=wm_reward, wm_var=0.01 if scored else math.nan, wm_status=wm_status)
    return Trajectory("wine", group, [5, 6, 7], [0, 1, 1], [0.0, -1.0, -2.0], turns=[Turn("p", "forest", j)],
                      executed=executed, scored=scored)


def test_anchors_are_filed_under_the_world_models_view_and_train_on_real_rewards():
    trajs = [
        _traj(0, executed=True, scored=True, real_status=Status.RUNTIME_ERROR, real_reward=0.1,
              wm_reward=0.8, wm_status=Status.VALID),  # an anchor the WM got wrong
        _traj(1, executed=False, scored=True, wm_reward=0.7, wm_status=Status.VALID),  # WM only
        _traj(2, executed=True, scored=False, real_status=Status.VALID, real_reward=0.75),  # real only
        _traj(3, executed=True, scored=False, real_status=Status.INFRA_ERROR, real_reward=math.nan),
    ]
    b = make_batch(trajs, pad_id=0, max_length=64)
    assert b.strata["status"][:3] == ["valid", "valid", "valid"]  # the anchor sits where WM-only rows sit
    assert b.reward.tolist()[:3] == [torch.tensor(0.1).item(), torch.tensor(0.7).item(), 0.75]
    assert b.source.tolist() == [Source.REAL, Source.WM, Source.REAL, Source.REAL]
    assert b.is_anchor.tolist() == [True, False, False, False]
    assert b.valid.tolist() == [True, True, True, False]  # an infra_error group is dropped, not scored 0
    assert b.stats["rollout/dropped_groups"] == 1
    assert b.old_logprobs[0].tolist() == [0.0, -1.0, -2.0] and b.loss_mask[0].tolist() == [0.0, 1.0, 1.0]


def test_a_reward_the_checks_decided_is_marked_exact_from_the_world_model_to_the_batch():
    """The environment marks the turns the world model's deterministic checks decided (`prechecked`), the mark
    survives a record round trip and reaches the batch as `turn_wm_exact` (the debias stage leaves those alone)."""
    from types import SimpleNamespace

    from wmrl.config import EnvConfig
    from wmrl.domains.research.domain import ResearchDomain
    from wmrl.env import EnvTimes, Environment
    from wmrl.rollout import TurnItem
    from wmrl.step import Handoff

    task = SimpleNamespace(name="wine", descriptor=lambda: "task=wine", metric="accuracy", interface="estimator")
    domain = ResearchDomain(SimpleNamespace(get=lambda name: task), None)
    status = [Status.MALFORMED, Status.VALID]
    wm = SimpleNamespace(predict=lambda qs: SimpleNamespace(
        reward_mean=torch.tensor([0.0, 0.7]), reward_var=torch.tensor([0.0, 0.01]), malformed=None,
        prechecked=torch.tensor([True, False]),
        outcome=lambda k: Outcome("wine", status[k], reward=[0.0, 0.7][k], pos=None if k == 0 else 0.4)))
    items = [TurnItem("wine", a, action_class="forest") for a in ("", "def build():\n    return 1\n")]
    out = Environment(domain, EnvConfig(mode="wm")).judge(items, [False, False], [True, True], "val", EnvTimes(),
                                                          Handoff(wm))
    assert [j.wm_exact for j in out] == [True, False]
    back = [Judgement.from_dict(j.to_dict(), domain) for j in out]
    assert [j.wm_exact for j in back] == [True, False]
    trajs = [Trajectory("wine", 0, [5, 6], [0, 1], [0.0, -1.0], turns=[Turn(i.action, "forest", j)], executed=False,
                        scored=True) for i, j in zip(items, back)]
    assert make_batch(trajs, pad_id=0, max_length=64).turn_wm_exact[:, 0].tolist() == [True, False]


def test_training_status_counts_take_the_real_status_where_executed_else_the_world_models():
    from wmrl.rollout.collect import status_counts

    trajs = [_traj(0, executed=True, scored=True, real_status=Status.RUNTIME_ERROR, real_reward=0.1, wm_reward=0.8,
                   wm_status=Status.VALID),
             _traj(1, executed=False, scored=True, wm_reward=0.0, wm_status=Status.MALFORMED),
             _traj(2, executed=False, scored=True, wm_reward=0.7, wm_status=Status.VALID)]
    assert status_counts([t.record() for t in trajs]) == {"train/status/runtime_error": 1.0,
                                                          "train/status/malformed": 1.0, "train/status/valid": 1.0}
