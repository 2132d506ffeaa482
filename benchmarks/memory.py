"""Peak resident memory and seconds per RL update against model size and vocabulary, before and after
the sliced log-probs and the checkpoint defaults (issue 30). Every case runs in its own process, one after
another, so that each peak is its own.

    python benchmarks/memory.py --out DIR [--gemma DIR] [--rows 4 --tokens 512 --steps 3] [--smoke] [--quick]

Models: the built-in policy (the default config), a 100M-class Qwen2 (vocabulary 4096), a 135M-class Llama
of SmolLM2-135M's shape at vocabularies 8192, 49152 and 262144 (random weights, built from a config), and
with `--gemma DIR` a real checkpoint (Gemma 3 270M from `python -m wmrl.policy.gguf`). Arms:

- `before`: the full [rows, tokens, vocab] float32 logits (`rl.logprob_chunk_mb=0`); a checkpoint trains as
  main did before issue 30: every weight, float32, no activation checkpointing.
- `logprobs` (checkpoints only): the sliced log-probs alone, the rest as `before`.
- `after`: the defaults (sliced log-probs; for a checkpoint `policy.checkpoint.*`: LoRA, activation
  checkpointing, bfloat16 where the CPU has bf16 matmuls).

One update: log-probs and entropy of a [rows, tokens] batch whose second half is the completion (the loss
positions), a clipped-ratio surrogate, backward and an AdamW step; the first of `--steps` is a warm-up.
`--smoke` adds `train.py experiment=smoke` for the built-in policy, before and after, whole runs.
Writes DIR/results.json and DIR/table.md.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

BEFORE_CKPT = ["policy.checkpoint.lora_rank=0", "policy.checkpoint.gradient_checkpointing=false",
               "policy.checkpoint.dtype=float32"]
ARMS = {"before": ["rl.logprob_chunk_mb=0"], "logprobs": [], "after": []}

# name -> (builder, its arguments, whether it is treated as a checkpoint)
MODELS = {
    "builtin": ("builtin", {}, False),
    "qwen2-100M-v4k": ("config", {"arch": "qwen2", "hidden": 768, "layers": 14, "heads": 12, "kv": 12,
                                  "inter": 2048, "vocab": 4096}, True),
    "llama-135M-v8k": ("config", {"arch": "llama", "hidden": 576, "layers": 30, "heads": 9, "kv": 3,
                                  "inter": 1536, "vocab": 8192}, True),
    "llama-135M-v49k": ("config", {"arch": "llama", "hidden": 576, "layers": 30, "heads": 9, "kv": 3,
                                   "inter": 1536, "vocab": 49152}, True),
    "llama-135M-v262k": ("config", {"arch": "llama", "hidden": 576, "layers": 30, "heads": 9, "kv": 3,
                                    "inter": 1536, "vocab": 262144}, True),
}


def rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def current_rss_gb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def build(kind: str, spec: dict, checkpoint: bool, overrides: list[str]):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    from wmrl.config import effective_policy, load_config
    from wmrl.policy.model import build_policy, load_pretrained, prepare_for_training, resolve_dtype

    # a random model built from a config trains as a checkpoint would: `policy.model` set selects policy.checkpoint.*
    cfg = load_config(overrides + ([f"policy.model={spec.get('path', 'from-config')}"] if checkpoint else []))
    pcfg = effective_policy(cfg.policy)
    dtype = resolve_dtype(pcfg.dtype)
    torch.manual_seed(0)
    if kind == "builtin":
        model = build_policy(cfg.policy, cfg.policy.vocab_size, 0, 1).to(dtype)
    elif kind == "gguf":
        model, _ = load_pretrained(spec["path"], dtype)
    else:
        conf = (Qwen2Config if spec["arch"] == "qwen2" else LlamaConfig)(
            vocab_size=spec["vocab"], hidden_size=spec["hidden"], intermediate_size=spec["inter"],
            num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"], num_key_value_heads=spec["kv"],
            max_position_embeddings=4096, tie_word_embeddings=True)
        model = AutoModelForCausalLM.from_config(conf).to(dtype)
    model = prepare_for_training(model, pcfg)
    return model, cfg, dtype


def run_case(case: dict) -> dict:
    import torch

    from wmrl.module import sequence_logprobs

    t_load = time.perf_counter()
    model, cfg, dtype = build(case["kind"], case["spec"], case["checkpoint"], case["overrides"])
    load_s, weights_gb = time.perf_counter() - t_load, current_rss_gb()
    vocab = model.get_output_embeddings().out_features
    rows, tokens = case["rows"], case["tokens"]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (rows, tokens), generator=g)
    attn = torch.ones_like(ids)
    mask = torch.zeros(rows, tokens)
    mask[:, tokens // 2:] = 1.0  # the completion's tokens: where the loss reads
    adv = torch.randn(rows, 1, generator=g)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-6)
    times = []
    for _ in range(case["steps"]):
        t0 = time.perf_counter()
        with torch.no_grad():
            old, _ = sequence_logprobs(model, ids, attn, 1.0, chunk_mb=cfg.rl.logprob_chunk_mb, positions=mask > 0)
        lp, ent = sequence_logprobs(model, ids, attn, 1.0, with_entropy_mask=mask, chunk_mb=cfg.rl.logprob_chunk_mb,
                                    positions=mask > 0)
        ratio = torch.exp(lp - old)
        surrogate = torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
        loss = -(surrogate * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        assert torch.isfinite(loss) and torch.isfinite(ent)
    return {"peak_rss_gb": rss_gb(), "weights_rss_gb": weights_gb, "s_per_step": statistics.median(times[1:] or times),
            "load_s": load_s, "params_m": sum(p.numel() for p in model.parameters()) / 1e6,
            "trainable_m": sum(p.numel() for p in params) / 1e6, "vocab": vocab, "dtype": str(dtype).split(".")[-1]}


def run_smoke(arm: str, out: Path) -> dict:
    """A whole `train.py experiment=smoke` of the built-in policy; peak RSS of the trainer (GNU time)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix=f"wmrl-memory-smoke-{arm}-") as tmp:  # runs, MLflow, caches: not kept
        d = Path(tmp)
        cmd = ["/usr/bin/time", "-f", "%M %e", sys.executable, str(ROOT / "train.py"), "experiment=smoke", *ARMS[arm],
               f"run_dir={d}/runs", f"logger.tracking_uri=sqlite:///{d}/ml.db", f"task.cache_dir={d}/cache",
               "trainer.progress_bar=false"]
        r = subprocess.run(cmd, cwd=d, capture_output=True, text=True)
    (out / f"smoke-{arm}.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        return {"error": r.stderr[-2000:]}
    kb, wall = r.stderr.strip().splitlines()[-1].split()
    return {"peak_rss_gb": int(kb) / 2**20, "wall_s": float(wall)}


def cases(args) -> list[dict]:
    models = dict(MODELS)
    if args.quick:
        models = {k: models[k] for k in ("builtin", "llama-135M-v49k")}
    if args.gemma:
        models["gemma3-270M-v262k"] = ("gguf", {"path": str(Path(args.gemma).resolve())}, True)
    out = []
    for name, (kind, spec, ckpt) in models.items():
        for arm in (("before", "logprobs", "after") if ckpt else ("before", "after")):
            overrides = ARMS[arm] + (BEFORE_CKPT if ckpt and arm != "after" else [])
            out.append({"model": name, "arm": arm, "kind": kind, "spec": spec, "checkpoint": ckpt,
                        "overrides": overrides, "rows": args.rows, "tokens": args.tokens, "steps": args.steps})
    return out


def table(results: list[dict]) -> str:
    lines = ["| model | vocab | params (M) | trainable (M) | arm | dtype | peak RSS (GB) | weights RSS (GB) | s / update | RSS after/before | speed after/before |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    base = {r["model"]: r for r in results if r["arm"] == "before" and "error" not in r}
    for r in results:
        if "error" in r:
            lines.append(f"| {r['model']} | | | | {r['arm']} | | failed: {r['error'][-80:]!r} | | | | |")
            continue
        b = base.get(r["model"])
        ratio = f"{r['peak_rss_gb'] / b['peak_rss_gb']:.2f}x" if b and r["arm"] != "before" else ""
        speed = f"{b['s_per_step'] / r['s_per_step']:.2f}x" if b and r["arm"] != "before" else ""
        lines.append(f"| {r['model']} | {r['vocab']} | {r['params_m']:.0f} | {r['trainable_m']:.1f} | {r['arm']} | {r['dtype']} "
                     f"| {r['peak_rss_gb']:.2f} | {r['weights_rss_gb']:.2f} | {r['s_per_step']:.2f} | {ratio} | {speed} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=False)
    ap.add_argument("--gemma", help="a Hugging Face folder of a real checkpoint (python -m wmrl.policy.gguf DIR)")
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="also whole smoke runs of the built-in policy, before and after")
    ap.add_argument("--quick", action="store_true", help="the built-in policy and the 135M-class model at 49k only")
    ap.add_argument("--case", help=argparse.SUPPRESS)  # one case, in this process (the parent's child)
    args = ap.parse_args()
    if args.case:
        print(json.dumps(run_case(json.loads(args.case))))
        return
    if args.out is None:
        ap.error("--out is required")
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for case in cases(args):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, __file__, "--case", json.dumps(case)], capture_output=True, text=True)
        row = {k: case[k] for k in ("model", "arm", "overrides")}
        if r.returncode == 0:
            row.update(json.loads(r.stdout.strip().splitlines()[-1]))
        else:  # killed for memory, or an error: recorded, the others still run
            row["error"] = f"rc={r.returncode} {r.stderr[-1500:]}"
        print(f"{case['model']:>20} {case['arm']:>9}: " + (f"peak {row['peak_rss_gb']:.2f} GB, {row['s_per_step']:.2f} s/update"
              if "error" not in row else row["error"][-200:]) + f" ({time.perf_counter() - t0:.0f} s)", flush=True)
        results.append(row)
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
    text = table(results)
    if args.smoke:
        smoke = {arm: run_smoke(arm, args.out) for arm in ("before", "after")}
        results.append({"smoke": smoke})
        text += "\n\n| built-in smoke run | peak RSS (GB) | wall (s) |\n|---|---|---|\n" + "\n".join(
            f"| {arm} | {s.get('peak_rss_gb', float('nan')):.2f} | {s.get('wall_s', float('nan')):.0f} |" for arm, s in smoke.items())
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    (args.out / "table.md").write_text(f"rows={args.rows} tokens={args.tokens} steps={args.steps}\n\n{text}\n")
    print(text)


if __name__ == "__main__":
    main()
