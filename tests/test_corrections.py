"""The estimators behind debiasing and denoising, on synthetic data with CLASS-DEPENDENT WM bias.

A constant offset of the WM cancels inside a GRPO group; an offset that depends on the class
of the experiment does not, so every debiasing test below uses one.
"""
import io
import json

import numpy as np
import pytest
import torch

from wmrl.corrections import (Debiaser, IsotonicMap, OffsetRectifier, aggregate_turns, anchor_upweight_weights,
                              best_turn, correct_turns, fit_isotonic, inverse_variance_weights,
                              turn_pairs, within_group_residual_s2)
from wmrl.corrections.isotonic import apply_isotonic
from wmrl.rl import group_advantages, group_reward_std

CLASS_BIAS = {"forest": 0.25, "linear": -0.10, "boost": 0.0}


def anchor_pairs(n, seed=0, noise=0.05):
    """Real scores in [0, 1]; the WM adds a bias that depends on the action class, plus noise."""
    rng = np.random.default_rng(seed)
    cls = rng.choice(list(CLASS_BIAS), n)
    real = rng.uniform(0.0, 1.0, n)
    wm = real + np.array([CLASS_BIAS[c] for c in cls]) + rng.normal(0.0, noise, n)
    return wm, real, [(c,) for c in cls]


def test_isotonic_is_identity_until_min_pairs():
    wm, real, _ = anchor_pairs(10)
    iso = IsotonicMap(min_pairs=10, refit_every=4, buffer_size=100)
    iso.update(wm[:9], real[:9])
    probe = np.linspace(-0.2, 1.2, 15)
    assert np.array_equal(iso.correct(probe), probe) and iso.n == 0
    iso.update(wm[9:], real[9:])
    assert iso.n == 10 and not np.allclose(iso.correct(probe), probe)
    assert np.all(np.diff(iso.correct(probe)) >= 0)  # monotone


def test_isotonic_refits_every_refit_every_new_pairs():
    wm, real, _ = anchor_pairs(20, seed=1)
    iso = IsotonicMap(min_pairs=4, refit_every=5, buffer_size=100)
    iso.update(wm[:4], real[:4])
    assert iso.n == 4
    knots = iso.knots
    iso.update(wm[4:8], real[4:8])  # 4 new pairs < refit_every: the old map stays
    assert iso.n == 4 and iso.knots == knots
    iso.update(wm[8:9], real[8:9])  # the 5th new pair triggers a refit on all 9
    assert iso.n == 9 and iso.knots != knots


def test_isotonic_buffer_is_a_bounded_fifo():
    wm, real, _ = anchor_pairs(50, seed=2)
    iso = IsotonicMap(min_pairs=4, refit_every=1, buffer_size=20)
    for i in range(0, 50, 5):
        iso.update(wm[i:i + 5], real[i:i + 5])
    assert len(iso.wm) == 20 and list(iso.wm) == wm[-20:].tolist() and list(iso.real) == real[-20:].tolist()
    assert iso.n == 20


def test_offset_rectifier_removes_a_constant_bias():
    rng = np.random.default_rng(3)
    real = rng.uniform(0, 1, 2000)
    wm = real + 0.2 + rng.normal(0, 0.1, 2000)
    off = OffsetRectifier(half_life=200.0)
    for i in range(0, 2000, 16):
        off.update(wm[i:i + 16], real[i:i + 16])
    assert abs(np.mean(wm - real)) > 0.19
    assert abs(np.mean(off.correct(wm) - real)) < 0.02


def test_offset_half_life_weights_newer_pairs():
    off = OffsetRectifier(half_life=1.0)
    off.update(np.array([1.0, 0.0]), np.zeros(2))  # errors 1 (older) and 0 (newer, weight 1 vs 0.5)
    assert off.bias() == pytest.approx(0.5 / 1.5)
    assert off.n == pytest.approx(1.5)


@pytest.mark.parametrize("method", ["offset", "isotonic"])
def test_stratified_debiasing_removes_class_dependent_bias_the_global_fit_leaves(method):
    wm, real, keys = anchor_pairs(3000, seed=4)
    fits = {name: Debiaser(method, strata, kappa=8.0, min_pairs=16, buffer_size=3000, half_life=float("inf"))
            for name, strata in [("global", []), ("stratified", ["action_class"])]}
    for d in fits.values():
        for i in range(0, 2000, 32):
            d.update(wm[i:i + 32], real[i:i + 32], keys[i:i + 32])
    test_wm, test_real, test_keys = wm[2000:], real[2000:], keys[2000:]
    for cls in CLASS_BIAS:
        rows = np.array([k == (cls,) for k in test_keys])
        err = {name: np.mean(d.correct(test_wm, test_keys)[rows] - test_real[rows]) for name, d in fits.items()}
        assert abs(err["stratified"]) < 0.03, (cls, err)
        if cls != "boost":  # the global fit splits the difference; the biased classes stay biased
            assert abs(err["global"]) > 0.08, (cls, err)


@pytest.mark.parametrize("method", ["offset", "isotonic"])
def test_stratified_debiasing_restores_the_ranking_inside_a_group(method):
    wm, real, keys = anchor_pairs(1000, seed=5)
    d = Debiaser(method, ["action_class"], min_pairs=16, buffer_size=1000, half_life=float("inf"))
    d.update(wm, real, keys)
    # one group: a linear model truly better (0.6) than a forest (0.5); the WM ranks the forest first
    group_real = np.array([0.6, 0.5])
    group_keys = [("linear",), ("forest",)]
    group_wm = group_real + np.array([CLASS_BIAS["linear"], CLASS_BIAS["forest"]])
    assert group_wm[0] < group_wm[1]
    corrected = d.correct(group_wm, group_keys)
    assert corrected[0] > corrected[1]


@pytest.mark.parametrize("method", ["offset", "isotonic"])
def test_shrinkage_limits(method):
    big = 30000
    wm, real, keys = anchor_pairs(big, seed=6)
    d = Debiaser(method, ["action_class"], kappa=8.0, min_pairs=16, buffer_size=big, half_life=float("inf"))
    d.update(wm, real, keys)
    probe = np.linspace(0.0, 1.2, 13)
    # n_s = 0: a stratum never seen gets exactly the global fit
    unseen = d.correct(probe, [("svm",)] * len(probe))
    assert np.array_equal(unseen, d.global_fit.correct(probe))
    # n_s -> inf: the stratum's own fit
    forest = d.correct(probe, [("forest",)] * len(probe))
    own = d.strata[("forest",)].correct(probe)
    shrink = 8.0 / (d.strata[("forest",)].n + 8.0)
    assert shrink < 1e-3
    assert np.allclose(forest, own, atol=2 * shrink) and not np.allclose(forest, d.global_fit.correct(probe), atol=0.05)
    if method == "offset":  # b̂_s = (n_s·b̄_s + κ·b̂)/(n_s + κ), exactly
        n_s, b_s, b = d.strata[("forest",)].n, d.strata[("forest",)].bias(), d.global_fit.bias()
        assert d.bias(("forest",)) == pytest.approx((n_s * b_s + 8.0 * b) / (n_s + 8.0))


def test_isotonic_stratum_counts_only_from_min_stratum_pairs():
    wm, real, keys = anchor_pairs(200, seed=8)
    d = Debiaser("isotonic", ["action_class"], min_pairs=16, min_stratum_pairs=4)
    d.update(wm, real, keys)
    d.update([0.5, 0.6, 0.7], [0.1, 0.2, 0.3], [("gp",)] * 3)  # 3 pairs: the stratum has no fit yet
    probe = np.array([0.55, 0.65])
    assert np.array_equal(d.correct(probe, [("gp",)] * 2), d.global_fit.correct(probe))
    d.update([0.8], [0.4], [("gp",)])
    assert d.strata[("gp",)].n == 4
    assert not np.allclose(d.correct(probe, [("gp",)] * 2), d.global_fit.correct(probe))


@pytest.mark.parametrize("method", ["offset", "isotonic"])
def test_state_dict_round_trip_gives_identical_corrections(method):
    wm, real, keys = anchor_pairs(300, seed=9)
    d = Debiaser(method, ["action_class"], min_pairs=16, refit_every=8, buffer_size=128)
    for i in range(0, 290, 29):
        d.update(wm[i:i + 29], real[i:i + 29], keys[i:i + 29])
    state = d.state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    restored_state = torch.load(buf, weights_only=True)  # what a Lightning checkpoint allows
    json.dumps(state)
    e = Debiaser(method, ["action_class"], min_pairs=16, refit_every=8, buffer_size=128)
    e.load_state_dict(restored_state)
    probe, probe_keys = wm[:50], keys[:50]
    assert np.array_equal(d.correct(probe, probe_keys), e.correct(probe, probe_keys))
    assert json.dumps(d.table()) == json.dumps(e.table())
    # and both keep learning the same way
    d.update(wm[290:], real[290:], keys[290:])
    e.update(wm[290:], real[290:], keys[290:])
    assert np.array_equal(d.correct(probe, probe_keys), e.correct(probe, probe_keys))


def test_table_reports_out_of_sample_residuals_per_stratum():
    wm, real, keys = anchor_pairs(2000, seed=10)
    d = Debiaser("offset", ["action_class"], half_life=float("inf"))
    for i in range(0, 2000, 40):
        d.update(wm[i:i + 40], real[i:i + 40], keys[i:i + 40])
    rows = {r["stratum"]: r for r in d.table()}
    assert set(rows) == {"*", "forest", "linear", "boost"}
    assert rows["*"]["pairs"] == 2000
    assert rows["forest"]["resid_before"] == pytest.approx(0.25, abs=0.01)
    assert abs(rows["forest"]["resid_after"]) < 0.03
    assert rows["forest"]["bias"] == pytest.approx(0.25, abs=0.01)
    assert rows["linear"]["bias"] == pytest.approx(-0.10, abs=0.01)


def test_inverse_variance_weights_normalise_clip_and_floor():
    var = torch.tensor([0.01, 0.04, 0.09, float("nan"), 0.5, 0.02])
    is_real = torch.tensor([False, False, False, True, False, False])
    valid = torch.tensor([True, True, True, True, True, False])
    w = inverse_variance_weights(var, is_real, sigma_floor=0.1, w_min=0.2, w_max=3.0, valid=valid)
    precision = 1 / (torch.tensor([0.01, 0.04, 0.09, 0.0, 0.5]) + 0.01)
    expected = (precision / precision.mean()).clamp(0.2, 3.0)
    assert torch.allclose(w[:5], expected)
    assert w[5] == 0.0
    assert w[3] == w[:5].max()  # the real row sits at the noise floor: most trusted
    unclipped = inverse_variance_weights(var, is_real, 0.1, 0.0, float("inf"), valid)
    assert unclipped[valid].mean().item() == pytest.approx(1.0)
    all_real = inverse_variance_weights(torch.full((4,), float("nan")), torch.ones(4, dtype=torch.bool), 0.05, 0.2, 3.0)
    assert torch.equal(all_real, torch.ones(4))


def test_inverse_variance_weighting_lowers_the_variance_of_a_weighted_mean():
    """Heteroscedastic observations of one mean: inverse-variance weights beat uniform ones."""
    gen = torch.Generator().manual_seed(0)
    std = torch.tensor([0.05, 0.05, 0.1, 0.2, 0.4, 0.8] * 4)
    w = inverse_variance_weights(std**2, torch.zeros_like(std, dtype=torch.bool), 0.05, 0.2, 3.0)
    samples = 0.5 + std * torch.randn(4000, len(std), generator=gen)
    uniform_mean = samples.mean(1)
    weighted_mean = (samples * w).sum(1) / w.sum()
    assert weighted_mean.mean().item() == pytest.approx(0.5, abs=0.01)  # still unbiased
    assert weighted_mean.var().item() < 0.5 * uniform_mean.var().item()


def test_within_group_residual_s2():
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    real = torch.tensor([0.1, 0.5, 0.9, 0.2, 0.4, 0.6])
    assert within_group_residual_s2(real.clone(), real, groups) == pytest.approx(0.0)
    # an offset per group cancels inside the group: no residual
    assert within_group_residual_s2(real + torch.tensor([0.3] * 3 + [-0.2] * 3), real, groups) == pytest.approx(0.0, abs=1e-12)
    # a class-dependent offset inside a group does not cancel
    cls_bias = torch.tensor([0.25, 0.0, 0.0, 0.25, 0.0, 0.0])
    s2 = within_group_residual_s2(real + cls_bias, real, groups)
    centred_bias = cls_bias - cls_bias.view(2, 3).mean(1).repeat_interleave(3)
    centred_real = real - real.view(2, 3).mean(1).repeat_interleave(3)
    assert s2 == pytest.approx((centred_bias**2).sum().item() / (centred_real**2).sum().item(), rel=1e-5)
    assert within_group_residual_s2(torch.rand(4), torch.full((4,), 0.3), torch.tensor([0, 0, 1, 1])) is None


@pytest.mark.parametrize("s2", [0.0, 0.3, 1.5, 100.0])
def test_anchor_upweight_weights_between_one_and_w_max(s2):
    is_anchor = torch.tensor([True, True, False, False, True])
    valid = torch.tensor([True, True, True, True, False])
    w = anchor_upweight_weights(is_anchor, s2, c=1.0, w_max=3.0, valid=valid)
    assert torch.all(w[:4] >= 1.0) and torch.all(w[:4] <= 3.0)
    assert torch.equal(w[2:4], torch.ones(2)) and w[4] == 0.0
    assert w[0].item() == pytest.approx(min(1.0 + s2, 3.0))


def flat_then_steep(n, seed, flat_sd=0.1, steep_sd=0.03):
    """Real rewards flat (0.3 ± flat_sd) for r̂ < 0.5, then rising with slope 1.2 (± steep_sd)."""
    rng = np.random.default_rng(seed)
    wm = rng.uniform(0.0, 1.0, n)
    mean = np.where(wm < 0.5, 0.3, 0.3 + 1.2 * (wm - 0.5))
    real = mean + rng.normal(0.0, np.where(wm < 0.5, flat_sd, steep_sd))
    return wm, real


def test_corrected_variance_on_a_flat_stretch_is_the_real_scatter_not_zero():
    wm, real = flat_then_steep(512, seed=11)
    d = Debiaser("isotonic", min_pairs=16, buffer_size=512)
    d.update(wm, real)
    probe, wm_var = np.array([0.15, 0.3]), np.full(2, 0.0004)
    slope_only = d.slope(probe) ** 2 * wm_var  # what the variance was before: σ²·f′²
    assert np.all(slope_only < 2e-4)
    var = d.corrected_variance(probe, wm_var)
    assert np.all((var > 0.7 * 0.1**2) & (var < 1.4 * 0.1**2)), var  # ≈ the true scatter 0.01


def test_corrected_variance_on_a_steep_stretch_stays_small():
    wm, real = flat_then_steep(512, seed=12)
    d = Debiaser("isotonic", min_pairs=16, buffer_size=512)
    d.update(wm, real)
    probe = np.array([0.85, 0.95])
    var = d.corrected_variance(probe, np.full(2, 0.0004))
    truth = 0.03**2 + 1.2**2 * 0.0004
    assert np.all((var > 0.5 * truth) & (var < 3 * truth)), (var, truth)
    assert np.all(var < d.corrected_variance(np.array([0.2]), np.array([0.0004])))  # flat scatter is larger


def test_residual_variance_is_out_of_sample():
    """An in-sample isotonic fit passes through block means and absorbs part of the scatter."""
    wm, real = flat_then_steep(256, seed=13, flat_sd=0.1, steep_sd=0.1)
    iso = IsotonicMap(min_pairs=16, buffer_size=256)
    iso.update(wm, real)
    in_sample = np.mean((real - iso.correct(wm)) ** 2)
    out_of_sample = float(np.mean(iso.residual_variance(wm)))
    true_mean = np.where(wm < 0.5, 0.3, 0.3 + 1.2 * (wm - 0.5))
    realised = np.mean((real - true_mean) ** 2)  # the scatter around the true map in this sample
    assert in_sample < 0.95 * realised < realised < out_of_sample < 1.3 * realised, (in_sample, realised, out_of_sample)


def test_corrected_variance_per_stratum_shrinks_to_global():
    rng = np.random.default_rng(14)
    n = 1200
    cls = rng.choice(["noisy", "clean"], n)
    wm = rng.uniform(0, 1, n)
    real = wm + rng.normal(0, np.where(cls == "noisy", 0.2, 0.02))
    keys = [(c,) for c in cls]
    d = Debiaser("isotonic", ["action_class"], kappa=8.0, min_pairs=16, buffer_size=n)
    d.update(wm, real, keys)
    probe = np.full(3, 0.5)
    var = d.corrected_variance(probe, np.zeros(3), [("noisy",), ("clean",), ("unseen",)])
    assert var[0] == pytest.approx(0.2**2, rel=0.3) and var[1] < 0.2 * var[0]
    assert var[2] == pytest.approx(d.residual_variance(probe[:1])[0])  # no own fit: the global scatter
    assert var[1] < var[2] < var[0]


def test_corrected_variance_is_the_wm_variance_while_the_map_is_the_identity():
    d = Debiaser("isotonic", min_pairs=16)
    assert np.allclose(d.corrected_variance(np.array([0.2, 0.7]), np.array([0.01, 0.04])), [0.01, 0.04])


def test_offset_corrected_variance_is_the_error_variance_plus_the_wm_variance():
    rng = np.random.default_rng(15)
    wm_minus_real = 0.2 + rng.normal(0, 0.1, 4000)
    real = rng.uniform(0, 1, 4000)
    d = Debiaser("offset", half_life=float("inf"))
    d.update(real + wm_minus_real, real)
    var = d.corrected_variance(np.array([0.5]), np.array([0.01]))
    assert var[0] == pytest.approx(0.1**2 + 0.01, rel=0.05)


def test_correct_each_turn_in_its_own_stratum_then_take_the_max():
    """Turn 1 is a forest (the WM over-rates forests by 0.25), turn 2 a linear model (under-rated by 0.10)."""
    wm, real, keys = anchor_pairs(3000, seed=16, noise=0.0)
    d = Debiaser("offset", ["action_class"], kappa=8.0, half_life=float("inf"))
    d.update(wm, real, keys)
    real_turns = np.array([[0.50, 0.55]])
    wm_turns = real_turns + np.array([[CLASS_BIAS["forest"], CLASS_BIAS["linear"]]])  # [[0.75, 0.45]]
    keys_turns = [[("forest",), ("linear",)]]
    corrected, _ = correct_turns(d, wm_turns, keys_turns)
    per_turn_then_max = aggregate_turns(corrected)[0]
    best = best_turn(wm_turns)[0]
    max_then_correct = d.correct([np.nanmax(wm_turns)], [keys_turns[0][best]])[0]  # the old order
    assert per_turn_then_max == pytest.approx(0.55, abs=0.01)  # the real max came from the linear turn
    assert max_then_correct == pytest.approx(0.50, abs=0.01)
    assert best_turn(corrected)[0] == 1


def test_aggregate_turns_ignores_missing_turns():
    x = np.array([[0.2, np.nan, 0.5], [np.nan, np.nan, np.nan], [0.1, 0.3, np.nan]])
    assert np.allclose(aggregate_turns(x), [0.5, np.nan, 0.3], equal_nan=True)
    assert best_turn(x).tolist() == [2, -1, 1]


def test_every_executed_turn_of_an_anchor_is_its_own_pair_in_its_own_stratum():
    wm = np.array([[0.75, 0.45], [0.6, np.nan]])
    real = np.array([[0.50, 0.55], [0.6, np.nan]])
    keys = [[("forest",), ("linear",)], [("boost",), ("boost",)]]
    pw, pr, pk, sw = turn_pairs(wm, real, keys, sample_weight=np.array([2.0, 4.0]))
    assert pw.tolist() == [0.75, 0.45, 0.6] and pr.tolist() == [0.50, 0.55, 0.6]
    assert pk == [("forest",), ("linear",), ("boost",)] and sw.tolist() == [2.0, 2.0, 4.0]
    d = Debiaser("offset", ["action_class"], half_life=float("inf"))
    d.update(pw, pr, pk, sw)
    assert d.strata[("forest",)].bias() == pytest.approx(0.25) and d.strata[("linear",)].bias() == pytest.approx(-0.10)


def test_weights_act_on_the_advantage_scale_noise_hurts_a_near_tied_group_more():
    """Equal WM variance, different reward spreads: the narrow group's ranking is the noisy one."""
    reward = torch.tensor([0.2, 0.5, 0.8, 0.35, 0.5, 0.65,   0.48, 0.5, 0.52, 0.49, 0.5, 0.51])
    groups = torch.tensor([0] * 6 + [1] * 6)  # group 0: s_g ≈ 0.2; group 1: s_g ≈ 0.015
    var = torch.full((12,), 0.01)
    is_real = torch.zeros(12, dtype=torch.bool)
    s_g = group_reward_std(reward, groups)
    assert s_g[0] > 10 * s_g[6]
    w = inverse_variance_weights(var, is_real, 0.05, 0.0, float("inf"), group_std=s_g)
    assert torch.all(w[:6] > 5 * w[6:])
    noise = var / s_g**2  # the formula: w ∝ 1/(σ²/s_g² + 1)
    expected = 1 / (noise + 1.0)
    assert torch.allclose(w, expected / expected.mean())
    legacy = inverse_variance_weights(var, is_real, 0.05, 0.0, float("inf"))  # the reward scale cannot tell them apart
    assert torch.allclose(legacy[:6], legacy[6:])


def test_tied_groups_keep_weight_one_and_do_not_shift_the_normalisation():
    reward = torch.tensor([0.3, 0.3, 0.3, 0.1, 0.5, 0.9])
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    var = torch.tensor([0.01, 0.01, 0.01, 0.0, 0.04, float("nan")])
    is_real = torch.tensor([False, False, False, True, False, False])
    w = inverse_variance_weights(var, is_real, 0.05, 0.2, 3.0, group_std=group_reward_std(reward, groups))
    assert torch.equal(w[:3], torch.ones(3))
    assert w[3:].mean().item() == pytest.approx(1.0, abs=0.2) and w[5] == pytest.approx(0.2)  # NaN: least trusted
    assert w[3] > w[4] > w[5]


# measures of the tests below (not used in training)
def weight_share(weight: torch.Tensor, rows: torch.Tensor, advantages: torch.Tensor | None = None) -> float:
    """Share of the policy gradient's magnitude carried by `rows`: Σ_rows w|A| / Σ w|A| (|A| = 1 if not given)."""
    mass = weight.double() * (1.0 if advantages is None else advantages.double().abs())
    total = float(mass.sum())
    return float(mass[rows.bool()].sum()) / total if total > 0 else float("nan")


def crossfit_calibration(wm: np.ndarray, real: np.ndarray, group_ids: np.ndarray, folds: int = 5,
                         sample_weight: np.ndarray | None = None) -> np.ndarray:
    """Calibrated scores f_{-k}(r̂_i), each from an isotonic map fitted without i's fold of groups.

    Folds are made of whole groups, so a group's within-group residual is measured by a map that
    never saw any of its pairs. Feed the result to `within_group_residual_s2` for a cross-fitted s².
    """
    wm, real = np.asarray(wm, float), np.asarray(real, float)
    _, g = np.unique(np.asarray(group_ids), return_inverse=True)
    k = int(min(max(2, folds), g.max() + 1))
    fold = g % k
    sw = np.ones(len(wm)) if sample_weight is None else np.asarray(sample_weight, float)
    out = np.empty(len(wm))
    for f in range(k):
        test = fold == f
        out[test] = apply_isotonic(fit_isotonic(wm[~test], real[~test], sw[~test]), wm[test])
    return out


def _batch_with_anchor_groups(wm_var, n_groups=8, size=8, anchor_groups=2, seed=17):
    gen = torch.Generator().manual_seed(seed)
    reward = torch.rand(n_groups, size, generator=gen) * 0.6 + 0.2  # rewards spread s_g ≈ 0.17 per group
    groups = torch.arange(n_groups).repeat_interleave(size)
    is_real = groups < anchor_groups
    return reward.flatten(), groups, is_real, torch.where(is_real, float("nan"), wm_var)


def test_anchors_no_longer_dominate_the_gradient_at_wm_variance_0_01():
    reward, groups, is_real, var = _batch_with_anchor_groups(0.01)
    adv = group_advantages(reward, groups)
    old = inverse_variance_weights(var, is_real, 0.05, 0.2, 3.0)  # the reward-scale floor
    new = inverse_variance_weights(var, is_real, 0.05, 0.2, 3.0, group_std=group_reward_std(reward, groups))
    # 2 of 8 groups are anchors: 25 % of the rows
    assert weight_share(old, is_real, adv) > 0.55  # anchors carry most of the gradient
    wm_share = weight_share(new, ~is_real, adv)
    assert 0.68 < wm_share < 0.80  # the WM rows carry about their 75 % of the rows (0.754; was 0.41)
    # and precision still orders them: at σ² ≈ s_g² a WM row counts about half an anchor
    _, _, _, noisy = _batch_with_anchor_groups(0.03)
    w = inverse_variance_weights(noisy, is_real, 0.05, 0.0, float("inf"), group_std=group_reward_std(reward, groups))
    assert 0.35 < (w[~is_real].mean() / w[is_real].mean()).item() < 0.65


def _monotone_pairs(n_groups, seed, size=8, noise=0.15):
    rng = np.random.default_rng(seed)
    wm = rng.uniform(0, 1, n_groups * size)
    real = wm**2 + rng.normal(0, noise, len(wm))
    return wm, real, np.repeat(np.arange(n_groups), size)


def test_cross_fitted_s2_is_larger_than_in_sample_and_close_to_the_truth():
    ratios = []
    for seed in range(5):
        wm, real, groups = _monotone_pairs(64, seed)
        truth = within_group_residual_s2(torch.tensor(wm**2), torch.tensor(real), torch.tensor(groups))
        in_sample = within_group_residual_s2(torch.tensor(apply_isotonic(fit_isotonic(wm, real), wm)),
                                             torch.tensor(real), torch.tensor(groups))
        cross = within_group_residual_s2(torch.tensor(crossfit_calibration(wm, real, groups)),
                                         torch.tensor(real), torch.tensor(groups))
        assert in_sample < cross, (in_sample, truth, cross)
        ratios.append((in_sample / truth, cross / truth))
    in_ratio, cross_ratio = np.mean(ratios, axis=0)
    assert in_ratio < 0.93 and 0.95 < cross_ratio < 1.12, ratios


def test_pre_update_residuals_of_the_debiaser_give_an_out_of_sample_s2():
    """What the denoise callback can use: r̃ = real + after from Debiaser.update ("fit before these pairs")."""
    wm, real, groups = _monotone_pairs(256, seed=18)
    d = Debiaser("isotonic", min_pairs=16, refit_every=8, buffer_size=512)
    prequential, in_sample, rows = [], [], []
    for i in range(0, len(wm), 16):  # two groups of 8 anchor rows per batch
        sl = slice(i, i + 16)
        _, after = d.update(wm[sl], real[sl])
        if i >= 256:  # once the map rests on enough pairs
            prequential.append(real[sl] + after)
            in_sample.append(d.correct(wm[sl]))  # what the callback measured: the map that just learned them
            rows.append(np.arange(i, i + 16))
    rows = np.concatenate(rows)
    g, r = torch.tensor(groups[rows]), torch.tensor(real[rows])
    truth = within_group_residual_s2(torch.tensor(wm[rows] ** 2), r, g)
    pre = within_group_residual_s2(torch.tensor(np.concatenate(prequential)), r, g)
    ins = within_group_residual_s2(torch.tensor(np.concatenate(in_sample)), r, g)
    assert ins < pre and pre == pytest.approx(truth, rel=0.12), (ins, pre, truth)
