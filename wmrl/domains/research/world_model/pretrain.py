"""A world model that starts informed: fitted, before RL, on an execution corpus of the *training*
tasks only (grammar programs executed for real in the sandbox, plus any earlier runs' execution logs,
their held-out rows dropped). Cached in the host cache like the warm start; its one-time cost (real
executions, sandbox slot-seconds, wall seconds) is recorded beside it so benchmarks can charge it.

    python -m wmrl.domains.research.world_model pretrain [--programs-per-task N] [--epochs E] [--log RUN/executions.sqlite ...]
                                        [key=value ...]      (train.py overrides: task, sandbox, world_model)

prints the fitted model's path (use it as `world_model.init=PATH`) and its cost as JSON.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import random
import time
from dataclasses import asdict
from pathlib import Path

from wmrl.domains.research.outcome import Status, render_observation
from wmrl.domains.research.world_model.base import WMQuery


def corpus_programs(tasks: list, per_task: int, broken_rate: float, seed: int) -> list[tuple[object, str]]:
    """(task, program) pairs: `per_task` grammar programs per training task (some broken, as the
    warm-started policy writes them)."""
    from wmrl.domains.research import grammar

    rng = random.Random(seed)
    return [(task, grammar.sample_for(task, rng, broken_rate).source) for task in tasks for _ in range(per_task)]


def cache_key(cfg, tasks: list, per_task: int, epochs: int, logs: list[str], seed: int) -> str:
    from wmrl.domains.research import grammar
    from wmrl.domains.research.world_model import ensemble, static
    from wmrl.domains.research.world_model.ensemble import world_model_config

    wm = {k: v for k, v in asdict(world_model_config(cfg.world_model)).items() if k != "init"}
    blob = json.dumps([wm, sorted(t.fingerprint() for t in tasks), per_task, epochs, sorted(logs), seed,
                       cfg.policy.sft_invalid_rate, *(inspect.getsource(m) for m in (grammar, ensemble, static))],
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def pretrain(cfg, per_task: int = 24, epochs: int = 20, logs: list[str] = (), seed: int | None = None) -> dict:
    """Fit (or load from the cache) a world model for `cfg`'s training tasks; returns
    {"path", "cached", "executions", "sandbox_slot_s", "wall_s", "examples", ...}."""
    from wmrl.domains.research.sandbox import make_sandbox
    from wmrl.domains.research.sandbox.log import read_log
    from wmrl.domains.research.tasks import load_suite
    from wmrl.domains.research.world_model.__main__ import examples_from_log
    from wmrl.domains.research.world_model.factory import make_world_model

    seed = cfg.seed if seed is None else seed
    if cfg.world_model.kind != "learned":
        raise ValueError(f"pretrain fits a learned world model; world_model.kind={cfg.world_model.kind} is frozen")
    suite = load_suite(cfg.task)
    tasks = suite.train_tasks()
    train_names = {t.name for t in tasks}
    folder = Path(cfg.task.cache_dir).expanduser() / "wm-pretrain"
    key = cache_key(cfg, tasks, per_task, epochs, [str(p) for p in logs], seed)
    path, report_path = folder / f"{key}.pt", folder / f"{key}.json"
    if path.exists() and report_path.exists():
        return {**json.loads(report_path.read_text()), "cached": True}
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    programs = corpus_programs(tasks, per_task, cfg.policy.sft_invalid_rate, seed)
    from wmrl.domains.research.sandbox import ExecRequest

    with make_sandbox(cfg.sandbox, log_path=folder / f"{key}.executions.sqlite",
                      private_paths=suite.private_paths()) as sandbox:
        outcomes = sandbox.run([ExecRequest(task, src, "val", {"purpose": "wm_pretrain"}) for task, src in programs])
    examples, last_obs = [], {}
    for (task, src), outcome in zip(programs, outcomes):
        if outcome.status is Status.INFRA_ERROR:
            continue
        # half the corpus as second turns: the feedback of the task's previous program as history
        history = last_obs.get(task.name, "") if len(examples) % 2 else ""
        examples.append((WMQuery(task.name, task.descriptor(), src, history, task.metric, task.interface), outcome))
        last_obs[task.name] = render_observation(outcome)
    for log in logs:  # earlier runs: their training-task rows only, never a held-out task
        examples += [(q, o) for q, o in examples_from_log(read_log(log), cfg.task) if q.task in train_names]
    wm = make_world_model(cfg.world_model, seed=seed)
    stats = wm.fit(examples, epochs=epochs)
    wm.save(str(path))
    report = {"path": str(path), "cached": False, "examples": len(examples),
              "executions": sum(o.attempts > 0 for o in outcomes), "sandbox_slot_s": sum(o.wall_s for o in outcomes),
              "wall_s": time.perf_counter() - start, "tasks": sorted(train_names), **stats}
    report_path.write_text(json.dumps(report, indent=1))
    return report
