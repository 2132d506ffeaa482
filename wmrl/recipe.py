"""The training recipe, top to bottom: config -> run directory -> the domain (tasks, executor, world model), policy
-> the step's path (rollout, corrections, update, world-model training) -> Lightning fit -> MLflow.
This is the one place config becomes objects; `python train.py` calls `train(cfg)`."""
from __future__ import annotations

import json
import logging
import os
import time
import warnings
from pathlib import Path
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf

from wmrl import distributed, stop
from wmrl.config import effective_policy

if TYPE_CHECKING:
    from lightning.pytorch import Callback
    from transformers import PreTrainedModel

    from callbacks import CostCallback, EvaluationCallback
    from datamodules.rollout import RolloutDataModule
    from wmrl.corrections import Debiaser
    from wmrl.domain import Domain, Suite
    from wmrl.env import Environment
    from wmrl.module import WMRLModule
    from wmrl.rollout.collect import Rollout
from wmrl.domain import WorldModel


def policy_seed(cfg: DictConfig) -> int:
    """The seed of the policy before RL (tokenizer, initial weights, warm start): `policy.seed`, else `seed`.
    Fixing it makes the seeds of a benchmark differ in RL only, so their spread is RL's, not the warm start's."""
    return cfg.seed if cfg.policy.seed is None else cfg.policy.seed


def build_policy_and_tokenizer(cfg: DictConfig, domain: "Domain", cache_dir: Path, progress: bool):
    """The policy before RL: a checkpoint (`policy.model`) or one built from config with a tokenizer trained on the
    domain's texts, then the domain's warm start (`policy.warm_start`)."""
    from wmrl.policy.chat import ChatFormat
    from wmrl.policy.model import build_policy, checkpoint_fingerprint, load_pretrained, prepare_for_training, resolve_dtype
    from wmrl.policy.tokenizer import cached_tokenizer

    seed = policy_seed(cfg)
    pcfg = effective_policy(cfg.policy)  # a checkpoint trains with policy.checkpoint.*
    dtype = resolve_dtype(pcfg.dtype)
    if cfg.policy.model:
        policy, tok = load_pretrained(cfg.policy.model, dtype)
        key_tok = checkpoint_fingerprint(cfg.policy.model)
    else:
        tok = cached_tokenizer(domain.tokenizer_corpus(seed), cfg.policy.vocab_size, cache_dir)
        torch.manual_seed(seed)
        policy = build_policy(cfg.policy, len(tok), tok.pad_token_id, tok.eos_token_id).to(dtype)
        key_tok = json.dumps(tok.get_vocab(), sort_keys=True)[:100000]
    policy = prepare_for_training(policy, pcfg)
    chat = ChatFormat(tok, domain.system)
    info = {"warm_start": False}
    if cfg.policy.warm_start:
        torch.manual_seed(seed)
        before = torch.get_num_threads()
        torch.set_num_threads(warm_start_threads(cfg, distributed.world_size(cfg.trainer)))
        try:
            info = domain.warm_start(policy, chat, pcfg, cfg.rollout.turns, seed, key_tok, progress)
        finally:
            torch.set_num_threads(before)
    return policy, tok, chat, info


def run_directory(cfg: DictConfig) -> tuple[Path, str | None]:
    """A fresh run directory, or the one of the checkpoint being resumed (and that checkpoint)."""
    root = Path(cfg.run_dir)
    if cfg.resume:
        if cfg.resume == "last":
            runs = sorted((p for p in root.glob(f"{cfg.name}-*") if (p / "checkpoints" / "last.ckpt").exists()),
                          key=lambda p: p.stat().st_mtime)
            if not runs:
                raise FileNotFoundError(f"resume=last: no run of preset {cfg.name!r} with a checkpoint under {root}/")
            return runs[-1], str(runs[-1] / "checkpoints" / "last.ckpt")
        ckpt = Path(cfg.resume)
        if not ckpt.exists():
            raise FileNotFoundError(f"resume={cfg.resume}: no such checkpoint")
        return ckpt.parent.parent, str(ckpt)
    path = root / f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    path.mkdir(parents=True, exist_ok=False)
    return path, None


def _quiet() -> None:
    """Silence warnings that are expected by design here, so that real ones stand out."""
    for msg in (".*ModelCheckpoint with manual optimization.*", ".*IterableDataset. has .__len__. defined.*",
                ".*overridden .transfer_batch_to_device.*", ".*isinstance.treespec, LeafSpec.*",
                ".*does not have many workers.*"):
        warnings.filterwarnings("ignore", message=msg)
    # Lightning's info banners (GPU/TPU available, a logging product's tip) through its own logger; warnings stay
    logging.getLogger("lightning.pytorch.utilities.rank_zero").setLevel(logging.WARNING)


@dataclass
class Parts:
    """Everything one run is made of, built from the config (and nothing started but the domain's executor)."""

    domain: "Domain"  # its tasks (`domain.suite`), executor and world model
    policy: "PreTrainedModel"
    warm_start: dict
    world_model: WorldModel | None
    debiaser: "Debiaser | None"
    env: "Environment"
    rollout: "Rollout"
    data: "RolloutDataModule"
    module: "WMRLModule"
    callbacks: "list[Callback]"  # the step's stages (callbacks.step_of picks them by kind), then evaluation
    cost: "CostCallback"
    evaluation: "EvaluationCallback"


def build(cfg: DictConfig, run_dir: Path, suite: "Suite", wrap_world_model: Callable[[WorldModel], WorldModel] | None = None,
          progress: bool = False, rank: int = 0, world: int = 1) -> Parts:
    """The one place the config becomes objects, around the domain's task `suite` (`wmrl.domains.load_suite(cfg)`).
    `wrap_world_model`: a scenario installed around the world model (benchmarks: a biased one).
    `rank`, `world`: this process under DDP: it rolls out its share of each step's groups with its share of
    the sandbox slots; rank 0 alone evaluates and writes the anchor log."""
    from callbacks import AnchorBudgetCallback, CostCallback, EvaluationCallback, WorldModelCallback, correction_callbacks, step_of
    from wmrl.anchoring import AnchorBudget
    from datamodules.rollout import RolloutDataModule
    from wmrl.env import Environment
    from wmrl.evaluate import Evaluator
    from wmrl.generation import WeightSync, make_generator
    from wmrl.module import WMRLModule
    from wmrl.rl import dr_grpo_normaliser
    from wmrl.domains import make_domain
    from wmrl.rollout.collect import Rollout, Sampling
    from wmrl.step import Handoff

    # the domain (its executor, its world model), the policy
    train_tasks, eval_tasks = suite.train_tasks(), suite.eval_tasks()
    domain = make_domain(cfg, suite, run_dir, world, wrap_world_model)
    world_model = domain.world_model
    try:
        policy, tok, chat, warm = build_policy_and_tokenizer(cfg, domain, Path(cfg.task.cache_dir).expanduser(), progress)
    except BaseException:
        domain.close()  # its executor is running
        raise

    # the step's path: rollout (environment, generator) -> corrections -> policy update -> world model
    debiaser, callbacks = correction_callbacks(cfg.callbacks)
    shown_correction = debiaser if debiaser is not None and cfg.callbacks.debias.correct_observations else None
    budget = AnchorBudget.from_config(cfg.env)
    # what each step leaves the next collection: the world model, the anchor budget, the debiaser (when shown)
    handoff = Handoff(world_model=world_model, budget=budget, debiaser=shown_correction)
    env = Environment(domain, cfg.env, background_slots=background_slots(cfg, world))
    generator = make_generator(cfg.generation, policy, tok, chat.eos_ids)
    sync = WeightSync(generator, policy)
    sampling = Sampling(cfg.generation.temperature, cfg.generation.top_p, cfg.generation.max_new_tokens)
    rollout = Rollout(tok, chat, generator, env, suite, cfg.rollout.turns, sampling, cfg.policy.max_length, cfg.seed,
                      rank=rank, world=world)
    data = RolloutDataModule(rollout, sync, train_tasks, cfg.rollout.groups_per_step, cfg.rollout.group_size,
                             cfg.rl.steps, cfg.seed, async_anchors=cfg.env.mode == "wm" and cfg.env.async_anchors,
                             handoff=handoff)
    module = WMRLModule(policy, cfg.rl, cfg.generation.temperature, cfg.seed,
                        max_completion_tokens=dr_grpo_normaliser(cfg.generation.max_new_tokens, cfg.rollout.turns))
    if world_model is not None:
        callbacks.append(WorldModelCallback(domain, anchor_log=run_dir / "anchor_pairs.jsonl" if rank == 0 else None))
        callbacks.append(AnchorBudgetCallback(budget))
    cost = CostCallback()
    callbacks.append(cost)
    module.step = step_of(callbacks, update=module.update, handoff=handoff)  # the order is Step's, not this list's
    evaluation = EvaluationCallback(Evaluator(rollout, eval_tasks, cfg.eval, cfg.logger.samples_per_eval,
                                              transfer_tasks=suite.transfer_tasks(),
                                              train_tasks=suite.train_tasks() if cfg.eval.train_prompts else ()), sync,
                                    cfg.eval.every_n_steps, cfg.rl.steps, at_start=cfg.eval.at_start)
    return Parts(domain, policy, warm, world_model, debiaser, env, rollout, data, module,
                 [*callbacks, *([evaluation] if rank == 0 else [])], cost, evaluation)


def trainer_threads(cfg: DictConfig, world: int) -> int:
    """torch threads of one rank: `threads`, or half the cores shared out over the ranks."""
    return cfg.threads if cfg.threads > 0 else max(1, (os.cpu_count() or 2) // 2 // world)


def warm_start_threads(cfg: DictConfig, world: int) -> int:
    """torch threads of one rank's warm start: `threads`, or every core shared out over the ranks. Nothing else
    runs yet, so it need not leave cores to the sandbox (1 thread of 2 made a checkpoint's warm start 2x slower)."""
    return cfg.threads if cfg.threads > 0 else max(1, (os.cpu_count() or 1) // world)


def background_slots(cfg: DictConfig, world: int) -> int:
    """One rank's limit on background executions (0: none): `env.background_slots`, or, when 0, the local
    cores the trainers' threads leave free (a Ray cluster's slots are not this machine's cores: no limit)."""
    n = int(cfg.env.background_slots)
    if n < 0 or (n == 0 and cfg.sandbox.backend != "local"):
        return 0
    if n == 0:
        n = max(1, (os.cpu_count() or 2) - trainer_threads(cfg, world) * world)
    return max(1, n // world)


def train(cfg: DictConfig, wrap_world_model: Callable[[WorldModel], WorldModel] | None = None) -> dict:
    """`wrap_world_model`: see `build`."""
    from lightning.pytorch.loggers import MLFlowLogger

    from callbacks.checkpoint import StepCheckpoint, rollout_state

    from callbacks.progress import StepProgressBar, arms
    from wmrl.report.data import TRACKING_URI_FILE, absolute_tracking_uri
    from wmrl.domains import load_suite
    from wmrl.rollout.collect import Rollout

    # Oversubscribed cores make torch's OpenMP threads spin: on 2 cores with a busy sandbox, 2 threads
    # ran a training step 15x slower than 1 thread.
    world, rank = distributed.world_size(cfg.trainer), distributed.rank()
    torch.set_num_threads(trainer_threads(cfg, world))
    _quiet()
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    if rank == 0:
        run_dir, ckpt_path = run_directory(cfg)
        resumed = None  # (step, rollout state) of the checkpoint; read before anything is built, so one that
        if ckpt_path is not None:  # cannot be resumed exactly stops the run here
            ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
            resumed = ckpt["wmrl"]["rl_step"], rollout_state(ckpt, ckpt_path)
            del ckpt
        OmegaConf.save(cfg, run_dir / ("config.yaml" if ckpt_path is None else "config.resumed.yaml"))
        # the processes Lightning starts for the other ranks inherit this environment: one run directory
        os.environ[distributed.RUN_ENV] = json.dumps({"run_dir": str(run_dir), "ckpt": ckpt_path})
    else:
        shared = json.loads(os.environ[distributed.RUN_ENV])
        run_dir, ckpt_path = Path(shared["run_dir"]), shared["ckpt"]
    suite = load_suite(cfg)
    parts = build(cfg, run_dir, suite, wrap_world_model, progress=cfg.trainer.progress_bar, rank=rank, world=world)
    checkpoint = StepCheckpoint(run_dir / "checkpoints")
    bar = StepProgressBar(cfg.rl.steps, {"preset": cfg.name, "run_dir": run_dir, "arms": arms(cfg),
                                          "experiment": cfg.logger.experiment_name}, parts.cost,
                          parts.evaluation, enabled=cfg.trainer.progress_bar and rank == 0)
    if rank > 0:  # MLflow, the execution log's rewind and the report are rank 0's
        trainer = _trainer(cfg, False, [*parts.callbacks, bar, checkpoint], rank, world)
        _fit(trainer, parts, ckpt_path, None)
        return {"run_dir": str(run_dir), "rank": rank, "steps": parts.module.rl_step}

    # tracking: a resumed run continues its MLflow run, and its execution log is rewound to the checkpoint
    run_id_file = run_dir / "mlflow_run_id"
    run_id = None
    if ckpt_path is not None:
        run_id = run_id_file.read_text().strip()
        parts.domain.rewind(resumed[0], Rollout.replayed(resumed[1]))
    logger = MLFlowLogger(experiment_name=cfg.logger.experiment_name, tracking_uri=cfg.logger.tracking_uri,
                          run_name=cfg.logger.run_name or run_dir.name, run_id=run_id, log_model=False,
                          tags={"mlflow.parentRunId": cfg.logger.parent_run_id} if cfg.logger.parent_run_id else None)
    if run_id is None:
        run_id_file.write_text(logger.run_id)
        (run_dir / TRACKING_URI_FILE).write_text(absolute_tracking_uri(cfg.logger.tracking_uri))
        logger.log_hyperparams(_flatten(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)))
        logger.experiment.log_text(logger.run_id, OmegaConf.to_yaml(cfg), "config.yaml")
        logger.experiment.set_tag(logger.run_id, "run_dir", str(run_dir.resolve()))
        logger.experiment.set_tag(logger.run_id, "warm_start", json.dumps(parts.warm_start))

    trainer = _trainer(cfg, logger, [*parts.callbacks, bar, checkpoint], rank, world)
    _fit(trainer, parts, ckpt_path, logger)
    final = run_dir / "checkpoints" / "last.ckpt"
    if final.exists():
        logger.experiment.log_artifact(logger.run_id, str(final), "checkpoints")
    summary = {"run_dir": str(run_dir), "mlflow_run_id": logger.run_id, "steps": parts.module.rl_step,
               "eval/real_reward": parts.evaluation.last, **parts.cost.totals}
    summary.update(report(run_dir, logger, str(final) if final.exists() else None, cfg.logger.report))
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary




def _fit(trainer: L.Trainer, parts: Parts, ckpt_path: str | None, logger) -> None:
    """`trainer.fit`; on SIGTERM it stops within a moment, mid-evaluation or mid-step too (`wmrl.stop`), the
    MLflow run is marked KILLED, not FAILED, and `Stopped` ends the process with 143 (Lightning's own stop
    is a SystemExit with status 0)."""
    with stop.on_sigterm():
        try:
            trainer.fit(parts.module, datamodule=parts.data, ckpt_path=ckpt_path)
        except SystemExit:
            if not stop.requested():
                raise
            if logger is not None:
                logger.experiment.set_tag(logger.run_id, "wmrl.stopped", f"SIGTERM at step {parts.module.rl_step}")
                logger.experiment.set_terminated(logger.run_id, "KILLED")
            raise stop.Stopped(f"stopped by SIGTERM at step {parts.module.rl_step}; it continues from its last "
                               "checkpoint with the same command and resume=last") from None
        finally:
            parts.domain.close()


def _trainer(cfg: DictConfig, logger, callbacks: list, rank: int, world: int) -> L.Trainer:
    trainer = L.Trainer(
        max_epochs=1, logger=logger, callbacks=callbacks,
        accelerator=cfg.trainer.accelerator, devices=_devices(cfg.trainer.devices), strategy=cfg.trainer.strategy,
        precision=cfg.trainer.precision, enable_progress_bar=True, enable_model_summary=False,  # the bar obeys trainer.progress_bar
        log_every_n_steps=1, num_sanity_val_steps=0, limit_val_batches=0,
    )
    if (trainer.global_rank, trainer.world_size) != (rank, world):  # the parts were built for (rank, world)
        raise RuntimeError(f"Lightning runs this process as rank {trainer.global_rank} of {trainer.world_size}, the "
                           f"config says rank {rank} of {world}: only single-node ddp with trainer.devices=N is supported")
    return trainer


def report(run_dir: Path, logger, checkpoint: str | None, figures: bool) -> dict:
    """The end-of-run summary read back from what MLflow logged (printed, written to the run directory),
    and with `figures` the run report (`wmrl.report`), logged to MLflow as artifacts under report/."""
    from wmrl import summary as summary_
    from wmrl.report import load_run, write_report

    run = load_run(run_dir)
    s = summary_.summarize(run, checkpoint)
    text = summary_.render(s)
    (run_dir / "summary.txt").write_text(text + "\n")
    if figures:
        try:
            page = write_report(run, run_dir / "report", checkpoint)
            logger.experiment.log_artifacts(logger.run_id, str(page.parent), "report")
            text += f"\nreport            {page}   (python -m wmrl.report {run_dir})"
        except Exception as e:  # a figure that fails must not turn a finished training into a failed one
            text += f"\nreport            FAILED ({type(e).__name__}: {e}); retry: python -m wmrl.report {run_dir}"
    print(text, flush=True)
    return {"summary": s}


def _devices(devices: str):
    return int(devices) if devices.isdigit() else devices


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
