"""The configuration schema: every key, its type, its default and a one-line meaning.

The schema is the one source of defaults. `conf/config.yaml` is generated from it for reading
(`python -m wmrl.config > conf/config.yaml`; a test keeps it current); presets in
`conf/experiment/` override the defaults; `key=value` on the command line overrides both.
"""
from __future__ import annotations

import difflib
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any, List, Optional

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


class Choice(str, Enum):
    """A config value from a closed set: the schema's type, so OmegaConf rejects anything else when it merges.
    It compares, hashes, prints and serializes as its string (a member's name is its value)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


def plain(x: Any) -> Any:
    """`x` with every `Choice` inside (dicts, lists) as its plain string: what goes into a checkpoint, which
    `torch.load(weights_only=True)` reads back without the schema's classes."""
    if isinstance(x, Choice):
        return x.value
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(plain(v) for v in x)
    return x


def _choice(name: str, values: str) -> type:
    return Choice(name, {v: v for v in values.split()})


DomainName = _choice("DomainName", "research")
SandboxBackend = _choice("SandboxBackend", "local ray")
Isolation = _choice("Isolation", "auto bwrap unshare none")
Cgroups = _choice("Cgroups", "auto require off")
PolicyArch = _choice("PolicyArch", "qwen2 llama")
LMBackend = _choice("LMBackend", "hf vllm")
PolicyDtype = _choice("PolicyDtype", "auto float32 bfloat16")
Loss = _choice("Loss", "grpo dr_grpo")
ScaleRewards = _choice("ScaleRewards", "group batch none")
EnvMode = _choice("EnvMode", "sandbox wm")
AnchorSelection = _choice("AnchorSelection", "random uncertainty advantage")
WorldModelKind = _choice("WorldModelKind", "learned prompted")
WorldModelMode = _choice("WorldModelMode", "generate score")
DebiasMethod = _choice("DebiasMethod", "isotonic offset")
DenoiseMethod = _choice("DenoiseMethod", "anchor_upweight inverse_variance")
EvalSplit = _choice("EvalSplit", "test val")


def opt(default: Any, help: str) -> Any:
    """A config field with its default and its one-line meaning."""
    if isinstance(default, (list, dict)) or is_dataclass(default):
        factory = (lambda d=default: type(d)(d)) if not is_dataclass(default) else type(default)
        return field(default_factory=factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class TaskConfig:
    train: List[str] = opt([], "training task names; empty = every built-in task not held out")
    eval: List[str] = opt([], "evaluation task names; empty = the held-out built-in tasks")
    transfer: List[str] = opt([], "held-out tasks of other kinds, evaluated beside task.eval and reported per family only "
                                  "(eval/family/<name>, eval/task/<name>), never in eval/real_reward; e.g. [loan_table,house_table]")
    files: List[str] = opt([], "extra YAML task files to register (see README: adding a task)")
    max_data_mb: float = opt(256.0, "largest task data file (CSV, Parquet, task folder file) accepted, MiB")
    secret_seed: Optional[str] = opt(None, "secret for data splits; null = a per-machine secret made once")
    cache_dir: str = opt("~/.cache/wmrl", "host cache: leaderboards, secrets, warm-start checkpoints")


@dataclass
class RayConfig:
    address: Optional[str] = opt(None, "Ray cluster: null = start a local instance; auto or ray://host:port = an existing one")
    slots_per_actor: int = opt(1, "warm-pool slots of each actor; sandbox.slots / this actors, spread over the nodes")
    start_timeout_s: float = opt(300.0, "how long every actor's warm pool may take to start")


@dataclass
class SandboxConfig:
    backend: SandboxBackend = opt(SandboxBackend.local, "where programs run: local (warm fork pool) | ray (warm pools in Ray actors)")
    slots: int = opt(0, "executions at once (split over DDP ranks); 0 = CPU cores (ray: the cluster's CPUs)")
    isolation: Isolation = opt(Isolation.auto, "auto | bwrap | unshare | none (none must be asked for explicitly)")
    memory_mb: int = opt(2048, "address-space limit of one execution, MiB")
    max_procs: int = opt(32, "process/thread limit of one execution")
    max_file_mb: int = opt(64, "largest file an execution may write, MiB")
    output_cap_kb: int = opt(64, "stdout/stderr kept per execution, KiB (the rest is dropped)")
    timeout_scale: float = opt(1.0, "multiplier on every task's time limit")
    retries: int = opt(1, "retries of an execution lost to the sandbox itself before infra_error")
    max_prediction_mb: int = opt(64, "largest predictions array accepted back from an execution, MiB")
    scratch_mb: int = opt(512, "size of each worker's private scratch tmpfs, MiB")
    cgroups: Cgroups = opt(Cgroups.auto, "per-slot cgroups (memory incl. shm/memfd, CPU quota, pids): auto | require | off")
    cpus_per_slot: float = opt(1.0, "CPU quota of one slot, cores (cgroup); a slot gets its own core if slots <= cores")
    worker_memory_mb: int = opt(512, "memory of a slot's warm worker on top of memory_mb (the slot's cgroup limit)")
    ray: RayConfig = opt(RayConfig(), "the ray backend (each actor's pool has the local backend's isolation)")


@dataclass
class CheckpointPolicyConfig:
    lora_rank: int = opt(16, "LoRA rank (0 = every weight trains; 0 with generation.backend=vllm)")
    gradient_checkpointing: bool = opt(True, "recompute activations in backward")
    dtype: PolicyDtype = opt(PolicyDtype.auto, "auto (bfloat16 where the device has bf16 matmuls, else float32) | float32 | bfloat16")
    sft_examples: int = opt(32, "warm start: demonstrations in the checkpoint's own chat template")
    sft_epochs: int = opt(4, "warm start: most passes over them (it stops when the format-valid rate stops rising)")
    sft_lr: float = opt(5e-4, "warm start: learning rate (of the adapters)")
    sft_batch_size: int = opt(8, "warm start: batch size")
    sft_check_prompts: int = opt(8, "warm start: first programs sampled before it and after each epoch (training "
                                    "prompts) to stop once the share passing the pre-check stops rising; 0 = off")


@dataclass
class PolicyConfig:
    model: Optional[str] = opt(None, "Hugging Face id or local path; null = tiny model built from config")
    arch: PolicyArch = opt(PolicyArch.qwen2, "architecture of the built-in policy: qwen2 | llama")
    hidden_size: int = opt(128, "built-in policy: hidden size")
    layers: int = opt(4, "built-in policy: transformer layers")
    heads: int = opt(4, "built-in policy: attention heads")
    vocab_size: int = opt(2048, "built-in policy: BPE vocabulary size of the offline tokenizer")
    max_length: int = opt(1024, "built-in policy: longest sequence (prompt + completions + feedback)")
    seed: Optional[int] = opt(None, "seed of the built-in tokenizer, initial weights and warm start; null = seed "
                                    "(set: runs of several seeds share one warm start)")
    warm_start: bool = opt(True, "supervised warm start on the grammar corpus before RL (cached)")
    sft_examples: int = opt(3000, "warm start: demonstrations sampled from the grammar")
    sft_epochs: int = opt(2, "warm start: passes over the demonstrations")
    sft_lr: float = opt(2e-3, "warm start: learning rate")
    sft_batch_size: int = opt(16, "warm start: batch size")
    sft_invalid_rate: float = opt(0.2, "warm start: share of demonstrations with broken programs")
    sft_check_prompts: int = opt(0, "warm start: prompts of the format check (see policy.checkpoint; 0 = off)")
    sft_prompt_mix: float = opt(0.5, "warm start: share of demonstrations whose prompt context comes from another task")
    lora_rank: int = opt(0, "rank of LoRA adapters (peft) trained instead of every weight; 0 = full fine-tuning")
    lora_alpha: float = opt(16.0, "LoRA scaling numerator (update scaled by alpha / rank)")
    lora_dropout: float = opt(0.0, "LoRA dropout (0 keeps the sampled and the trained policy the same function)")
    lora_targets: List[str] = opt(["q_proj", "k_proj", "v_proj", "o_proj"], "module names LoRA adapts (Qwen2/Llama naming)")
    gradient_checkpointing: bool = opt(False, "recompute activations in backward: less memory, ~30% more time")
    dtype: PolicyDtype = opt(PolicyDtype.float32, "weights' dtype: auto (bfloat16 where the device has bf16 matmuls) | float32 | bfloat16")
    checkpoint: CheckpointPolicyConfig = opt(CheckpointPolicyConfig(), "with policy.model set, these replace the "
                                             "fields of the same names above (which size the built-in policy)")


@dataclass
class GenerationConfig:
    backend: LMBackend = opt(LMBackend.hf, "hf (transformers generate, CPU or GPU) | vllm (GPU, optional extra)")
    temperature: float = opt(1.0, "sampling temperature")
    top_p: float = opt(1.0, "nucleus sampling threshold")
    max_new_tokens: int = opt(96, "longest completion per turn, tokens")


@dataclass
class RolloutConfig:
    groups_per_step: int = opt(8, "task prompts per training step (all DDP ranks together)")
    group_size: int = opt(8, "completions per prompt (the GRPO group)")
    turns: int = opt(2, "forced turns per trajectory; reward = max over turns")


@dataclass
class RLConfig:
    steps: int = opt(30, "training steps (rollout batches)")
    loss: Loss = opt(Loss.grpo, "grpo (per-sequence token mean) | dr_grpo (constant normaliser)")
    scale_rewards: ScaleRewards = opt(ScaleRewards.group, "advantage scale: group std | batch std | none")
    clip_eps: float = opt(0.2, "PPO clip range of the importance ratio")
    kl_beta: float = opt(0.0, "weight of the KL penalty to the frozen reference policy")
    updates_per_batch: int = opt(1, "optimizer updates per rollout batch")
    adv_std_floor: float = opt(0.0, "advantages divide by max(std, this): near-tied groups keep small advantages")
    lr: float = opt(1e-4, "policy learning rate (AdamW)")
    lr_warmup_steps: int = opt(0, "optimizer steps of linear learning-rate warm-up from lr/N to lr; 0 = none")
    weight_decay: float = opt(0.0, "AdamW weight decay")
    grad_clip: float = opt(1.0, "gradient-norm clip")
    micro_batch_size: int = opt(32, "trajectories per forward/backward pass")
    logprob_chunk_mb: float = opt(256.0, "log-probs and entropy through the output head a slice of positions at a "
                                         "time, each slice's logits at most this many MB; 0 = full [B, T, V] logits")


@dataclass
class EnvConfig:
    mode: EnvMode = opt(EnvMode.wm, "sandbox: every group executed | wm: world model with real anchors")
    anchor_rate: float = opt(0.25, "wm mode: share of groups (random) or trajectories (other selections) anchored")
    warmup_steps: int = opt(3, "wm mode: first steps executed for real to train the world model")
    anchor_selection: AnchorSelection = opt(AnchorSelection.random, "random (whole groups) | uncertainty (WM variance) | advantage (|predicted A|)")
    anchor_floor: float = opt(0.2, "uncertainty/advantage: uniform share of the inclusion probability (bounds 1/p)")
    async_anchors: bool = opt(True, "wm mode: anchors execute in the background and train, with their groups, env.anchor_lag steps later")
    anchor_lag: int = opt(2, "async anchors: an anchor group trains this many steps after its own, executing "
                             "meanwhile (the trainer waits only for what is not done by then)")
    background_slots: int = opt(0, "async anchors: executions at once in the background; 0 = the cores the trainer's "
                                   "threads leave free (local sandbox; at least 1), -1 = every sandbox slot")
    adaptive_rate: bool = opt(False, "anchor rate from recent fidelity, between anchor_rate_min and anchor_rate_max")
    anchor_rate_min: float = opt(0.1, "adaptive_rate: rate once the world model is good")
    anchor_rate_max: float = opt(0.5, "adaptive_rate: rate while the world model is weak (and at the start)")
    fidelity_window: int = opt(64, "adaptive_rate: recent anchor pairs the fidelity is measured on")
    adaptive_mae_scale: float = opt(0.2, "adaptive_rate: MAE at which the WM's quality counts as 0 (rate_max)")
    adaptive_min_pairs: int = opt(16, "adaptive_rate: anchor pairs measured before the rate may fall below rate_max")
    guard: bool = opt(True, "route an action class the WM over-rates (on anchors) to real execution")
    guard_threshold: float = opt(0.1, "guard: flag a class whose WM - real gap's 95% lower bound exceeds this")
    guard_half_life: float = opt(64.0, "guard: half-life of a class's running gap, in anchor pairs")
    guard_z: float = opt(1.96, "guard: z of the gap's normal interval (1.96: 95%)")
    guard_min_pairs: int = opt(8, "guard: anchor pairs of a class before it can be flagged")


@dataclass
class WorldModelConfig:
    kind: WorldModelKind = opt(WorldModelKind.learned, "learned (ensemble trained on executions) | prompted (a frozen causal LM asked, the paper's)")
    init: Optional[str] = opt(None, "learned: path of a fitted world model to start from")
    members: int = opt(4, "bootstrapped ensemble members")
    d_model: int = opt(64, "member width")
    layers: int = opt(2, "member transformer layers")
    heads: int = opt(4, "member attention heads")
    max_tokens: int = opt(256, "longest tokenized (task, program) input")
    lr: float = opt(1e-3, "learning rate")
    updates_per_step: int = opt(8, "gradient updates per training step")
    batch_size: int = opt(64, "examples per update")
    replay_size: int = opt(4096, "bounded replay of real executions")
    threads: int = opt(1, "torch threads while the WM predicts or trains (tiny matmuls: 1 is fastest); 0 = leave as is")
    model: Optional[str] = opt(None, "prompted: Hugging Face id or local path of the frozen LM; null = policy.model")
    mode: WorldModelMode = opt(WorldModelMode.generate, "prompted: generate (a JSON answer, parsed strictly) | score (likelihood of each answer)")
    backend: LMBackend = opt(LMBackend.hf, "prompted: hf (transformers, CPU or GPU) | vllm (GPU, optional extra)")
    quality_buckets: int = opt(5, "prompted: leaderboard position is asked as one of this many equal buckets")
    max_new_tokens: int = opt(64, "prompted, generate: longest answer, tokens")
    prompt_tokens: int = opt(1024, "prompted: longest prompt, tokens (the program's tail and oldest history cut first)")
    predict_batch: int = opt(8, "prompted: queries per forward pass")


@dataclass
class DebiasConfig:
    method: DebiasMethod = opt(DebiasMethod.isotonic, "isotonic (monotone map, the paper) | offset (weighted rectifier)")
    min_pairs: int = opt(16, "isotonic: identity until this many anchor pairs")
    refit_every: int = opt(8, "isotonic: refit after this many new pairs")
    buffer_size: int = opt(512, "FIFO of anchor pairs")
    half_life: float = opt(64.0, "offset: half-life of the bias estimate, in pairs")
    stratify_by: List[str] = opt(["action_class"], "strata keys (task, action_class, status); [] = one global fit")
    kappa: float = opt(8.0, "shrinkage of a stratum toward the global fit, in pseudo-pairs")
    min_stratum_pairs: int = opt(4, "isotonic: a stratum's own map is the identity until this many of its pairs")
    table_every: int = opt(10, "per-stratum table to MLflow every N steps (and at the end); 0 = at the end only")
    correct_observations: bool = opt(True, "also correct the predicted score shown to the agent")
    correct_decided: bool = opt(False, "also fit on and correct WM rewards the deterministic checks decided (exact); "
                                       "false: they pass through at variance 0 and the map learns the network's error only")


@dataclass
class DenoiseConfig:
    method: DenoiseMethod = opt(DenoiseMethod.inverse_variance, "anchor_upweight (the paper) | inverse_variance")
    c: float = opt(1.0, "anchor_upweight: w = clip(1 + c*s^2, 1, w_max)")
    ema: float = opt(0.9, "anchor_upweight: EMA factor of the residual s^2")
    sigma_floor: float = opt(0.05, "inverse_variance: real-execution noise floor (reward std)")
    w_min: float = opt(0.2, "smallest weight after normalisation")
    w_max: float = opt(3.0, "largest weight after normalisation")


@dataclass
class CallbacksConfig:
    debias: Optional[DebiasConfig] = opt(DebiasConfig(), "online debiasing; null removes it")
    denoise: Optional[DenoiseConfig] = opt(DenoiseConfig(), "inverse-variance denoising; null removes it")


@dataclass
class EvalConfig:
    every_n_steps: int = opt(10, "evaluate on held-out tasks every N steps (and at the end)")
    samples_per_task: int = opt(96, "completions per held-out task (96 x 7 tasks: eval/real_reward to about +-0.03)")
    split: EvalSplit = opt(EvalSplit.test, "split scored in evaluation: test (hidden) | val")
    temperature: float = opt(1.0, "sampling temperature in evaluation")
    at_start: bool = opt(True, "also evaluate the warm-start policy before step 1")
    train_prompts: int = opt(0, "completions per training task in each evaluation, on its test split (0: none): "
                                "eval/train_prompts, the real reward on the prompts the policy trained on")


@dataclass
class LoggerConfig:
    tracking_uri: str = opt("sqlite:///mlruns.db", "MLflow tracking store (sqlite file by default)")
    experiment_name: str = opt("wmrl", "MLflow experiment")
    run_name: Optional[str] = opt(None, "MLflow run name; null = preset name and time")
    samples_per_eval: int = opt(16, "sample trajectories saved as an artifact per evaluation")
    parent_run_id: Optional[str] = opt(None, "MLflow run to nest this run under (benchmarks)")
    report: bool = opt(True, "write the run report (PNGs, index.html) at the end and log it to MLflow")


@dataclass
class TrainerConfig:
    accelerator: str = opt("auto", "Lightning accelerator")
    devices: str = opt("1", "Lightning devices (ddp: processes, each rolling out its share of a step's groups)")
    strategy: str = opt("auto", "Lightning strategy: ddp with devices=N runs N processes (GPUs, or CPU with gloo)")
    precision: str = opt("32-true", "Lightning precision")
    progress_bar: bool = opt(True, "show the progress bar")


@dataclass
class Config:
    name: str = opt("wmrl", "preset name, used in run names")
    seed: int = opt(0, "seed of every random stream")
    run_dir: str = opt("runs", "where run directories are made")
    resume: Optional[str] = opt(None, "checkpoint path, or `last` for the newest run of this preset")
    threads: int = opt(0, "torch threads in the trainer; 0 = half the cores (the sandbox uses the rest)")
    domain: DomainName = opt("research", "what the agent acts in (wmrl/domains/): research = programs run in a sandbox (sections task, sandbox, world_model)")
    task: TaskConfig = opt(TaskConfig(), "")
    sandbox: SandboxConfig = opt(SandboxConfig(), "")
    policy: PolicyConfig = opt(PolicyConfig(), "")
    generation: GenerationConfig = opt(GenerationConfig(), "")
    rollout: RolloutConfig = opt(RolloutConfig(), "")
    rl: RLConfig = opt(RLConfig(), "")
    env: EnvConfig = opt(EnvConfig(), "")
    world_model: WorldModelConfig = opt(WorldModelConfig(), "")
    callbacks: CallbacksConfig = opt(CallbacksConfig(), "")
    eval: EvalConfig = opt(EvalConfig(), "")
    logger: LoggerConfig = opt(LoggerConfig(), "")
    trainer: TrainerConfig = opt(TrainerConfig(), "")


class ConfigError(ValueError):
    """A config that cannot be used; the message names the key and what was expected."""


def describe(schema: type = Config, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key, type, default, meaning) for every leaf key, in schema order."""
    rows = []
    for f in fields(schema):
        key = f"{prefix}{f.name}"
        default = f.default_factory() if f.default is MISSING else f.default
        inner = _dataclass_of(f.type)
        if inner is not None:
            if f.metadata.get("help"):
                rows.append((key, "section", "{...}" if default is not None else "null", f.metadata["help"]))
            rows.extend(describe(inner, key + "."))
        else:
            rows.append((key, _type_name(f.type), OmegaConf.to_yaml({"v": default}).strip()[3:], f.metadata.get("help", "")))
    return rows


def _dataclass_of(tp: Any) -> type | None:
    tp = _resolve(tp)
    for cand in [tp, *getattr(tp, "__args__", ())]:
        if is_dataclass(cand):
            return cand
    return None


def _resolve(tp: Any) -> Any:
    if isinstance(tp, str):
        import typing

        return eval(tp, {**vars(typing), **globals()})  # annotations are strings under `from __future__`
    return tp


def _choices_of(key: str) -> list[str]:
    """The values a `Choice` key allows ([] for any other key)."""
    schema: Any = Config
    for part in key.split("."):
        f = next((f for f in fields(schema) if f.name == part), None) if schema is not None else None
        if f is None:
            return []
        tp = _resolve(f.type)
        schema = _dataclass_of(tp)
    return [m.value for m in tp] if isinstance(tp, type) and issubclass(tp, Choice) else []


def _type_name(tp: Any) -> str:
    tp = _resolve(tp)
    if isinstance(tp, type) and issubclass(tp, Choice):
        return " | ".join(m.value for m in tp)
    if getattr(tp, "__args__", None):
        return str(tp).replace("typing.", "").replace("NoneType", "None")
    return getattr(tp, "__name__", str(tp))


def leaf_keys(schema: type = Config) -> list[str]:
    return [k for k, t, _, _ in describe(schema)]


def _closest(key: str) -> str:
    keys = leaf_keys() + [k for k, t, _, _ in describe() if t == "section"]
    last = key.split(".")[-1]
    near = difflib.get_close_matches(key, keys, n=3, cutoff=0.5)
    near += [k for k in difflib.get_close_matches(last, [k.split(".")[-1] for k in keys], n=3, cutoff=0.6)
             for k in [next(x for x in keys if x.split(".")[-1] == k)] if k not in near]
    return ", ".join(near[:4]) if near else "see `python train.py --help`"


def presets() -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


def load_config(overrides: list[str] | None = None, experiment: str | None = None) -> DictConfig:
    """Schema defaults <- conf/experiment/NAME.yaml <- dotlist overrides."""
    overrides = list(overrides or [])
    rest = []
    for o in overrides:
        if o.startswith("experiment="):
            experiment = o.split("=", 1)[1]
        else:
            rest.append(o)
    for o in rest:
        if "=" not in o:
            raise ConfigError(f"override {o!r} is not key=value")
    cfg = OmegaConf.structured(Config)
    layers: list[tuple[str, Any]] = []
    if experiment:
        path = CONF_DIR / "experiment" / f"{experiment}.yaml"
        if not path.exists():
            near = difflib.get_close_matches(experiment, presets(), n=3)
            raise ConfigError(f"unknown experiment {experiment!r}; presets: {', '.join(presets())}"
                              + (f" (closest: {', '.join(near)})" if near else ""))
        layers.append((f"experiment={experiment}", OmegaConf.load(path)))
    layers.append(("command line", OmegaConf.from_dotlist(rest)))
    for origin, layer in layers:
        try:
            cfg = OmegaConf.merge(cfg, layer)
        except ConfigKeyError as e:
            key = e.full_key or str(e.key)
            raise ConfigError(f"unknown config key {key!r} (from {origin}); closest valid keys: {_closest(key)}") from None
        except ValidationError as e:
            key = e.full_key or str(e.key)
            allowed = _choices_of(key)
            if allowed:
                raise ConfigError(f"config key {key!r} (from {origin}) must be one of {', '.join(allowed)}; "
                                  f"got {OmegaConf.select(layer, key)!r}") from None
            want = next((t for k, t, _, _ in describe() if k == key), "?")
            raise ConfigError(f"config key {key!r} (from {origin}) expects {want}: {e.msg.splitlines()[0]}") from None
        except OmegaConfBaseException as e:
            raise ConfigError(f"bad config (from {origin}): {e}") from None
    _check_choices(cfg)
    OmegaConf.set_readonly(cfg, False)
    return cfg


STRATA_KEYS = ("task", "action_class", "status")


def _check_choices(cfg: DictConfig) -> None:
    """What the schema's types cannot say (closed sets are `Choice` types, checked when the layers merge)."""
    if cfg.callbacks.debias is not None:
        for k in cfg.callbacks.debias.stratify_by:
            if k not in STRATA_KEYS:
                raise ConfigError(f"callbacks.debias.stratify_by: unknown stratum {k!r}; valid: {', '.join(STRATA_KEYS)}")
    for key in ("env.anchor_rate", "env.anchor_rate_min", "env.anchor_rate_max", "env.anchor_floor", "policy.sft_invalid_rate",
                "policy.sft_prompt_mix"):
        if not 0.0 <= OmegaConf.select(cfg, key) <= 1.0:
            raise ConfigError(f"{key} must be in [0, 1]; got {OmegaConf.select(cfg, key)}")
    for key in ("env.guard_z", "env.adaptive_mae_scale"):
        if not OmegaConf.select(cfg, key) > 0:
            raise ConfigError(f"config key {key!r} must be > 0; got {OmegaConf.select(cfg, key)}")
    if cfg.callbacks.debias is not None and (cfg.callbacks.debias.min_stratum_pairs < 1 or cfg.callbacks.debias.table_every < 0):
        raise ConfigError("callbacks.debias.min_stratum_pairs must be >= 1 and callbacks.debias.table_every >= 0; got "
                          f"{cfg.callbacks.debias.min_stratum_pairs} and {cfg.callbacks.debias.table_every}")
    if cfg.env.anchor_rate_min > cfg.env.anchor_rate_max:
        raise ConfigError(f"env.anchor_rate_min ({cfg.env.anchor_rate_min}) > env.anchor_rate_max ({cfg.env.anchor_rate_max})")
    if cfg.world_model.kind == "prompted" and not (cfg.world_model.model or cfg.policy.model):
        raise ConfigError("world_model.kind=prompted needs a checkpoint: world_model.model=PATH (or policy.model=PATH)")
    if cfg.world_model.quality_buckets < 2:
        raise ConfigError(f"world_model.quality_buckets must be >= 2; got {cfg.world_model.quality_buckets}")
    if effective_policy(cfg.policy).lora_rank > 0 and cfg.generation.backend == "vllm":
        # the engine loads plain weights; adapters would need merging before every sync
        key = "policy.checkpoint.lora_rank" if cfg.policy.model else "policy.lora_rank"
        raise ConfigError(f"{key} > 0 is not supported with generation.backend=vllm yet; set {key}=0")
    for key in ("rollout.groups_per_step", "rollout.group_size", "rollout.turns", "rl.steps", "rl.updates_per_batch",
                "env.anchor_lag", "env.guard_min_pairs", "env.adaptive_min_pairs"):
        if OmegaConf.select(cfg, key) < 1:
            raise ConfigError(f"config key {key!r} must be >= 1; got {OmegaConf.select(cfg, key)}")
    from wmrl.distributed import world_size

    world = world_size(cfg.trainer)
    if cfg.rollout.groups_per_step % world:
        raise ConfigError(f"rollout.groups_per_step ({cfg.rollout.groups_per_step}) must be a multiple of the {world} "
                          f"DDP processes (trainer.devices): each rank rolls out an equal share of a step's groups")


def effective_policy(policy: DictConfig) -> DictConfig:
    """`policy` as it trains: with a checkpoint (`policy.model`), `policy.checkpoint.*` in place of the fields of the
    same names (the top-level ones size and warm-start the small built-in policy)."""
    if not policy.model:
        return policy
    return OmegaConf.merge(policy, OmegaConf.to_container(policy.checkpoint))


def defaults_yaml(schema: type = Config, indent: int = 0) -> str:
    """The schema's defaults as commented YAML (what `conf/config.yaml` holds)."""
    lines = []
    pad = "  " * indent
    for f in fields(schema):
        default = f.default_factory() if f.default is MISSING else f.default
        default = default.value if isinstance(default, Choice) else default
        inner = _dataclass_of(f.type)
        help_ = f.metadata.get("help", "")
        if inner is not None and default is not None:
            lines.append(f"{pad}{f.name}:" + (f"  # {help_}" if help_ else ""))
            lines.append(defaults_yaml(inner, indent + 1))
        else:
            value = yaml.safe_dump({"v": default}, default_flow_style=True, width=10**6).strip()[4:-1]
            lines.append(f"{pad}{f.name}: {value}" + (f"  # {help_}" if help_ else ""))
    return "\n".join(lines)


if __name__ == "__main__":
    print("# GENERATED from the schema in wmrl/config.py by `python -m wmrl.config > conf/config.yaml`: do not edit.\n"
          "# Every default and its meaning; presets in conf/experiment/ and key=value overrides change them.")
    print(defaults_yaml())
