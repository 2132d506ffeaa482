"""The warm start's demonstrations: programs of the task's kind, prompts that teach the policy to read the kind."""
from __future__ import annotations

import random

import pytest

from wmrl.config import TaskConfig
from wmrl.domains.research import grammar
from wmrl.domains.research.warmstart import demonstrations, mixed_prompt
from wmrl.domains.research.tasks import load_suite


class _Chat:
    """Characters as token ids: enough to read prompts back out of demonstrations."""
    builtin, eos_ids = True, [0]

    class tok:
        def __new__(cls, text, add_special_tokens=False):
            return {"input_ids": [ord(c) for c in text]}

    def prompt_ids(self, prompt):
        return [ord(c) for c in prompt] + [1]

    def observation_ids(self, text):
        return [2]

    def observation_text(self, feedback):
        return feedback


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    return load_suite(TaskConfig(cache_dir=str(tmp_path_factory.mktemp("cache")), secret_seed="b" * 64,
                                 train=["wine", "diabetes"], eval=["iris"]))


def test_mixed_prompt_keeps_the_kind_of_the_task_and_takes_the_context_of_the_donor(suite):
    wine, diabetes = suite.get("wine"), suite.get("diabetes")
    p = mixed_prompt(diabetes, wine)
    assert p.startswith("Task wine (regression). Tell 3 wine cultivars apart")
    assert "y_train: float64 target" in p and "Score: r2 on validation" in p
    assert f"shape {wine.prompt_fields()['shape']}" in p
    assert mixed_prompt(wine, wine) == wine.prompt()


def _prompts(rows):
    return ["".join(chr(i) for i in ids[:ids.index(1)]) for ids, _ in rows]


def test_prompt_mix_gives_demonstrations_another_tasks_context_and_zero_keeps_every_prompt(suite):
    tasks = suite.train_tasks()
    own = {t.prompt() for t in tasks}
    plain = _prompts(demonstrations(tasks, _Chat(), 200, 1, 0.0, seed=3))
    assert set(plain) <= own
    mixed = _prompts(demonstrations(tasks, _Chat(), 200, 1, 0.0, seed=3, prompt_mix=0.5))
    crossed = [p for p in mixed if p not in own]
    assert 0.15 < len(crossed) / len(mixed) < 0.4  # half mixed, half of those with the other task's context
    # a crossed prompt says its own kind: its program is of that kind
    rows = demonstrations(tasks, _Chat(), 200, 1, 0.0, seed=3, prompt_mix=0.5)
    for prompt, (ids, mask) in zip(_prompts(rows), rows):
        program = "".join(chr(i) for i, m in zip(ids, mask) if m and i > 2)
        kind = "regression" if "(regression)" in prompt else "classification"
        family = next(f for f, (_, clf, reg, _) in grammar.FAMILIES.items() if clf in program or reg in program)
        _, clf, reg, _ = grammar.FAMILIES[family]
        assert (reg if kind == "regression" else clf) in program, (prompt[:40], program)


def test_policy_seed_makes_runs_of_different_seeds_share_one_warm_start(tmp_path):
    """`policy.seed` fixes tokenizer, initial weights and warm start; `seed` alone gives each run its own."""
    import torch

    from wmrl.config import load_config
    from wmrl.domains.research.domain import ResearchDomain
    from wmrl.recipe import build_policy_and_tokenizer

    def weights(*overrides):
        cfg = load_config(["experiment=smoke", f"task.cache_dir={tmp_path}", "task.secret_seed=" + "c" * 64,
                           "policy.sft_examples=32", "policy.sft_epochs=1", *overrides])
        suite = load_suite(cfg.task)
        policy, tok, _, info = build_policy_and_tokenizer(cfg, ResearchDomain(suite, cache_dir=tmp_path), tmp_path, False)
        return policy.state_dict(), tok.get_vocab(), info

    base, vocab0, info0 = weights("seed=0")
    shared, vocab1, info1 = weights("seed=1", "policy.seed=0")
    own, _, _ = weights("seed=1")
    assert not info0["cached"] and info1["cached"] and info1["path"] == info0["path"]
    assert vocab1 == vocab0 and all(torch.equal(base[k], shared[k]) for k in base)
    assert any(not torch.equal(base[k], own[k]) for k in base)
