"""Anchor selection with inclusion probabilities, IPW in the debiasing fit, and the adaptive anchor rate."""
import numpy as np
import pytest

from wmrl.corrections import Debiaser
from wmrl.fidelity import fidelity
from wmrl.anchoring.selection import (adaptive_anchor_rate, anchor_scores, inclusion_probabilities,
                                      select_anchors)


def test_inclusion_probabilities_sum_to_the_budget_with_a_bounded_inverse():
    score = np.array([0.0, 0.0, 0.1, 0.2, 5.0, 50.0, 0.3, 0.0, 1.0, 2.0])
    pi = inclusion_probabilities(score, rate=0.3, uniform_floor=0.2)
    assert pi.sum() == pytest.approx(3.0)
    assert np.all(pi <= 1.0) and pi[5] == 1.0  # the dominant score is capped, its excess spread over the rest
    assert np.all(pi >= 0.2 * 0.3 - 1e-12)  # the uniform floor: 1/π ≤ 1/(λ·rate)
    assert np.all(np.diff(pi[np.argsort(score)]) >= -1e-12)  # more uncertain, more likely
    assert np.allclose(inclusion_probabilities(np.ones(10), 0.3), 0.3)  # equal scores: uniform


def test_selection_hits_each_row_with_its_probability_and_the_expected_count():
    rng = np.random.default_rng(0)
    score = rng.uniform(0, 1, 20) ** 3
    counts, hits = [], np.zeros(20)
    for _ in range(4000):
        chosen, pi = select_anchors(score, rate=0.25, rng=rng, uniform_floor=0.2)
        counts.append(chosen.sum())
        hits += chosen
    assert set(counts) <= {5}  # rate·N = 5 exactly: systematic sampling fixes the count
    assert np.allclose(hits / 4000, pi, atol=0.025)


def test_anchor_scores():
    assert np.allclose(anchor_scores("uncertainty", wm_var=np.array([0.04, 0.01, np.nan])), [0.2, 0.1, 0.2])
    assert np.allclose(anchor_scores("advantage", predicted_advantage=np.array([-1.5, 0.2])), [1.5, 0.2])
    assert np.array_equal(anchor_scores("random", n=3), np.ones(3))
    with pytest.raises(ValueError, match="random"):
        anchor_scores("greedy", n=3)


def _population(rng, n=1000):
    """The WM over-rates exactly where it is uncertain: bias 0.5·u, noise std 0.01 + 0.3·u."""
    u = rng.uniform(0, 1, n)
    real = rng.uniform(0, 1, n)
    wm = real + 0.5 * u + rng.normal(0, 0.01 + 0.3 * u)
    return wm, real, 0.01 + 0.3 * u


@pytest.mark.parametrize("method", ["offset", "isotonic"])
def test_ipw_keeps_the_fit_unbiased_on_uncertainty_chosen_anchors(method):
    """Corrected-minus-real over ALL rows (the rows the fit corrects), averaged over seeds."""
    err = {"unweighted": [], "ipw": []}
    for seed in range(40):
        rng = np.random.default_rng(seed)
        wm, real, std = _population(rng)
        chosen, pi = select_anchors(anchor_scores("uncertainty", wm_var=std**2), rate=0.2, rng=rng, uniform_floor=0.1)
        for name, sw in (("unweighted", None), ("ipw", 1.0 / pi[chosen])):
            d = Debiaser(method, min_pairs=16, buffer_size=1000, half_life=float("inf"))
            d.update(wm[chosen], real[chosen], sample_weight=sw)
            err[name].append(np.mean(d.correct(wm) - real))
    bias = {k: float(np.mean(v)) for k, v in err.items()}
    # measured over 40 seeds: offset −0.075 → −0.006, isotonic −0.042 → −0.009 (±0.002); the IPW
    # residual is finite-sample (Hájek / PAV with weights up to 50) and shrinks with N: −0.002 / −0.004 at N = 4000
    assert bias["unweighted"] < -0.03, bias  # fitted on the over-rated rows, it over-corrects every row
    assert abs(bias["ipw"]) < 0.012 and abs(bias["ipw"]) < abs(bias["unweighted"]) / 4, bias


def test_fidelity_measures():
    real = np.linspace(0, 1, 50)
    f = fidelity(real + 0.1, real, np.full(50, 0.1), z=1.96, min_pairs=3)
    assert f["spearman"] == pytest.approx(1.0) and f["mae"] == pytest.approx(0.1) and f["coverage"] == 1.0
    assert np.isnan(fidelity(real[:2], real[:2], min_pairs=3)["mae"])


def test_adaptive_rate_is_bounded_and_falls_as_the_world_model_improves():
    lo, hi = 0.05, 0.5
    assert adaptive_anchor_rate({"pairs": 3, "spearman": 1.0, "mae": 0.0, "coverage": 1.0}, lo, hi) == hi  # unmeasured
    perfect = {"pairs": 64, "spearman": 1.0, "mae": 0.0, "coverage": 0.95}
    useless = {"pairs": 64, "spearman": -0.3, "mae": 0.4, "coverage": 0.2}
    assert adaptive_anchor_rate(perfect, lo, hi) == pytest.approx(lo)
    assert adaptive_anchor_rate(useless, lo, hi) == pytest.approx(hi)
    grid = np.linspace(0, 1, 11)
    for key, values, better in (("spearman", grid, 1), ("mae", grid * 0.3, -1), ("coverage", grid, 1)):
        base = {"pairs": 64, "spearman": 0.7, "mae": 0.05, "coverage": 0.9}
        rates = [adaptive_anchor_rate({**base, key: v}, lo, hi) for v in values]
        assert all(lo <= r <= hi for r in rates)
        assert np.all(better * np.diff(rates) <= 1e-12), (key, rates)  # better fidelity never raises the rate
        assert rates[0] != rates[-1]


def test_adaptive_rate_from_real_anchor_windows():
    rng = np.random.default_rng(1)
    real = rng.uniform(0, 1, 64)
    weak = fidelity(rng.uniform(0, 1, 64), real, np.full(64, 0.05), z=1.96)
    good = fidelity(real + rng.normal(0, 0.03, 64), real, np.full(64, 0.05), z=1.96)
    assert adaptive_anchor_rate(good, 0.05, 0.5) < 0.15 < 0.45 < adaptive_anchor_rate(weak, 0.05, 0.5)
