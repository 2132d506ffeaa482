"""Warm start: supervised fine-tuning on grammar demonstrations rendered in the exact multi-turn
format the policy meets in RL (prompt, program, feedback, program), trained through Lightning and
cached, so that RL starts from a policy that writes programs — including the broken ones RL must fix.

Feedback in the demonstrations follows from how each program was built (a broken program gets the
status its breakage causes; a sound one a valid status with a random score): it is context only,
masked from the loss, and it costs no executions.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import random
import sys
import time
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader

from wmrl.domains.research.outcome import Outcome, Status, render_observation
from wmrl.domains.research import grammar
from wmrl.domains.research.tasks.task import render_prompt
from wmrl.rl.logprobs import token_logprobs

_BROKEN_STATUS = {"syntax": Status.SYNTAX_ERROR, "no_build": Status.MALFORMED, "bad_param": Status.RUNTIME_ERROR,
                  "returns_none": Status.NO_VALID_OUTPUT, "no_submission": Status.NO_VALID_OUTPUT,
                  "wrong_rows": Status.NO_VALID_OUTPUT}


def _feedback(sample: grammar.Sample, task, rng: random.Random) -> str:
    if sample.broken == "wrong_kind":
        status = Status.RUNTIME_ERROR if task.kind == "regression" else Status.NO_VALID_OUTPUT
    else:
        status = _BROKEN_STATUS.get(sample.broken, Status.VALID)
    if status is Status.VALID:
        pos = rng.random()
        return render_observation(Outcome(task.name, status, task.metric, value=rng.uniform(0.3, 0.95), pos=pos))
    return render_observation(Outcome(task.name, status, task.metric, stderr_tail="Error"))


# Fields of a prompt that say what kind of estimator is needed; the rest is context a donor task may supply.
KIND_FIELDS = ("kind", "target", "metric", "n_val", "method")


def mixed_prompt(task, donor) -> str:
    """`task`'s prompt with the name, description, shape and time limit of `donor`.

    With a handful of training prompts a small policy learns each prompt's estimator kind by heart (it never
    writes a classifier for a training regression task) and reads held-out prompts badly: 12-27 % of its first
    programs on held-out regression tasks were classifiers, and RL on classification-heavy training data drove
    that to 57-74 %. Demonstrations whose context comes from another task teach it to read the kind fields.
    """
    fields = {**donor.prompt_fields(), **{k: v for k, v in task.prompt_fields().items() if k in KIND_FIELDS}}
    return render_prompt(fields)


def demonstrations(tasks: list, chat, n: int, turns: int, broken_rate: float, seed: int,
                   prompt_mix: float = 0.0) -> list[tuple[list[int], list[float]]]:
    """(token ids, loss mask) of n grammar trajectories over `tasks`; a `prompt_mix` share of them with a
    `mixed_prompt` (another task's context)."""
    rng = random.Random(seed)
    eos = chat.eos_ids[0] if chat.builtin else chat.tok.eos_token_id
    prompts = {t.name: chat.prompt_ids(t.prompt()) for t in tasks}
    # context is only lent between prompts of one form (arrays, tables); script prompts are their own
    form = {t.name: grammar.has_own_programs(t) for t in tasks}
    donors = {t.name: [d for d in tasks if form[d.name] == form[t.name] and d.interface == "estimator"] for t in tasks}
    out = []
    for _ in range(n):
        task = rng.choice(tasks)
        if rng.random() < prompt_mix and task.interface == "estimator":
            ids = chat.prompt_ids(mixed_prompt(task, rng.choice(donors[task.name])))
        else:
            ids = list(prompts[task.name])
        mask = [0.0] * len(ids)
        for turn in range(turns):
            sample = grammar.sample_for(task, rng, broken_rate)
            prog = chat.tok(sample.source, add_special_tokens=False)["input_ids"] + [eos]
            ids += prog
            mask += [1.0] * len(prog)
            if turn < turns - 1:
                obs = chat.observation_ids(chat.observation_text(_feedback(sample, task, rng)))
                ids += obs
                mask += [0.0] * len(obs)
        out.append((ids, mask))
    return out


def _collate(pad_id: int):
    def collate(rows):
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width))
        attn = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (r, m) in enumerate(rows):
            ids[i, :len(r)], mask[i, :len(m)], attn[i, :len(r)] = torch.tensor(r), torch.tensor(m), 1
        return ids, attn, mask
    return collate


class SFTModule(L.LightningModule):
    def __init__(self, policy, lr: float, total_steps: int):
        super().__init__()
        self.policy, self.lr, self.total_steps = policy, lr, total_steps

    def training_step(self, batch, batch_idx):
        ids, attn, mask = batch
        lp, _ = token_logprobs(self.policy, ids, attn, 1.0, positions=mask > 0)  # the programs' tokens only
        m = mask[:, 1:]
        loss = -(lp[:, 1:] * m).sum() / m.sum().clamp_min(1)
        self.log("sft/loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        opt = torch.optim.AdamW([p for p in self.policy.parameters() if p.requires_grad], lr=self.lr)
        warmup = max(1, self.total_steps // 10)  # linear warm-up, then linear decay to 10%
        ramp = lambda s: min((s + 1) / warmup, max(0.1, 1 - (s - warmup) / max(1, self.total_steps - warmup)))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, ramp)
        return [opt], [{"scheduler": sched, "interval": "step"}]


def warm_start_key(policy_cfg, tokenizer_files: str, tasks: list, turns: int, seed: int) -> str:
    # the seed that counts is the argument; `checkpoint` is merged in already where it applies
    fields = {k: policy_cfg[k] for k in policy_cfg if k not in ("seed", "checkpoint")}
    blob = json.dumps([fields, tokenizer_files, sorted(t.prompt() for t in tasks), turns, seed,
                       inspect.getsource(grammar), inspect.getsource(demonstrations),
                       inspect.getsource(mixed_prompt)], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def warm_start(policy, chat, tasks: list, policy_cfg, turns: int, seed: int, cache_dir: Path, key: str,
               progress: bool = True) -> dict:
    """Fine-tune `policy` in place, or load the cached result; returns {"cached": bool, "loss": float}."""
    path = Path(cache_dir).expanduser() / "warmstart" / f"{key}.pt"
    if path.exists():
        policy.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        print(f"warm start: cached ({path})", flush=True)
        return {"cached": True, "path": str(path)}
    rows = demonstrations(tasks, chat, policy_cfg.sft_examples, turns, policy_cfg.sft_invalid_rate, seed,
                          policy_cfg.sft_prompt_mix)
    loader = DataLoader(rows, batch_size=policy_cfg.sft_batch_size, shuffle=True, collate_fn=_collate(chat.tok.pad_token_id),
                        generator=torch.Generator().manual_seed(seed))
    steps = len(loader) * policy_cfg.sft_epochs
    module = SFTModule(policy, policy_cfg.sft_lr, steps)
    # a terminal gets Lightning's bar; a log file one line per epoch instead of carriage returns
    bar = progress and sys.stdout.isatty()
    t0 = time.perf_counter()
    print(f"warm start: fine-tuning on {len(rows)} demonstrations, {policy_cfg.sft_epochs} epochs of {len(loader)} "
          f"batches (once; cached in {path.parent})", flush=True)
    quarter = max(1, len(loader) // 4)

    def batch_line(tr, *_):  # a log file sees progress within an epoch too, four lines of it
        done = tr.global_step - tr.current_epoch * len(loader)
        if done % quarter == 0 and done < len(loader):
            print(f"warm start: epoch {tr.current_epoch + 1} batch {done}/{len(loader)} ({time.perf_counter() - t0:.0f}s)",
                  flush=True)

    epoch_lines = L.pytorch.callbacks.LambdaCallback(
        on_train_batch_end=batch_line,
        on_train_epoch_end=lambda tr, _: print(
            f"warm start: epoch {tr.current_epoch + 1}/{tr.max_epochs} loss {float(tr.callback_metrics.get('sft/loss', float('nan'))):.3f} "
            f"({time.perf_counter() - t0:.0f}s)", flush=True))
    check = FormatCheck(chat, tasks, policy_cfg.sft_check_prompts, seed) if policy_cfg.sft_check_prompts > 0 else None
    trainer = L.Trainer(max_epochs=policy_cfg.sft_epochs, logger=False, enable_checkpointing=False, accelerator="auto",
                        devices=1, enable_progress_bar=bar, enable_model_summary=False, gradient_clip_val=1.0,
                        callbacks=([] if bar else [epoch_lines]) + ([check] if check else []))
    trainer.fit(module, loader)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(policy.state_dict(), tmp)
    tmp.replace(path)  # atomic: a killed warm start never leaves a half-written cache entry
    return {"cached": False, "path": str(path), "loss": float(trainer.callback_metrics.get("sft/loss", float("nan"))),
            **({"format_rates": check.rates, "epochs": trainer.current_epoch} if check else {})}


class FormatCheck(L.Callback):
    """Before the warm start and after each epoch: the share of first programs, one per training prompt, that the
    deterministic pre-check accepts (a `def build()` Python can parse; a script that writes the submission).
    Training stops once that share stops rising: a pretrained model already writes Python and needs the format,
    not the grammar corpus by heart. Training prompts only: nothing held out steers the warm start."""

    def __init__(self, chat, tasks: list, n: int, seed: int, max_new_tokens: int = 96):  # demonstrated programs: <= 65 tokens
        self.chat, self.seed, self.max_new_tokens = chat, seed, max_new_tokens
        self.tasks = [tasks[i % len(tasks)] for i in range(n)]
        self.rates: list[float] = []

    def rate(self, policy) -> float:
        from wmrl.domains.research.sandbox.program import extract_program, precheck
        from wmrl.generation.hf import HFGenerator

        gen = HFGenerator(policy, self.chat.tok, self.chat.eos_ids)
        prompts = [self.chat.prompt_ids(t.prompt()) for t in self.tasks]
        out = gen.generate(prompts, temperature=1.0, top_p=1.0, max_new_tokens=self.max_new_tokens, seed=self.seed)
        ok = [precheck(extract_program(self.chat.tok.decode(c.token_ids, skip_special_tokens=True)), t.interface)[0] is None
              for c, t in zip(out, self.tasks)]
        return sum(ok) / len(ok)

    def _record(self, trainer, policy, when: str) -> None:
        self.rates.append(self.rate(policy))
        print(f"warm start: {when}: {self.rates[-1]:.0%} of first programs pass the pre-check "
              f"({len(self.tasks)} training prompts)", flush=True)
        if len(self.rates) >= 3 and self.rates[-1] <= max(self.rates[:-1]):
            print("warm start: the pre-check rate stopped rising; stopping", flush=True)
            trainer.should_stop = True

    def on_train_start(self, trainer, module) -> None:
        self._record(trainer, module.policy, "before")

    def on_train_epoch_end(self, trainer, module) -> None:
        self._record(trainer, module.policy, f"after epoch {trainer.current_epoch + 1}")
