"""Group advantages and the clipped policy loss, against values computed by hand."""
import math

import pytest
import torch

from wmrl.rl import dr_grpo_normaliser, group_advantages, policy_loss, token_entropy


def test_group_advantages_standardise_within_each_group():
    reward = torch.tensor([1.0, 0.0, 0.5, 0.5, 0.2, 0.4])
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    adv = group_advantages(reward, groups, eps=1e-12)
    # group 0: mean 0.5, population std 0.5 -> +1, -1; group 1: no variance -> 0; group 2: mean 0.3, std 0.1
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, 0.0, 0.0, -1.0, 1.0]), atol=1e-6)


def test_zero_variance_group_gives_zero_not_nan_under_every_scale():
    reward = torch.tensor([0.3, 0.3, 0.3, 1.0, 0.0])
    groups = torch.tensor([7, 7, 7, 9, 9])
    for scale in ("group", "batch", "none"):
        adv = group_advantages(reward, groups, scale=scale)
        assert torch.isfinite(adv).all()
        assert torch.equal(adv[:3], torch.zeros(3))


def test_batch_and_none_scales():
    reward = torch.tensor([1.0, 0.0, 0.0, 0.0])
    groups = torch.tensor([0, 0, 1, 1])
    none = group_advantages(reward, groups, scale="none")
    assert torch.allclose(none, torch.tensor([0.5, -0.5, 0.0, 0.0]))
    batch = group_advantages(reward, groups, scale="batch", eps=0.0)
    batch_std = math.sqrt(0.25 * 0.75)  # rewards {1,0,0,0}: mean 0.25
    assert torch.allclose(batch, torch.tensor([0.5, -0.5, 0.0, 0.0]) / batch_std)


def test_weighted_baseline_and_invalid_rows():
    reward = torch.tensor([1.0, 0.0, float("nan")])
    groups = torch.tensor([0, 0, 0])
    weight = torch.tensor([3.0, 1.0, 1.0])
    valid = torch.tensor([True, True, False])
    adv = group_advantages(reward, groups, weight=weight, valid=valid, scale="none")
    # weighted mean = (3*1 + 1*0) / 4 = 0.75; the invalid NaN row neither counts nor gets an advantage
    assert torch.allclose(adv, torch.tensor([0.25, -0.75, 0.0]))
    std = math.sqrt((3 * 0.25**2 + 1 * 0.75**2) / 4)
    adv = group_advantages(reward, groups, weight=weight, valid=valid, eps=0.0)
    assert torch.allclose(adv, torch.tensor([0.25 / std, -0.75 / std, 0.0]))


def _tokens(values):
    return torch.tensor(values, dtype=torch.float32)


def test_policy_loss_on_policy_equals_minus_mean_advantage_over_masked_tokens():
    logp = _tokens([[-1.0, -2.0, -9.0], [-1.0, -1.0, -1.0]])
    mask = _tokens([[1, 1, 0], [1, 1, 1]])
    adv = torch.tensor([2.0, -1.0])
    loss, stats = policy_loss(logp, logp.clone(), adv, mask)
    assert loss.item() == pytest.approx((-2.0 + 1.0) / 2)
    assert stats["ratio_mean"].item() == pytest.approx(1.0)
    assert stats["clip_fraction"].item() == 0.0
    assert stats["approx_kl"].item() == pytest.approx(0.0)


def test_clipping_active_and_inactive():
    old = torch.zeros(1, 1)
    mask = torch.ones(1, 1)
    up = torch.full((1, 1), math.log(1.5))  # ratio 1.5, outside [0.8, 1.2]
    # positive advantage: the clipped term 1.2·A is the min -> clipped, no gradient
    loss, stats = policy_loss(up.clone().requires_grad_(), old, torch.tensor([1.0]), mask)
    assert loss.item() == pytest.approx(-1.2)
    assert stats["clip_fraction"].item() == 1.0
    # negative advantage: the unclipped term 1.5·A is the min -> pessimistic, gradient kept
    lp = up.clone().requires_grad_()
    loss, stats = policy_loss(lp, old, torch.tensor([-1.0]), mask)
    assert loss.item() == pytest.approx(1.5)
    assert stats["clip_fraction"].item() == 0.0
    loss.backward()
    assert lp.grad.item() == pytest.approx(1.5)  # d(ρ)/d(logπ) = ρ
    # inside the trust region nothing is clipped
    loss, stats = policy_loss(torch.full((1, 1), math.log(1.1)), old, torch.tensor([1.0]), mask)
    assert loss.item() == pytest.approx(-1.1)
    assert stats["clip_fraction"].item() == 0.0


def test_masked_tokens_do_not_matter():
    old = torch.zeros(1, 3)
    mask = _tokens([[1, 1, 0]])
    a, _ = policy_loss(_tokens([[0.1, -0.1, 50.0]]), old, torch.tensor([1.0]), mask)
    b, _ = policy_loss(_tokens([[0.1, -0.1, -50.0]]), old, torch.tensor([1.0]), mask)
    assert a.item() == b.item()


def test_grpo_and_dr_grpo_differ_on_unequal_lengths():
    logp = torch.zeros(2, 4)
    mask = _tokens([[1, 0, 0, 0], [1, 1, 1, 1]])
    adv = torch.tensor([1.0, 1.0])
    grpo, _ = policy_loss(logp, logp, adv, mask, loss_type="grpo")
    dr8, _ = policy_loss(logp, logp, adv, mask, loss_type="dr_grpo", max_tokens=8)
    assert grpo.item() == pytest.approx(-1.0)  # each sequence: mean of its own tokens
    assert dr8.item() == pytest.approx(-(1 / 8 + 4 / 8) / 2)  # sum / the constant


def test_dr_grpo_divides_by_a_constant_not_by_the_batch_longest_completion():
    with pytest.raises(ValueError, match="max_tokens"):
        policy_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), loss_type="dr_grpo")
    budget = dr_grpo_normaliser(max_new_tokens=6, turns=2)
    assert budget == 12
    # a short row's gradient must not depend on how long the other completions of the batch are
    grads = []
    for other_len in (1, 10):
        lp = torch.zeros(2, 10, requires_grad=True)
        mask = torch.zeros(2, 10)
        mask[0, :2], mask[1, :other_len] = 1, 1
        loss, _ = policy_loss(lp, lp.detach(), torch.tensor([1.0, -1.0]), mask, loss_type="dr_grpo", max_tokens=budget)
        loss.backward()
        grads.append(lp.grad[0, :2].clone())
    assert torch.allclose(grads[0], grads[1])
    assert torch.allclose(grads[0], torch.full((2,), -1.0 / 12 / 2))


def test_weights_scale_each_sequence_and_empty_rows_do_not_dilute():
    logp = torch.zeros(3, 2)
    mask = _tokens([[1, 1], [1, 0], [0, 0]])
    adv = torch.tensor([1.0, -1.0, 5.0])
    loss, _ = policy_loss(logp, logp, adv, mask, weight=torch.tensor([2.0, 0.5, 1.0]))
    assert loss.item() == pytest.approx((-2.0 + 0.5) / 2)


def test_k3_kl_penalty():
    logp = torch.zeros(1, 2)
    ref = _tokens([[math.log(2.0), 0.0]])
    mask = torch.ones(1, 2)
    loss, stats = policy_loss(logp, logp, torch.tensor([0.0]), mask, ref_logprobs=ref, kl_beta=0.5)
    k3 = 2.0 - math.log(2.0) - 1.0  # e^Δ - Δ - 1 at Δ = log 2; 0 on the second token
    assert stats["kl"].item() == pytest.approx(k3 / 2)
    assert loss.item() == pytest.approx(0.5 * k3 / 2)


def test_token_entropy():
    logits = torch.zeros(1, 2, 4)
    logits[0, 1] = torch.tensor([100.0, 0.0, 0.0, 0.0])  # near one-hot: entropy ~ 0
    assert token_entropy(logits, _tokens([[1, 0]])).item() == pytest.approx(math.log(4))
    assert token_entropy(logits, _tokens([[1, 1]])).item() == pytest.approx(math.log(4) / 2, abs=1e-4)


def _exact_kl_gradient(kl_ratio):
    """E_{a~π}[∇ loss(a)] summed exactly over a 4-token vocabulary, sampled on-policy (π_old = π)."""
    logits = torch.tensor([0.3, -0.2, 1.0, 0.0], requires_grad=True)
    ref = torch.log_softmax(torch.tensor([0.0, 0.5, -0.5, 0.2]), 0)
    logp = torch.log_softmax(logits, 0)
    probs = logp.exp().detach()
    rows = logp[:, None]  # one single-token "sequence" per action a
    loss, _ = policy_loss(rows, rows.detach(), torch.zeros(4), torch.ones(4, 1), weight=probs * 4,
                          ref_logprobs=ref[:, None], kl_beta=1.0, kl_ratio=kl_ratio)
    (grad,) = torch.autograd.grad(loss, logits, retain_graph=True)
    true_kl = (logp.exp() * (logp - ref)).sum()  # KL(π‖π_ref)
    (true_grad,) = torch.autograd.grad(true_kl, logits)
    return grad, true_grad


def test_kl_times_ratio_gives_the_gradient_of_kl_to_the_reference():
    grad, true_grad = _exact_kl_gradient(kl_ratio=True)
    assert torch.allclose(grad, true_grad, atol=1e-6)
    plain, _ = _exact_kl_gradient(kl_ratio=False)  # k3 alone: the gradient of the reverse KL, not ours
    assert not torch.allclose(plain, true_grad, atol=1e-3)


def test_kl_off_policy_is_reweighted_by_the_ratio():
    old = torch.zeros(1, 1)
    logp = torch.full((1, 1), math.log(1.1))  # ρ = 1.1
    ref = torch.full((1, 1), math.log(2.0))
    _, stats = policy_loss(logp, old, torch.tensor([0.0]), torch.ones(1, 1), ref_logprobs=ref, kl_beta=1.0)
    delta = math.log(2.0) - math.log(1.1)
    assert stats["kl"].item() == pytest.approx(1.1 * (math.exp(delta) - delta - 1.0))


def test_eval_interval_is_task_stratified_and_covers_at_95_percent():
    """Between-task spread is not noise: the interval is sum_t s_t^2/n_t/T^2, and it covers ~95 %."""
    import random

    from wmrl.evaluate import stratified_mean_ci

    # two tasks, constant within each: the mean is known exactly, whatever the gap between tasks
    mean, hw = stratified_mean_ci({"a": [0.1] * 10, "b": [0.9] * 10})
    assert mean == pytest.approx(0.5) and hw == pytest.approx(0.0)  # a pooled variance would give ~0.25
    mean, hw = stratified_mean_ci({"a": [0.0, 1.0], "b": [0.5, 0.5, 0.5, 0.5]})
    assert mean == pytest.approx(0.5) and hw == pytest.approx(1.96 * (0.5 / 2) ** 0.5 / 2)
    rng, truth, hits = random.Random(0), [0.2, 0.5, 0.8], 0
    for _ in range(400):
        per_task = {i: [float(rng.random() < p) for _ in range(40)] for i, p in enumerate(truth)}
        m, h = stratified_mean_ci(per_task)
        hits += abs(m - 0.5) <= h
    assert 0.91 <= hits / 400 <= 0.98


def _optimizer_of(lr_warmup_steps: int, lr: float = 5e-4):
    from types import SimpleNamespace

    from wmrl.module import WMRLModule

    rl = SimpleNamespace(lr=lr, weight_decay=0.0, lr_warmup_steps=lr_warmup_steps)
    fake = SimpleNamespace(rl=rl, policy=torch.nn.Linear(3, 1))
    out = WMRLModule.configure_optimizers(fake)
    return out if isinstance(out, torch.optim.Optimizer) else out["optimizer"], fake.policy


def test_lr_warmup_is_linear_and_stepped_by_the_optimizer_itself():
    """Manual optimization never steps a scheduler: opt.step() must advance the warm-up."""
    opt, net = _optimizer_of(lr_warmup_steps=4)
    seen = []
    for _ in range(6):
        seen.append(opt.param_groups[0]["lr"])  # the lr the next step uses
        net(torch.ones(2, 3)).sum().backward()
        opt.step()
        opt.zero_grad()
    assert seen == pytest.approx([1.25e-4, 2.5e-4, 3.75e-4, 5e-4, 5e-4, 5e-4])
    opt, _ = _optimizer_of(lr_warmup_steps=0)
    assert opt.param_groups[0]["lr"] == pytest.approx(5e-4)


def test_std_floor_keeps_near_tied_groups_small():
    r = torch.tensor([0.70, 0.71, 0.70, 0.71, 0.1, 0.9, 0.1, 0.9])
    g = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    plain = group_advantages(r, g)
    assert plain[:4].abs().min() == pytest.approx(1.0, abs=1e-3)  # a 0.01 difference becomes a unit advantage
    floored = group_advantages(r, g, std_floor=0.1)
    assert floored[:4].abs().max() == pytest.approx(0.05, abs=1e-3)  # 0.005 / 0.1
    assert torch.allclose(floored[4:], plain[4:])  # a group whose std is above the floor is unchanged


def test_tied_groups_counts_groups_without_any_advantage():
    from types import SimpleNamespace

    from wmrl.module import _tied_groups

    # groups 3, 7, 9: group 7 tied, group 9's only non-zero advantage is on an invalid row
    batch = SimpleNamespace(group_ids=torch.tensor([3, 3, 7, 7, 9, 9]),
                            valid=torch.tensor([True, True, True, True, True, False]))
    adv = torch.tensor([0.5, -0.5, 0.0, 0.0, 0.0, 1.0])
    assert _tied_groups(batch, adv) == {"rl/tied_groups": 2.0, "rl/groups": 3.0}
    assert _tied_groups(batch, torch.ones(6)) == {"rl/tied_groups": 0.0, "rl/groups": 3.0}
