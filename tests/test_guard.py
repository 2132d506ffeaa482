"""The reward-hacking guard on simulated anchor streams: a drifting policy is caught, an honest class never is."""
import io

import numpy as np
import pytest
import torch

from wmrl.anchoring.guard import RewardHackingGuard

CLASSES = ["linear", "forest", "boost", "hack"]


def stream_step(rng, hack_share, hack_gap, pairs=16, noise=0.15):
    """One step's anchor pairs: the policy picks "hack" with probability hack_share, the rest uniformly;
    the WM over-rates "hack" by hack_gap and is honest (gap 0, noisy) on the others."""
    cls = np.where(rng.uniform(size=pairs) < hack_share, "hack", rng.choice(CLASSES[:3], pairs))
    real = rng.uniform(0.1, 0.9, pairs)
    wm = real + np.where(cls == "hack", hack_gap, 0.0) + rng.normal(0, noise, pairs)
    return cls.tolist(), wm, real


def test_a_policy_drifting_toward_an_over_rated_class_is_flagged_and_released_when_the_gap_closes():
    delays, releases = [], []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        guard = RewardHackingGuard(threshold=0.1, half_life=64, min_pairs=8)
        flagged_at = None
        for step in range(200):
            share = min(0.02 + 0.01 * step, 0.8)  # the policy learns the over-rated class: 2 % → 80 %
            guard.update(*stream_step(rng, share, hack_gap=0.3))
            assert not (guard.flagged - {"hack"})
            if "hack" in guard.flagged:
                flagged_at = step
                break
        assert flagged_at is not None
        delays.append(flagged_at)
        assert guard.route_real(["hack", "linear"]).tolist() == [True, False]
        for step in range(200):  # routed to real execution, the WM is retrained / debiased: the gap closes
            guard.update(*stream_step(rng, 0.8, hack_gap=0.0))
            if "hack" not in guard.flagged:
                releases.append(step)
                break
        assert "hack" not in guard.flagged
    # measured over 20 seeds: flagged 4–12 steps into the drift (median 8; after 8–13 "hack" pairs, min_pairs = 8),
    # released 1–4 steps after the gap closed (≈ 13 "hack" pairs a step once routed to real execution)
    assert max(delays) <= 15, delays
    assert max(releases) <= 10, releases


def test_an_honest_class_is_never_flagged():
    false_flags = 0
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        guard = RewardHackingGuard(threshold=0.1, half_life=64, min_pairs=8)
        for _ in range(300):
            guard.update(*stream_step(rng, 0.25, hack_gap=0.05))  # under the threshold: not hacking
            false_flags += bool(guard.flagged)
    assert false_flags == 0  # 0 of 20 seeds × 300 steps × 4 classes


def test_interval_and_hysteresis():
    guard = RewardHackingGuard(threshold=0.1, half_life=float("inf"), min_pairs=4)
    guard.update(["a"] * 4, np.array([0.5, 0.52, 0.48, 0.5]), np.full(4, 0.3))  # gap 0.2 ± small
    gap, lo, hi = guard.interval("a")
    assert gap == pytest.approx(0.2) and lo > 0.1 and "a" in guard.flagged
    guard.update(["a"] * 4, np.full(4, 0.39), np.full(4, 0.3))  # gap now 0.09 on average: below, but not surely
    assert guard.interval("a")[2] > 0.1 and "a" in guard.flagged
    assert np.isnan(guard.interval("never")[0])
    assert guard.metrics()["guard/flagged"] == 1.0 and "guard/gap/a" in guard.metrics()


def test_state_dict_round_trip():
    rng = np.random.default_rng(3)
    guard = RewardHackingGuard()
    for step in range(30):
        guard.update(*stream_step(rng, 0.5, hack_gap=0.3))
    buf = io.BytesIO()
    torch.save(guard.state_dict(), buf)
    buf.seek(0)
    other = RewardHackingGuard()
    other.load_state_dict(torch.load(buf, weights_only=True))
    assert other.flagged == guard.flagged == {"hack"}
    step = stream_step(rng, 0.5, hack_gap=0.0)
    assert other.update(*step) == guard.update(*step)
    assert other.interval("hack") == guard.interval("hack")


def test_the_proxy_against_the_real_reward_per_step_and_class():
    """What reward-model over-optimisation looks like on anchors: the proxy the policy trains on climbs while
    the real reward stays; per class, with intervals, so a user sees which class the world model over-rates."""
    from wmrl.fidelity import proxy_vs_real

    real = np.full(8, 0.5)
    proxy = np.array([0.9, 0.9, 0.9, 0.9, 0.5, 0.5, 0.5, 0.5]) + np.array([0.01, -0.01] * 4)
    classes = ["forest"] * 4 + ["linear"] * 4
    m = proxy_vs_real(np.append(proxy, 0.7), np.append(real, np.nan), classes + ["linear"])  # an infra error: left out
    assert m["proxy/gap"] == pytest.approx(0.2) and m["proxy/real_mean"] == pytest.approx(0.5)
    assert m["proxy/gap/forest"] == pytest.approx(0.4) and m["proxy/gap/linear"] == pytest.approx(0.0)
    assert m["proxy/gap_ci95/forest"] == pytest.approx(1.96 * np.std([0.01, -0.01, 0.01, -0.01], ddof=1) / 2)
    assert "proxy/real_mean_ci95" in m and "proxy/real_mean/forest" not in m and proxy_vs_real([], [], []) == {}
