"""End to end on a synthetic bandit: the corrections change which arm GRPO learns, through the
same callbacks, group advantages and policy loss the trainer uses. The WM's bias depends on the
arm's class (forests overrated by 0.3), so it does not cancel inside a GRPO group."""
import pytest

from bandit import default_bandit, gradient_variance, train
from callbacks import correction_callbacks
from wmrl.config import load_config

BANDIT = default_bandit()
STEPS = 80


def corrections(*overrides):
    return correction_callbacks(load_config(list(overrides)).callbacks)[1]


def test_the_bandit_is_solvable_with_real_rewards_and_the_wm_points_elsewhere():
    assert BANDIT.best_arm == 3 and BANDIT.arm_class[3] == "linear"
    wm_best = max(range(9), key=lambda a: BANDIT.true_reward[a] + BANDIT.class_bias[BANDIT.arm_class[a]])
    assert BANDIT.arm_class[wm_best] == "forest"
    every_group_real = train(BANDIT, [], steps=STEPS, anchor_rate=1.0)
    assert every_group_real.greedy_arm == BANDIT.best_arm


@pytest.mark.parametrize("overrides", [["experiment=wm_raw"],
                                       ["callbacks.debias.method=offset", "callbacks.debias.stratify_by=[]",
                                        "callbacks.denoise=null"]], ids=["raw", "global_offset"])
def test_raw_or_globally_shifted_wm_rewards_converge_to_the_overrated_class(overrides):
    run = train(BANDIT, corrections(*overrides), steps=STEPS)
    assert BANDIT.arm_class[run.greedy_arm] == "forest" and run.probs[run.greedy_arm] > 0.9
    assert run.true_value[-1] < BANDIT.true_reward[BANDIT.best_arm] - 0.1


@pytest.mark.parametrize("method", ["offset", "isotonic"])
def test_stratified_debiasing_finds_the_true_best_arm(method):
    run = train(BANDIT, corrections(f"callbacks.debias.method={method}", "callbacks.denoise=null"), steps=STEPS)
    assert run.greedy_arm == BANDIT.best_arm and run.probs[run.greedy_arm] > 0.9
    assert run.true_value[-1] > BANDIT.true_reward[BANDIT.best_arm] - 0.02
    assert run.metrics["debias/mae_after"] < run.metrics["debias/mae_before"]


def test_inverse_variance_denoising_lowers_the_gradient_noise():
    """Same rollouts with and without weights. Weights rescale the gradient (to which Adam is
    invariant), so the measure is its relative variance trace(Cov g) / |E g|². Debiasing is the
    offset rectifier, which keeps the WM's noise, so σ² is the variance of the corrected score;
    an isotonic map already shrinks noisy scores toward E[r | r̂], and the raw σ² overstates
    what noise it leaves."""
    debias_only = gradient_variance(BANDIT, corrections("callbacks.debias.method=offset", "callbacks.denoise=null"),
                                    batches=200)
    both = gradient_variance(BANDIT, corrections("callbacks.debias.method=offset",
                                                 "callbacks.denoise.method=inverse_variance"), batches=200)
    assert both["noise_to_signal"] < 0.85 * debias_only["noise_to_signal"], (both, debias_only)
