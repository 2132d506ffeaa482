"""The GPU path, checked on a machine with one NVIDIA GPU (`scripts/gpu_check.sh` runs it): the policy on CUDA,
sampled with `generation.backend` (hf or vllm), one optimizer update, and whether the generator samples
from the updated weights (same prompt, same seed, different completion). Prints one JSON line.

    python scripts/gpu_check.py [key=value ...]     # e.g. generation.backend=vllm, policy.model=DIR
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(overrides: list[str]) -> dict:
    import torch

    from wmrl.config import load_config
    from wmrl.domains import load_suite
    from wmrl.domains.research.domain import ResearchDomain
    from wmrl.generation import WeightSync, make_generator
    from wmrl.module import sequence_logprobs
    from wmrl.recipe import build_policy_and_tokenizer

    cfg = load_config(["experiment=smoke", *overrides])
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cache = Path(cfg.task.cache_dir).expanduser()
    domain = ResearchDomain(load_suite(cfg), cache_dir=cache)  # nothing executes here
    policy, tok, chat, _ = build_policy_and_tokenizer(cfg, domain, cache, progress=False)
    policy = policy.to(device)
    gen = make_generator(cfg.generation, policy, tok, chat.eos_ids)
    sync = WeightSync(gen, policy)
    prompt = chat.prompt_ids(domain.suite.train_tasks()[0].prompt())
    kw = dict(temperature=1.0, top_p=1.0, max_new_tokens=cfg.generation.max_new_tokens, seed=0)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    sync(0)
    t0 = time.perf_counter()
    before = gen.generate([prompt] * 8, **kw)
    gen_s = time.perf_counter() - t0
    # one update that certainly moves the policy: raise the log-prob of the first completion a lot
    ids = torch.tensor([prompt + before[0].token_ids], device=device)
    mask = torch.zeros_like(ids, dtype=torch.float32)
    mask[:, len(prompt):] = 1
    opt = torch.optim.SGD([p for p in policy.parameters() if p.requires_grad], lr=1.0)
    t0 = time.perf_counter()
    lp, _ = sequence_logprobs(policy, ids, torch.ones_like(ids), 1.0, chunk_mb=cfg.rl.logprob_chunk_mb, positions=mask > 0)
    (-(lp * mask).sum()).backward()
    opt.step()
    update_s = time.perf_counter() - t0
    sync(1)
    after = gen.generate([prompt] * 8, **kw)
    changed = sum(a.token_ids != b.token_ids for a, b in zip(before, after))
    return {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "backend": cfg.generation.backend,
            "model": cfg.policy.model or "built-in", "generate_8_s": round(gen_s, 3), "update_s": round(update_s, 3),
            "peak_gpu_gb": round(torch.cuda.max_memory_allocated() / 2**30, 3) if device == "cuda" else None,
            "completions_changed_after_update": f"{changed}/8", "weights_synced": changed > 0}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])), flush=True)
