"""`policy.model=<path>` trains a Hugging Face checkpoint with its own tokenizer and chat template."""
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checkpoints import make_checkpoint  # noqa: E402

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from wmrl.policy.chat import ChatFormat  # noqa: E402
from wmrl.policy.model import load_pretrained  # noqa: E402
from wmrl.domains.research.sandbox import read_log  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_pretrained_checkpoint_keeps_its_own_chat_template(tmp_path):
    make_checkpoint(tmp_path / "ckpt")
    model, tok = load_pretrained(str(tmp_path / "ckpt"))
    chat = ChatFormat(tok)
    assert not chat.builtin
    prompt = tok.decode(chat.prompt_ids("Task: iris"))
    assert prompt.startswith("<|im_start|>system") and prompt.endswith("<|im_start|>assistant\n")
    obs = tok.decode(chat.observation_ids(chat.observation_text("status: valid")))
    assert obs.startswith("<|im_start|>user\nstatus: valid") and obs.endswith("<|im_start|>assistant\n")
    assert tok.convert_tokens_to_ids("<|im_end|>") in chat.eos_ids


def test_train_runs_a_local_checkpoint_end_to_end(tmp_path, session_cache):
    """With its own warm start (a few demonstrations in its own chat template), LoRA adapters and activation
    checkpointing; Lightning's eval-mode warning does not appear."""
    make_checkpoint(tmp_path / "ckpt")
    r = subprocess.run([sys.executable, str(ROOT / "train.py"), "experiment=smoke", f"policy.model={tmp_path}/ckpt",
                        "policy.checkpoint.sft_examples=16", "policy.checkpoint.sft_epochs=1", "policy.checkpoint.lora_rank=4",
                        "policy.checkpoint.dtype=float32", "policy.checkpoint.sft_check_prompts=2", "rl.steps=2", "eval.at_start=false",
                        "generation.max_new_tokens=24", f"run_dir={tmp_path}/runs", f"logger.tracking_uri=sqlite:///{tmp_path}/ml.db",
                        f"task.cache_dir={session_cache}", "trainer.progress_bar=false"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "warm start: fine-tuning on 16 demonstrations" in r.stdout
    assert "warm start: before: " in r.stdout and "warm start: after epoch 1: " in r.stdout  # the format check ran
    assert "in eval mode" not in r.stdout + r.stderr
    run_dir = next((tmp_path / "runs").iterdir())
    log = read_log(run_dir / "executions.sqlite")
    assert {row["meta"]["purpose"] for row in log} == {"train", "eval"}  # it generated, was judged, evaluated
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt").state_dict()
    lora = {k for k in ckpt["state_dict"] if "lora_" in k}
    assert lora  # the adapters were trained and checkpointed; the base weights were not touched
    frozen = {k[len("policy."):].replace(".base_layer", ""): v for k, v in ckpt["state_dict"].items()
              if k.startswith("policy.") and "lora_" not in k}
    assert set(frozen) == set(base)
    assert all(torch.equal(frozen[k], v) for k, v in base.items())


def test_a_loaded_checkpoint_is_in_train_mode_on_purpose(tmp_path):
    """from_pretrained returns eval mode; Lightning would warn "Found N module(s) in eval mode"."""
    make_checkpoint(tmp_path / "ckpt")
    model, _ = load_pretrained(str(tmp_path / "ckpt"))
    assert all(m.training for m in model.modules())


def test_lora_trains_only_adapters_and_gradient_checkpointing_keeps_the_gradient(tmp_path):
    import copy

    import torch

    from wmrl.config import PolicyConfig
    from wmrl.module import sequence_logprobs
    from wmrl.policy.model import prepare_for_training

    make_checkpoint(tmp_path / "ckpt")
    base, tok = load_pretrained(str(tmp_path / "ckpt"))
    ids = torch.tensor([tok("def build():\n    return RandomForestClassifier()\n")["input_ids"]])
    with torch.no_grad():
        want = base(input_ids=ids).logits
    torch.manual_seed(0)
    plain = prepare_for_training(copy.deepcopy(base), PolicyConfig(lora_rank=4))
    torch.manual_seed(0)  # the same adapter initialisation
    ckpt = prepare_for_training(copy.deepcopy(base), PolicyConfig(lora_rank=4, gradient_checkpointing=True))
    assert type(plain) is type(base)  # still a transformers model: generation and checkpoints unchanged
    trainable = {n for n, p in plain.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=ids).logits, want)  # adapters start as the identity
    grads = []
    for model in (plain, ckpt):
        lp, _ = sequence_logprobs(model, ids, torch.ones_like(ids), 1.0)
        lp.sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad})
        assert all(p.grad is None for p in model.parameters() if not p.requires_grad)  # the base stays frozen
    assert ckpt.is_activation_checkpointing and not plain.is_activation_checkpointing
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g)
    assert any(float(g.abs().sum()) > 0 for g in grads[0].values())


def test_the_format_check_stops_the_warm_start_once_its_rate_stops_rising():
    from types import SimpleNamespace

    from wmrl.domains.research.warmstart import FormatCheck

    check = FormatCheck(chat=None, tasks=[SimpleNamespace(name="t")], n=2, seed=0)
    rates = iter([0.0, 0.5, 1.0, 1.0])
    check.rate = lambda policy: next(rates)  # stands in for sampling and pre-checking programs
    trainer = SimpleNamespace(should_stop=False)
    for when in ("before", "after epoch 1", "after epoch 2"):
        check._record(trainer, None, when)
        assert not trainer.should_stop  # still rising
    check._record(trainer, None, "after epoch 3")
    assert trainer.should_stop and check.rates == [0.0, 0.5, 1.0, 1.0]
    assert len(check.tasks) == 2  # n prompts, cycling over the training tasks


def test_a_checkpoint_reads_the_domains_system_turn_and_warm_starts_on_every_core(tmp_path, monkeypatch):
    """The system turn shows the program interfaces (a capable model can answer zero-shot); the warm start runs
    before anything else and gets the rank's every core, then the trainer's share is restored."""
    from types import SimpleNamespace

    from wmrl.config import load_config
    from wmrl.domains.research.domain import SYSTEM
    from wmrl.recipe import build_policy_and_tokenizer

    make_checkpoint(tmp_path / "ckpt")
    seen = {}
    domain = SimpleNamespace(system=SYSTEM, warm_start=lambda *a: seen.update(threads=torch.get_num_threads()) or {})
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    torch.set_num_threads(1)  # the trainer's share on 2 cores
    try:
        cfg = load_config([f"policy.model={tmp_path}/ckpt", "policy.checkpoint.lora_rank=0"])
        _, tok, chat, _ = build_policy_and_tokenizer(cfg, domain, tmp_path, progress=False)
        assert seen["threads"] == 2 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(2)
    text = tok.decode(chat.prompt_ids("Task iris (classification)."))
    assert "def build():" in text and "./input/" in text and text.index("def build():") < text.index("Task iris")


def test_generation_gives_the_output_head_a_contiguous_last_position(tmp_path):
    """The prefill's head reads the last position only, as a contiguous [n, 1, H] copy: a sliced view with a
    frozen bf16 weight sends torch's CPU linear down a path that took 4.7 s and 2.7 GB per 8-row prefill on
    Gemma 3's 262k head (22 s for 32 rows). Sampling is unchanged by it."""
    from wmrl.config import PolicyConfig
    from wmrl.generation.hf import HFGenerator
    from wmrl.policy.model import prepare_for_training

    make_checkpoint(tmp_path / "ckpt")
    model, tok = load_pretrained(str(tmp_path / "ckpt"))
    model = prepare_for_training(model, PolicyConfig(lora_rank=4))
    seen = []
    model.get_output_embeddings().register_forward_pre_hook(lambda m, args: seen.append((tuple(args[0].shape), args[0].is_contiguous())))
    prompts = [tok("def build():")["input_ids"], tok("system user assistant def")["input_ids"]]
    out = HFGenerator(model, tok, [tok.eos_token_id]).generate(prompts, temperature=1.0, top_p=1.0, max_new_tokens=4, seed=0)
    assert seen[0][0] == (2, 1, model.config.hidden_size)  # the head on one position, not the whole prompt
    assert all(contiguous for _, contiguous in seen)
    # each first token's log-prob is the one the model's full logits give at the last position
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = (torch.arange(width)[None] >= torch.tensor([width - len(p) for p in prompts])[:, None]).long()
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp_min(0)).logits[:, -1].float()
    want = torch.log_softmax(logits, -1).gather(1, torch.tensor([[c.token_ids[0]] for c in out])).squeeze(1)
    torch.testing.assert_close(torch.tensor([c.logprobs[0] for c in out]), want, atol=1e-5, rtol=1e-5)


def test_sampling_draws_each_token_at_its_probability_and_never_a_cut_one():
    """The decode loop's sampler (inverse CDF, one uniform per row): frequencies within 4 standard errors of
    the probabilities over 200k draws, a token of probability 0 (top-p's cut) never, seeded draws repeat."""
    from wmrl.generation.hf import _draw, _top_p

    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 0.0, 1.0]]).repeat(100000, 1)
    tokens = _draw(probs, torch.Generator().manual_seed(0)).view(-1, 2)
    freq = torch.bincount(tokens[:, 0], minlength=4).double() / len(tokens)
    se = (probs[0] * (1 - probs[0]) / len(tokens)).sqrt().double()
    assert bool(((freq - probs[0].double()).abs() <= 4 * se + 1e-12).all()) and int(freq[1] * len(tokens)) == 0
    assert bool((tokens[:, 1] == 3).all())
    cut = _top_p(torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(50000, 1), 0.7).exp()
    drawn = _draw(cut, torch.Generator().manual_seed(1))
    assert set(drawn.tolist()) == {0, 1}
    assert torch.equal(_draw(cut, torch.Generator().manual_seed(1)), drawn)


def test_generation_samples_a_large_vocabulary_in_chunks_that_fit_its_memory_budget(tmp_path):
    """A 262k-vocabulary row costs ~17 MB to sample (64 rows at once: +1.07 GB on Gemma 3 270M); the built-in
    policy's rows are cheap and keep the 128-row chunk. With no budget every row is still sampled, one at a time."""
    from types import SimpleNamespace

    from wmrl.generation.hf import HFGenerator

    class Stub(torch.nn.Module):
        def __init__(self, vocab, hidden):
            super().__init__()
            self.config = SimpleNamespace(vocab_size=vocab, hidden_size=hidden)

        def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                    use_cache=None, logits_to_keep=0):
            raise AssertionError("not called")

    big = HFGenerator(Stub(262144, 640), None, [0]).rows_per_chunk(330 + 96)
    assert 16 <= big <= 32
    assert HFGenerator(Stub(2048, 128), None, [0]).rows_per_chunk(330 + 96) == 128
    make_checkpoint(tmp_path / "ckpt")
    model, tok = load_pretrained(str(tmp_path / "ckpt"))
    gen = HFGenerator(model, tok, [tok.eos_token_id], memory_mb=0)  # no budget: one row at a time
    assert gen.rows_per_chunk(20) == 1
    prompts = [tok("def build():")["input_ids"]] * 6
    out = gen.generate(prompts, temperature=1.0, top_p=1.0, max_new_tokens=3, seed=0)
    assert len(out) == 6 and all(1 <= len(c.token_ids) <= 3 for c in out)
