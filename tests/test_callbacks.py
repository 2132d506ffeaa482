"""The correction callbacks on hand-built rollout batches (no language model, no sandbox)."""
import io
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from callbacks import DebiasCallback, DenoiseCallback, correction_callbacks
from wmrl.rollout import Source, RolloutBatch
from wmrl.config import DenoiseConfig, load_config
from wmrl.corrections import Debiaser

NAN = float("nan")
CLASS_BIAS = {"forest": 0.3, "linear": 0.0}  # the WM overrates forests only


def make_batch(real, wm, wm_var, classes, anchor_groups, group_size=4, valid=None):
    """Rows grouped `group_size` at a time; groups in `anchor_groups` executed for real and WM-scored."""
    n = len(wm)
    group_ids = torch.arange(n) // group_size
    is_anchor = torch.tensor([int(g) in anchor_groups for g in group_ids])
    real = torch.where(is_anchor, torch.tensor(real, dtype=torch.float32), torch.tensor(NAN))
    wm = torch.tensor(wm, dtype=torch.float32)
    return RolloutBatch(
        input_ids=torch.zeros(n, 3, dtype=torch.long), attention_mask=torch.ones(n, 3, dtype=torch.long),
        loss_mask=torch.ones(n, 3), old_logprobs=torch.zeros(n, 3), group_ids=group_ids,
        reward=torch.where(is_anchor, real, wm), real_reward=real, wm_reward=wm,
        wm_var=torch.tensor(wm_var, dtype=torch.float32),
        reward_var=torch.where(is_anchor, 0.0, torch.tensor(wm_var, dtype=torch.float32)), source=torch.where(is_anchor, int(Source.REAL), int(Source.WM)),
        is_anchor=is_anchor, valid=torch.ones(n, dtype=torch.bool) if valid is None else torch.tensor(valid),
        weight=torch.ones(n), strata={"action_class": list(classes), "task": ["iris"] * n})


def biased_batch(seed=0, anchor_groups=(0,), groups=3, valid=None):
    rng = np.random.default_rng(seed)
    n = 4 * groups
    classes = ["forest", "linear"] * (n // 2)
    real = rng.uniform(0.2, 0.8, n)
    var = rng.uniform(0.001, 0.05, n)
    wm = real + np.array([CLASS_BIAS[c] for c in classes]) + rng.normal(0, 0.01, n)
    return make_batch(real, wm, var, classes, set(anchor_groups), valid=valid)


def denoise_callback(**overrides) -> DenoiseCallback:
    """A DenoiseCallback with the schema's defaults but `overrides`."""
    return DenoiseCallback.from_config(DenoiseConfig(**overrides))


class Recorder:
    """Keeps the metrics a stage returned."""

    def __init__(self):
        self.logged = {}


def apply(stage, batch, rec=None):
    """Run a correction stage as the step does: the batch it returns; its metrics into `rec`."""
    out, metrics = stage(batch)
    if rec is not None:
        rec.logged.update(metrics)
    return out


def trainer_stub(callbacks, loggers=()):
    return SimpleNamespace(callbacks=list(callbacks), loggers=list(loggers))


def warmed_debias(method="offset", pairs=8):
    cb = DebiasCallback(Debiaser(method, ["action_class"], kappa=1.0, min_pairs=4, half_life=float("inf")))
    for seed in range(pairs):
        b = biased_batch(seed=100 + seed, anchor_groups=(0, 1, 2))
        b = apply(cb, b)
    return cb


@pytest.mark.parametrize("method", ["offset", "isotonic"])
def test_debias_rewrites_wm_rows_and_keeps_anchor_rewards(method):
    cb = warmed_debias(method)
    batch = biased_batch(seed=1, valid=[True] * 11 + [False])
    raw_reward = batch.reward.clone()
    batch = apply(cb, batch)
    anchors, wm_rows = batch.is_anchor, batch.wm_only
    assert torch.equal(batch.reward[anchors], batch.real_reward[anchors])
    assert not torch.isclose(batch.reward[wm_rows], raw_reward[wm_rows]).all()
    assert batch.reward[11] == raw_reward[11]  # an invalid row is left alone
    assert torch.equal(batch.wm_reward[wm_rows], raw_reward[wm_rows])  # the raw WM score is kept
    # the class-dependent bias is gone from the WM rows: corrected ≈ real reward of the same program
    rng = np.random.default_rng(1)
    true_real = torch.tensor(rng.uniform(0.2, 0.8, 12), dtype=torch.float32)
    err = (batch.reward - true_real)[wm_rows]
    assert err.abs().max() < 0.06, err
    assert (raw_reward - true_real)[wm_rows].abs().max() > 0.25


def test_debias_learns_from_the_batch_anchor_pairs_before_correcting():
    cb = DebiasCallback(Debiaser("offset", ["action_class"], kappa=1.0, half_life=float("inf")))
    rec = Recorder()
    batch = biased_batch(seed=2, anchor_groups=(0,))
    batch = apply(cb, batch, rec)
    assert cb.debiaser.pairs == 4
    # on the very first batch the WM rows are already corrected with the pairs that arrived with it
    forest_wm = [i for i in range(4, 12) if batch.strata["action_class"][i] == "forest"]
    assert torch.all(batch.wm_reward[forest_wm] - batch.reward[forest_wm] > 0.2)
    assert set(rec.logged) == {"debias/pairs", "debias/bias_global", "debias/strata", "debias/mae_before", "debias/mae_after"}
    assert rec.logged["debias/pairs"] == 4.0 and rec.logged["debias/strata"] == 2.0
    assert rec.logged["debias/mae_after"] == rec.logged["debias/mae_before"]  # out of sample: nothing learned before


def test_the_callbacks_debiaser_corrects_scores_shown_elsewhere_and_names_missing_strata():
    debiaser = warmed_debias("offset").debiaser  # what the environment is handed for observations
    scores = [0.9, 0.6]
    out = debiaser.correct(scores, debiaser.keys_of({"action_class": ["forest", "linear"]}))
    assert out[0] < 0.9 - 0.25 and abs(out[1] - 0.6) < 0.05
    with pytest.raises(KeyError, match="action_class"):
        debiaser.keys_of({"task": ["iris", "iris"]})


def test_denoise_inverse_variance_sets_weights():
    cb = denoise_callback(method="inverse_variance", sigma_floor=0.05, w_min=0.2, w_max=3.0)
    rec = Recorder()
    batch = biased_batch(seed=3, valid=[True] * 11 + [False])
    batch = apply(cb, batch, rec)
    w = batch.weight
    assert torch.allclose(w[:4], w[0].expand(4))  # one anchor group: equal real-execution noise, equal weight
    for group in (torch.arange(4, 8), torch.arange(8, 11)):  # within a group (one s_g): more variance, less weight
        order = torch.argsort(batch.reward_var[group])
        assert torch.all(torch.diff(w[group][order]) <= 1e-6)
    assert w[11] == 0.0 and w[:11].min() >= 0.2 and w[:11].max() <= 3.0
    assert set(rec.logged) == {"denoise/weight_mean", "denoise/weight_min", "denoise/weight_max"}


def test_denoise_anchor_upweight_uses_the_calibrated_residual():
    debias = warmed_debias("offset")
    raw = denoise_callback(method="anchor_upweight", c=1.0, ema=0.5, w_max=10.0)
    calibrated = denoise_callback(method="anchor_upweight", c=1.0, ema=0.5, w_max=10.0)
    for seed in range(3):
        apply(raw, biased_batch(seed=10 + seed))
        rec = Recorder()
        batch = biased_batch(seed=10 + seed)
        batch = apply(debias, batch, rec)
        batch = apply(calibrated, batch, rec)
    # the forest bias is class-dependent, so it survives group-centring and shows in raw s²;
    # after debiasing little residual remains
    assert raw.s2 > 0.5 and calibrated.s2 < 0.5 * raw.s2
    w = batch.weight
    assert torch.allclose(w[:4], torch.full((4,), 1.0 + calibrated.s2)) and torch.equal(w[4:], torch.ones(8))
    assert rec.logged["denoise/s2"] == pytest.approx(calibrated.s2)


def _through_checkpoint(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


@pytest.mark.parametrize("method", ["offset", "isotonic"])
def test_callback_state_survives_a_checkpoint_round_trip(method):
    debias = warmed_debias(method)
    denoise = denoise_callback(method="anchor_upweight")
    apply(denoise, biased_batch(seed=20))
    fresh_debias = DebiasCallback(Debiaser(method, ["action_class"], kappa=1.0, min_pairs=4, half_life=float("inf")))
    fresh_denoise = denoise_callback(method="anchor_upweight")
    fresh_debias.load_state_dict(_through_checkpoint(debias.state_dict()))
    fresh_denoise.load_state_dict(_through_checkpoint(denoise.state_dict()))
    out = []
    for cbs in ([debias, denoise], [fresh_debias, fresh_denoise]):
        batch = biased_batch(seed=21)
        for cb in cbs:
            batch = apply(cb, batch)
        out.append(batch)
    a, b = out
    assert torch.equal(a.reward, b.reward) and torch.equal(a.weight, b.weight)
    assert fresh_denoise.s2 == denoise.s2 and fresh_debias.batches == debias.batches


def test_strata_table_goes_to_mlflow_as_an_artifact(tmp_path):
    from lightning.pytorch.loggers import MLFlowLogger

    logger = MLFlowLogger(experiment_name="t", tracking_uri=f"sqlite:///{tmp_path}/ml.db")
    cb = warmed_debias("offset")
    cb.table_every = 1
    apply(cb, biased_batch(seed=30))
    cb.on_train_batch_end(trainer_stub([cb], [logger]), SimpleNamespace(rl_step=7), None, None, 0)
    local = logger.experiment.download_artifacts(logger.run_id, "debias/strata_step_7.md", str(tmp_path))  # the RL step
    text = Path(local).read_text()
    assert "| forest |" in text and "| linear |" in text and "| * |" in text
    apply(cb, biased_batch(seed=31))
    cb.on_train_batch_end(trainer_stub([cb], []), SimpleNamespace(rl_step=8), None, None, 0)  # no logger: no error


@pytest.mark.parametrize("method", ["inverse_variance", "anchor_upweight"])
def test_the_corrections_are_pure_transforms_of_the_batch(method):
    """The step hands each stage's batch to the next; a correction never writes into the batch it was given."""
    debias, denoise = warmed_debias("isotonic"), denoise_callback(method=method)
    batch = biased_batch(seed=40)
    before = {k: v.clone() for k, v in vars(batch).items() if isinstance(v, torch.Tensor)}
    corrected = apply(denoise, apply(debias, batch))
    for k, v in before.items():
        assert torch.equal(getattr(batch, k), v) or (torch.isnan(v).any() and torch.allclose(getattr(batch, k), v, equal_nan=True)), k
    assert not torch.equal(corrected.reward, batch.reward) and not torch.equal(corrected.weight, batch.weight)


def test_from_config_builds_the_configured_callbacks_in_order():
    cfg = load_config(["callbacks.debias.method=offset", "callbacks.denoise.method=anchor_upweight"])
    debiaser, (debias, denoise) = correction_callbacks(cfg.callbacks)
    assert isinstance(debias, DebiasCallback) and debias.debiaser is debiaser and debiaser.method == "offset"
    assert debiaser.stratify_by == ("action_class",)
    assert isinstance(denoise, DenoiseCallback) and denoise.method == "anchor_upweight"
    assert correction_callbacks(load_config(["experiment=wm_raw"]).callbacks) == (None, [])
    debiaser, (denoise,) = correction_callbacks(load_config(["experiment=wmrl_no_debias"]).callbacks)
    assert debiaser is None and isinstance(denoise, DenoiseCallback)


def test_callbacks_inside_a_real_lightning_trainer(tmp_path):
    """A module runs the step of the trainer's callbacks on each RolloutBatch (as WMRLModule does); Lightning
    checkpoints the callbacks' state."""
    import lightning.pytorch as pl

    from callbacks import step_of
    from wmrl.rl import group_advantages, policy_loss

    class TinyPolicy(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.logits = torch.nn.Parameter(torch.zeros(3))
            self.rl_step = 0  # what the debias callback's table is filed under

        def on_fit_start(self):
            self.step = step_of(self.trainer.callbacks, update=lambda b: {})

        def training_step(self, batch, batch_idx):
            batch, metrics = self.step(batch)
            self.rl_step += 1
            self.log_dict(metrics, batch_size=len(batch))
            adv = group_advantages(batch.reward, batch.group_ids, batch.weight, batch.valid)
            logp = torch.log_softmax(self.logits, 0)[batch.input_ids]
            loss, _ = policy_loss(logp, logp.detach(), adv, batch.loss_mask, weight=batch.weight)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    batches = [biased_batch(seed=40 + i, anchor_groups=(i % 3,)) for i in range(3)]
    debias = DebiasCallback(Debiaser("isotonic", ["action_class"], min_pairs=4))
    denoise = denoise_callback(method="inverse_variance")
    trainer = pl.Trainer(max_epochs=1, callbacks=[debias, denoise], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(TinyPolicy(), DataLoader(batches, batch_size=None, collate_fn=lambda b: b))
    logged = set(trainer.callback_metrics)
    assert {"debias/pairs", "debias/bias_global", "debias/mae_before", "debias/mae_after",
            "denoise/weight_mean", "denoise/weight_min", "denoise/weight_max"} <= logged
    assert trainer.callback_metrics["debias/pairs"].item() == 12.0
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    ckpt = torch.load(tmp_path / "last.ckpt", weights_only=True)
    restored = DebiasCallback(Debiaser("isotonic", ["action_class"], min_pairs=4))
    restored.load_state_dict(ckpt["callbacks"][debias.state_key])
    probe, keys = [0.4, 0.9], [("forest",), ("linear",)]
    assert np.array_equal(restored.debiaser.correct(probe, keys), debias.debiaser.correct(probe, keys))
    assert not math.isnan(float(trainer.callback_metrics["debias/bias_global"]))


def test_debias_passes_the_variance_through_the_map():
    """A map that stretches scores (real = 2 * wm - 0.2 here) stretches the WM's variance by slope^2."""
    rng = np.random.default_rng(0)
    wm = rng.uniform(0.3, 0.6, 40)
    real = 2 * wm - 0.2
    cb = DebiasCallback(Debiaser("isotonic", stratify_by=[], min_pairs=4, refit_every=1, buffer_size=512))
    apply(cb, make_batch(real, wm, [0.01] * 40, ["linear"] * 40, set(range(10))))
    batch = make_batch(real, wm, [0.01] * 40, ["linear"] * 40, anchor_groups=set())
    batch = apply(cb, batch)
    inner = (wm > 0.36) & (wm < 0.54)  # away from the ends of the fitted range, where the map is clipped
    assert np.allclose(batch.reward_var.numpy()[inner], 0.04, rtol=0.35)
    assert torch.allclose(batch.wm_var, torch.full((40,), 0.01))  # the world model's own variance is kept apart
    offset = DebiasCallback(Debiaser("offset", stratify_by=[], half_life=8.0))
    batch = biased_batch()
    before = batch.reward_var.clone()
    batch = apply(offset, batch)
    wm_rows = batch.wm_only
    added = batch.reward_var[wm_rows] - before[wm_rows]  # a shift has slope 1: the WM's variance passes as is,
    assert torch.all(added >= 0) and torch.allclose(added, added[0].expand_as(added))  # plus the error's scatter


def test_each_turn_is_corrected_in_its_own_class_before_the_max():
    """Turn 1 wrote a linear model (WM 0.6, honest), turn 2 a forest (WM 0.8, overrated by 0.3). The
    trajectory's corrected reward is max(0.6, 0.5) = 0.6, not f_forest(max) = 0.5; and each executed
    turn of an anchor is its own pair, filed under its own class."""
    from wmrl.domains.research.outcome import Outcome, Status
    from wmrl.rollout import Judgement, Trajectory, Turn, make_batch

    def traj(group, wms, classes, reals=None):
        turns = []
        for k, (w, c) in enumerate(zip(wms, classes)):
            real = None if reals is None else Outcome("wine", Status.VALID, reward=reals[k], pos=2 * reals[k] - 1)
            turns.append(Turn("p", c, Judgement(real=real, wm_reward=w, wm_var=0.001, wm_status=Status.VALID)))
        return Trajectory("wine", group, [1, 2], [0, 1], [0.0, -1.0], turns=turns, executed=reals is not None,
                          scored=True)

    cb = DebiasCallback(Debiaser("offset", ["action_class"], kappa=0.01, half_life=float("inf")))
    anchors = [traj(0, [0.9, 0.65], ["forest", "linear"], reals=[0.6, 0.65]) for _ in range(4)]
    apply(cb, make_batch(anchors, 0, 8))
    assert cb.debiaser.pairs == 8  # two turns per anchor, each its own pair
    assert cb.debiaser.correct([0.8], [("forest",)])[0] == pytest.approx(0.5, abs=1e-3)
    batch = make_batch([traj(0, [0.6, 0.8], ["linear", "forest"])], 0, 8)
    batch = apply(cb, batch)
    assert batch.reward[0].item() == pytest.approx(0.6, abs=1e-3)


def test_a_checkpoint_is_written_after_every_step_even_one_whose_update_was_skipped(tmp_path):
    """wmrl's module skips the optimizer step when every group is tied; Lightning's ModelCheckpoint counts
    optimizer steps, so such a step wrote no checkpoint and a resume replayed it. StepCheckpoint writes after
    every step, and keeps the datamodule's state under the project's key."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint

    from callbacks.checkpoint import StepCheckpoint

    class Skipping(pl.LightningModule):  # updates on odd steps only, as a run whose even steps are all tied
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.rl_step = 0

        def training_step(self, batch, batch_idx):
            self.rl_step += 1
            if batch_idx % 2:
                opt = self.optimizers()
                opt.zero_grad()
                self.manual_backward((self.w - 1).pow(2).sum())
                opt.step()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def on_save_checkpoint(self, checkpoint):
            checkpoint.setdefault("wmrl", {})["rl_step"] = self.rl_step

    class Data(pl.LightningDataModule):
        def train_dataloader(self):
            return DataLoader([torch.zeros(1)] * 4, batch_size=None)

        def state_dict(self):
            return {"seen": "state"}

    class Seen(Callback):  # what last.ckpt holds at the end of each step, once the checkpoints are written
        def __init__(self, path):
            self.path, self.steps = path, []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.steps.append(torch.load(self.path, weights_only=False)["wmrl"]["rl_step"] if self.path.exists() else None)

    def run(checkpoint, folder):
        seen = Seen(folder / "last.ckpt")
        trainer = pl.Trainer(max_epochs=1, callbacks=[checkpoint, seen], logger=False, enable_progress_bar=False,
                             enable_model_summary=False, default_root_dir=tmp_path)
        trainer.fit(Skipping(), datamodule=Data())
        return seen.steps, torch.load(folder / "last.ckpt", weights_only=False)

    # Seen runs before the checkpoint callbacks (Lightning orders them last): it reads the previous step's file
    ours, ckpt = run(StepCheckpoint(tmp_path / "ours"), tmp_path / "ours")
    assert ours == [None, 1, 2, 3] and ckpt["wmrl"]["rl_step"] == 4 and ckpt["wmrl"]["rollout"] == {"seen": "state"}
    lightning, _ = run(ModelCheckpoint(dirpath=tmp_path / "mc", save_last=True, save_top_k=0, every_n_train_steps=1),
                       tmp_path / "mc")
    assert lightning != ours  # the skipped steps left no checkpoint of their own


def test_a_reward_the_checks_decided_is_exact_not_a_pair_and_not_corrected():
    """Issue 27. The world model overrates valid programs by 0.3 and the checks decide the malformed ones
    exactly (0.0). With the old path (correct_decided) the malformed pairs (0, 0) join the fit and the map's
    scatter lands on them; now the fit learns from the valid pairs alone, a decided reward stays 0.0 at
    variance 0, and the map is not dragged toward identity by exact pairs."""
    from wmrl.domains.research.outcome import Outcome, Status
    from wmrl.rollout import Judgement, Trajectory, Turn, make_batch as make_rollout_batch

    def traj(group, wm, status, real=None):
        exact = status is not Status.VALID
        outcome = None if real is None else Outcome("wine", status, reward=real, pos=max(0.0, 2 * real - 1))
        j = Judgement(real=outcome, wm_reward=wm, wm_var=0.0 if exact else 0.01, wm_status=status, wm_exact=exact)
        return Trajectory("wine", group, [1, 2], [0, 1], [0.0, -1.0], turns=[Turn("p", "forest", j)],
                          executed=real is not None, scored=True)

    rng = np.random.default_rng(0)

    def batch(anchored: bool):
        rows = []
        for g in range(4):
            for _ in range(3):
                r = float(rng.uniform(0.5, 0.7))
                rows.append(traj(g, r + 0.3, Status.VALID, r if anchored else None))
            rows.append(traj(g, 0.0, Status.MALFORMED, 0.0 if anchored else None))
        return make_rollout_batch(rows, 0, 8)

    def trained(correct_decided):
        cb = DebiasCallback(Debiaser("offset", [], half_life=float("inf")), correct_decided=correct_decided)
        apply(cb, batch(anchored=True))
        return cb

    new, old = trained(False), trained(True)
    assert new.debiaser.pairs == 12 and old.debiaser.pairs == 16  # the 4 malformed anchors are no pairs now
    assert new.debiaser.bias() == pytest.approx(0.3, abs=1e-6)  # the network's error, not diluted by exact pairs
    assert old.debiaser.bias() == pytest.approx(0.225, abs=1e-6)
    rec = Recorder()
    out = apply(new, batch(anchored=False), rec)
    malformed = torch.tensor([s == "malformed" for s in out.strata["status"]])
    assert torch.all(out.reward[malformed] == 0.0) and torch.all(out.reward_var[malformed] == 0.0)
    assert torch.allclose(out.reward[~malformed], out.wm_reward[~malformed] - 0.3, atol=1e-5)
    # the metric says what the map would have done to them: lowered the exact 0.0 by the shared offset
    assert rec.logged["debias/decided_turns"] == 4.0
    assert rec.logged["debias/decided_shift"] == pytest.approx(-0.3, abs=1e-5)
    before = apply(old, batch(anchored=False))
    assert torch.all(before.reward[malformed] < -0.2) and torch.all(before.reward_var[malformed] > 0)
