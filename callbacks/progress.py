"""What a person sees while a run trains: one header line, then a bar in RL steps ("step 7/30") with the
training reward, the held-out reward and its 95 % interval at the last evaluation, real executions so far
and seconds per step — one plain line per step when stdout is not a terminal (logs, CI)."""
from __future__ import annotations

import sys
from typing import Any

from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

from callbacks.cost import CostCallback
from callbacks.evaluation import EvaluationCallback
from wmrl.report.data import eval_ci


def arms(cfg) -> str:
    """Where the programs of a step are judged, in words."""
    env = cfg.env
    if env.mode != "wm":
        return "real execution for every program"
    rate = (f"{env.anchor_rate_max:g}→{env.anchor_rate_min:g} adaptive" if env.adaptive_rate else f"{env.anchor_rate:g}")
    return (f"real for {env.warmup_steps} warm-up step(s), then world model + anchors "
            f"({env.anchor_selection}, rate {rate}){' + guard' if env.guard else ''}")


TIED_WARN = 2  # steps in a row with every group tied before the progress line warns


class StepProgressBar(TQDMProgressBar):
    """Lightning's tqdm bar, counting RL steps. Reads the step's numbers from the parts that own them:
    the training reward the module puts on the bar, `cost.totals`, `evaluation.metrics`.
    Must come after the evaluation callback, so a step's bar shows that step's evaluation."""

    BAR_FORMAT = "step {n_fmt}/{total_fmt} |{bar:20}| [{elapsed}<{remaining}]{postfix}"

    def __init__(self, steps: int, header: dict, cost: CostCallback, evaluation: EvaluationCallback,
                 enabled: bool = True, stream=sys.stdout):
        # disabled = refresh rate 0: the header still prints, the per-step bar or lines do not
        # leave=False: one bar for the run (Lightning's leave=True opens a new bar per epoch), kept on close
        super().__init__(refresh_rate=1 if enabled else 0, leave=False)
        self.steps, self.header, self.cost, self.evaluation, self.stream = steps, header, cost, evaluation, stream
        self.lines = not stream.isatty()  # a log file gets one line per step, not carriage returns

    def header_line(self, trainer: Any) -> str:
        logger = trainer.logger
        h = self.header
        return (f"wmrl {h['preset']} · run dir {h['run_dir']} · MLflow experiment {h['experiment']!r} run {logger.run_id} · "
                f"device {trainer.strategy.root_device} · steps: {h['arms']}")

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.is_global_zero:  # under DDP, one header (rank 0 alone has the MLflow run)
            print(self.header_line(trainer), file=self.stream, flush=True)
        super().on_train_start(trainer, pl_module)

    def init_train_tqdm(self) -> Tqdm:
        return Tqdm(total=self.steps, disable=self.is_disabled or self.lines, leave=True, dynamic_ncols=True, file=self.stream,
                    smoothing=0, bar_format=self.BAR_FORMAT)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self.train_progress_bar.total = self.steps
        self.train_progress_bar.initial = pl_module.rl_step  # a resumed run continues where it was
        self.train_progress_bar.n = pl_module.rl_step

    def get_metrics(self, trainer: Any, pl_module: Any) -> dict:
        """Replaces Lightning's (v_num, loss): the numbers a person watches an RL run by."""
        out = {}
        reward = trainer.progress_bar_metrics.get("reward")
        if reward is not None:
            out["train reward"] = f"{reward:.3f}"
        ev = self.evaluation.metrics
        if ev.get("eval/real_reward") is not None:
            ci = eval_ci(ev)
            out["held-out"] = f"{ev['eval/real_reward']:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") + \
                f" @{self.evaluation.last_step}"
        out["real execs"] = f"{self.cost.totals['cost/real_executions']:.0f}"
        if pl_module.rl_step:
            out["s/step"] = f"{self.cost.totals['cost/train_s'] / pl_module.rl_step:.1f}"
        if getattr(pl_module, "tied_streak", 0) >= TIED_WARN:
            out["WARNING"] = (f"no learning signal for {pl_module.tied_streak} steps: every group's rewards tied, "
                              "nothing to update (see train/status/*)")
        return out

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        metrics = self.get_metrics(trainer, pl_module)
        if self.is_disabled:
            return
        if self.lines:
            print(f"step {pl_module.rl_step}/{self.steps} · " + " · ".join(f"{k} {v}" for k, v in metrics.items()),
                  file=self.stream, flush=True)
            return
        self.train_progress_bar.n = pl_module.rl_step
        self.train_progress_bar.set_postfix(metrics, refresh=True)
