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
