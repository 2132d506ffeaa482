"""Log-probs through the output head a slice at a time equal the full log-softmax, values and gradients."""
import warnings

import pytest
import torch
from transformers import AutoModelForCausalLM, Gemma2Config, Qwen2Config

from wmrl.rl.logprobs import token_logprobs


def _qwen(vocab=3000):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(Qwen2Config(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, tie_word_embeddings=True)).train()


def _batch(vocab, rows=3, width=40):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (rows, width), generator=g)
    attn = torch.ones_like(ids)
    attn[0, 30:] = 0  # a padded row
    mask = (torch.rand(rows, width, generator=g) > 0.3).float() * attn
    return ids, attn, mask


def _run(model, ids, attn, mask, chunk_mb):
    model.zero_grad(set_to_none=True)
    lp, ent = token_logprobs(model, ids, attn, 0.7, mask, chunk_mb=chunk_mb)
    (lp * mask).sum().backward()
    return lp.detach(), ent, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_sliced_logprobs_equal_the_full_log_softmax_values_entropy_and_gradients():
    model = _qwen()
    ids, attn, mask = _batch(3000)
    full_lp, full_ent, full_g = _run(model, ids, attn, mask, chunk_mb=0)
    # 0.2 MB of logits per slice: 0.2 MB / (4 B x 3 rows x 3000) = 4 positions, so ten slices here
    lp, ent, g = _run(model, ids, attn, mask, chunk_mb=0.2)
    assert (lp[:, 0] == 0).all()
    torch.testing.assert_close(lp, full_lp, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent, full_ent, atol=1e-5, rtol=0)
    assert set(g) == set(full_g) and len(g) > 0
    for name in g:
        torch.testing.assert_close(g[name], full_g[name], atol=1e-5, rtol=1e-4)
    # and they are the model's own log-softmax
    with torch.no_grad():
        want = torch.log_softmax(model(input_ids=ids, attention_mask=attn).logits[:, :-1].float() / 0.7, -1)
    torch.testing.assert_close(lp[:, 1:], want.gather(-1, ids[:, 1:, None]).squeeze(-1), atol=1e-5, rtol=0)


def test_without_grad_nothing_is_kept_for_backward():
    model = _qwen()
    ids, attn, _ = _batch(3000)
    with torch.no_grad():
        lp, ent = token_logprobs(model, ids, attn, 1.0, chunk_mb=0.2)
    assert not lp.requires_grad and ent is None


def test_a_soft_capped_head_is_detected_and_takes_the_full_path():
    """Gemma 2 soft-caps its logits after the head: slicing the head alone would be wrong."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(Gemma2Config(
        vocab_size=500, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, final_logit_softcapping=5.0)).train()
    ids, attn, mask = _batch(500)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lp, ent, _ = _run(model, ids, attn, mask, chunk_mb=0.05)
    assert any("full [batch, tokens, vocab] path" in str(w.message) for w in caught)
    full_lp, full_ent, _ = _run(model, ids, attn, mask, chunk_mb=0)
    torch.testing.assert_close(lp, full_lp, atol=1e-6, rtol=0)
    assert model.training  # the one-off check leaves the train mode as it was


@pytest.mark.parametrize("chunk_mb", [0.01, 1.0, 256.0])
def test_any_slice_size_gives_the_same_answer(chunk_mb):
    model = _qwen(vocab=1000)
    ids, attn, mask = _batch(1000)
    with torch.no_grad():
        a, ea = token_logprobs(model, ids, attn, 1.0, mask, chunk_mb=0)
        b, eb = token_logprobs(model, ids, attn, 1.0, mask, chunk_mb=chunk_mb)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    torch.testing.assert_close(ea, eb, atol=1e-5, rtol=0)


def test_the_head_runs_at_the_loss_positions_only_and_they_equal_the_full_path(monkeypatch):
    import wmrl.rl.logprobs as lp_mod

    model = _qwen()
    ids, attn, mask = _batch(3000)
    full_lp, full_ent, full_g = _run(model, ids, attn, mask, chunk_mb=0)
    model.zero_grad(set_to_none=True)
    with torch.no_grad():
        token_logprobs(model, ids[:, :4], attn[:, :4], 1.0)  # the one-off head check runs before the count
    rows, real = [], lp_mod._logits
    monkeypatch.setattr(lp_mod, "_logits", lambda h, *a: rows.append(h.shape[0]) or real(h, *a))
    lp, ent = token_logprobs(model, ids, attn, 0.7, mask, chunk_mb=0.2, positions=mask > 0)
    picked = int((mask[:, 1:] > 0).sum())
    assert picked < ids.numel() - ids.shape[0]  # fewer than all target positions
    assert sum(rows) == picked and len(rows) > 1  # once per picked position, log-probs and entropy together
    (lp * mask).sum().backward()
    assert sum(rows) == 2 * picked  # and once more in backward (the logits were not kept)
    torch.testing.assert_close(lp * mask, full_lp * mask, atol=1e-5, rtol=0)
    assert (lp[mask == 0] == 0).all()
    torch.testing.assert_close(ent, full_ent, atol=1e-5, rtol=0)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, full_g[name], atol=1e-5, rtol=1e-4)


def test_backward_keeps_hidden_states_and_log_sum_exp_not_logits():
    """What autograd saves is O(positions x hidden) for the head, never a [positions, vocab] tensor."""
    model = _qwen(vocab=3000)
    ids, attn, mask = _batch(3000)
    with torch.no_grad():
        token_logprobs(model, ids[:, :4], attn[:, :4], 1.0)  # the one-off head check, outside the count
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        lp, _ = token_logprobs(model, ids, attn, 0.7, mask, chunk_mb=0.2, positions=mask > 0)
    assert saved and all(3000 not in shape[1:] for shape in saved)  # the weight [V, H] only, no [*, V] logits
    (lp * mask).sum().backward()
    assert model.get_output_embeddings().weight.grad.abs().sum() > 0
