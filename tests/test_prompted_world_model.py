"""The prompted-LM world model (`world_model.kind=prompted`): strict JSON answers, a malformed answer as a
maximally uncertain prediction, answer likelihoods normalised into the reward's distribution (one prefix
forward, answers batched on its cache), frozen weights, and the vLLM path against a fake engine."""
from __future__ import annotations

import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checkpoints import make_checkpoint  # noqa: E402

from wmrl.domains.research.outcome import PREDICTED_STATUSES, Outcome, Status  # noqa: E402
from wmrl.domains.research.world_model import PromptedLMWM, WMQuery, WorldModel, make_world_model  # noqa: E402
from wmrl.domains.research.world_model.lm import HFFrozenLM, load_frozen  # noqa: E402
from wmrl.domains.research.world_model.prompted import parse_answer, score_distribution  # noqa: E402

RF = "from sklearn.ensemble import RandomForestClassifier\n\n\ndef build():\n    return RandomForestClassifier()\n"
KNN = "from sklearn.neighbors import KNeighborsClassifier\n\n\ndef build():\n    return KNeighborsClassifier()\n"
TREE = "from sklearn.tree import DecisionTreeClassifier\n\n\ndef build():\n    return DecisionTreeClassifier()\n"
DESC = "task=wine kind=classification n=124 d=13 classes=3 metric=accuracy"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("lm") / "ckpt")


class ScriptedLM:
    """A frozen LM that answers from a script and records what it was asked."""

    def __init__(self, tokenizer, answers=(), scores=None):
        self.tokenizer, self.answers, self.scores, self.asked = tokenizer, list(answers), scores, []

    def complete(self, prompts, max_new_tokens):
        self.asked += prompts
        return [self.tokenizer(self.answers.pop(0), add_special_tokens=False)["input_ids"] for _ in prompts]

    def score(self, items):
        self.asked += [p for p, _ in items]
        return [self.scores(answers) for _, answers in items]


def _wm(checkpoint, lm_factory, **cfg) -> tuple[PromptedLMWM, object]:
    tok = load_frozen(str(checkpoint), "hf").tokenizer
    lm = lm_factory(tok)
    return PromptedLMWM({"kind": "prompted", "model": str(checkpoint), **cfg}, lm), lm


def test_answers_are_parsed_strictly():
    ok = parse_answer('{"status": "valid", "quality": 3, "confidence": 0.8, "error": ""}', 5)
    assert ok == {"status": "valid", "quality": 3, "confidence": 0.8, "error": ""}
    assert parse_answer('```json\n{"status": "timeout", "confidence": 1}\n```', 5)["status"] == "timeout"
    for bad in ['Sure! {"status": "valid", "quality": 3, "confidence": 0.8}',  # prose around it
                '{"status": "valid", "confidence": 0.8}',  # valid without a bucket
                '{"status": "valid", "quality": 5, "confidence": 0.8}',  # bucket out of range
                '{"status": "valid", "quality": 2.5, "confidence": 0.8}',
                '{"status": "crashed", "confidence": 0.8}',  # not a status
                '{"status": "timeout", "confidence": 1.5}', '{"status": "timeout", "confidence": true}',
                '{"status": "timeout"}',  # no confidence
                '{"status": "timeout", "confidence": 1, "why": "slow"}',  # a key the format does not have
                '{"status": "timeout", "confidence": 1, "error": 3}', '["timeout"]', '{"status": "timeout", ']:
        assert parse_answer(bad, 5) is None, bad


def test_generated_answers_become_predictions_and_a_malformed_one_is_maximally_uncertain(checkpoint):
    answers = ["I think it runs fine.",
               '{"status": "runtime_error", "quality": null, "confidence": 1.0, "error": "ValueError: bad input"}',
               '{"status": "valid", "quality": 4, "confidence": 0.5, "error": ""}']
    wm, lm = _wm(checkpoint, lambda tok: ScriptedLM(tok, answers))
    assert isinstance(wm, WorldModel)
    pred = wm.predict([WMQuery("wine", DESC, p, "", "accuracy") for p in (RF, KNN, TREE)])
    assert pred.malformed.tolist() == [True, False, False]
    torch.testing.assert_close(pred.status_probs[0], torch.full((6,), 1 / 6))  # nothing known about the status
    assert float(pred.pos_mean[0]) == pytest.approx(0.5) and float(pred.pos_std[0]) ** 2 == pytest.approx(1 / 12)
    assert float(pred.reward_var[0]) > 0.05  # maximal entropy, so never a confident reward
    assert pred.status[1] is Status.RUNTIME_ERROR and float(pred.reward_mean[1]) == pytest.approx(0.1)
    assert float(pred.reward_var[1]) == pytest.approx(0.0, abs=1e-7)
    assert pred.observations()[1] == "[execution] status: runtime_error; error: ValueError: bad input"
    # valid, bucket 4 of 5 = [0.8, 1.0] at confidence 0.5: pos = 0.5 * 0.9 + 0.5 * 0.5
    assert float(pred.pos_mean[2]) == pytest.approx(0.7)
    assert float(pred.status_probs[2, PREDICTED_STATUSES.index(Status.VALID)]) == pytest.approx(0.5 + 0.5 / 6)
    assert len(lm.asked) == 3


def test_programs_the_checks_decide_never_reach_the_lm(checkpoint):
    wm, lm = _wm(checkpoint, lambda tok: ScriptedLM(tok, ['{"status": "valid", "quality": 1, "confidence": 0.9}']))
    undefined = "def build():\n    return RandomForestClassifier()\n"
    pred = wm.predict([WMQuery("wine", DESC, p) for p in ("def build(:\n", "x = 1\n", undefined, RF)])
    assert pred.status[:3] == [Status.SYNTAX_ERROR, Status.MALFORMED, Status.RUNTIME_ERROR]
    assert pred.reward_var[:3].tolist() == [0.0, 0.0, 0.0] and pred.prechecked.tolist() == [True, True, True, False]
    assert len(lm.asked) == 1 and not pred.malformed[:3].any()


def test_scores_are_normalised_into_the_status_and_bucket_distribution(checkpoint):
    # per-token log-probs chosen so that P(status) and P(bucket | valid) are known in closed form
    status_lp = torch.tensor([-9.0, -9.0, -1.0, -9.0, -9.0, -0.5])
    bucket_lp = torch.tensor([-5.0, -5.0, -2.0, -0.1, -5.0])

    def scores(answers):
        own = wm._answers[3]  # tokens of each bucket's own text, at the end of its answer
        rows = [[0.0] * (len(a) - 1) + [float(status_lp[k])] for k, a in enumerate(answers[:6])]
        # bucket answers: ' "valid", "quality":' (not counted: the same for every bucket) then the bucket's own
        rows += [[-50.0] * (len(a) - n) + [float(bucket_lp[k])] + [0.0] * (n - 1)
                 for k, (a, n) in enumerate(zip(answers[6:], own))]
        return rows

    wm, lm = _wm(checkpoint, lambda tok: ScriptedLM(tok, scores=scores), mode="score", quality_buckets=5)
    pred = wm.predict([WMQuery("wine", DESC, RF)])
    torch.testing.assert_close(pred.status_probs[0], status_lp.softmax(-1))
    p = bucket_lp.double().softmax(-1)
    centers = (torch.arange(5) + 0.5) / 5
    assert float(pred.pos_mean[0]) == pytest.approx(float((p * centers).sum()), abs=1e-6)
    probs, mean, var = score_distribution(status_lp, bucket_lp)
    want_mean = sum(float(probs[k]) * r for k, r in enumerate([0.0, 0.0, 0.1, 0.1, 0.2])) + float(probs[5]) * (0.5 + 0.5 * mean)
    assert float(pred.reward_mean[0]) == pytest.approx(want_mean, abs=1e-6)
    assert 0 < float(pred.reward_var[0]) < 0.25 and not pred.malformed.any()
    assert lm.asked[0][-len(wm._answers[0]):] == wm._answers[0]  # the prefix ends with the answer's head


def test_batched_answer_scoring_on_the_cached_prefix_equals_full_forwards(checkpoint):
    lm = load_frozen(str(checkpoint), "hf")
    assert isinstance(lm, HFFrozenLM)
    prefix = lm.tokenizer("<|im_start|>user\nwill it run?<|im_end|>\n", add_special_tokens=False)["input_ids"]
    answers = [lm.tokenizer(s, add_special_tokens=False)["input_ids"] for s in (' "valid"', ' "runtime_error"', " 3")]
    got = lm.score([(prefix, answers)])[0]
    for a, row in zip(answers, got):
        ids = torch.tensor([prefix + a])
        with torch.no_grad():
            lp = lm.model(input_ids=ids).logits[0].log_softmax(-1)
        want = [float(lp[len(prefix) + k - 1, t]) for k, t in enumerate(a)]
        assert row == pytest.approx(want, abs=1e-4)


def test_the_prompt_keeps_within_its_token_budget(checkpoint):
    wm, lm = _wm(checkpoint, lambda tok: ScriptedLM(tok, ['{"status": "timeout", "confidence": 1}'] * 2))
    fixed = len(wm._ids(WMQuery("wine", DESC, "", "")))  # instructions, task, chat template
    wm.cfg["prompt_tokens"] = fixed + 120
    long_program = RF + "".join(f"# comment line {k} padding the program\n" for k in range(200))
    wm.predict([WMQuery("wine", DESC, long_program, "[execution] status: valid\n" * 50)])
    assert len(lm.asked[0]) <= fixed + 120 + 4 < len(wm._ids(WMQuery("wine", DESC, long_program)))
    text = lm.tokenizer.decode(lm.asked[0])
    assert "def build():" in text and "comment line 199" not in text  # the program's beginning is kept
    assert text.endswith(lm.tokenizer.decode(wm._ids(WMQuery("wine", DESC, RF))[-5:]))  # the instructions stay


def test_the_prompted_world_model_is_frozen(checkpoint):
    wm = make_world_model({"kind": "prompted", "model": str(checkpoint), "mode": "score"}, seed=0)
    before = {k: v.clone() for k, v in wm.lm.model.state_dict().items()}
    out = Outcome("wine", Status.VALID, "accuracy", value=0.9, pos=0.8, reward=0.9)
    stats = wm.update([(WMQuery("wine", DESC, RF), out)] * 4)
    assert stats == {} and all(torch.equal(v, wm.lm.model.state_dict()[k]) for k, v in before.items())
    assert not any(p.requires_grad for p in wm.lm.model.parameters())
    assert wm.value_at("wine", 0.8) == pytest.approx(0.9)  # it shows real metric values for predicted positions
    state = wm.state_dict()
    again = PromptedLMWM.from_state(state)
    assert again.value_at("wine", 0.8) == pytest.approx(0.9) and again.cfg["mode"] == "score"


def test_world_model_callback_trains_nothing_through_the_protocol(checkpoint):
    """The callback calls `update` on every executed program as for the learned ensemble; for the frozen LM
    that changes no weight and logs no training loss."""
    from callbacks import WorldModelCallback
    from wmrl.domains.research.domain import ResearchDomain

    wm = make_world_model({"kind": "prompted", "model": str(checkpoint)}, seed=0)
    before = [p.clone() for p in wm.lm.model.parameters()]
    task = SimpleNamespace(name="wine", descriptor=lambda: DESC, metric="accuracy", interface="estimator")
    cb = WorldModelCallback(ResearchDomain(SimpleNamespace(get=lambda name: task), world_model=wm))
    from wmrl.rollout.types import Judgement, TrajectoryRecord, Turn

    real = Outcome("wine", Status.VALID, "accuracy", value=0.9, pos=0.8, reward=0.9)
    rec = TrajectoryRecord("wine", 0, True, False, [Turn(RF, "forest", Judgement(real=real, observation="x"))])
    assert len(cb.domain.examples([rec])) == 1
    assert wm.update(cb.domain.examples([rec])) == {}
    assert all(torch.equal(a, b) for a, b in zip(before, wm.lm.model.parameters()))


class FakeLLM:
    instances = []

    def __init__(self, model, **kwargs):
        self.model, self.kwargs, self.calls = model, kwargs, []
        FakeLLM.instances.append(self)

    def generate(self, prompts, params, use_tqdm=False):
        self.calls.append((prompts, params))
        outs = []
        for p in prompts:
            ids = p["prompt_token_ids"]
            if params.prompt_logprobs is not None:  # each prompt token's log-prob: -(its id) / 1000
                lps = [None] + [{t: SimpleNamespace(logprob=-t / 1000)} for t in ids[1:]]
                outs.append(SimpleNamespace(prompt_logprobs=lps, outputs=[SimpleNamespace(token_ids=[0])]))
            else:
                outs.append(SimpleNamespace(outputs=[SimpleNamespace(token_ids=self.answer)]))
        return outs


def test_vllm_backend_wiring_with_a_fake_engine(monkeypatch, checkpoint):
    fake = types.ModuleType("vllm")
    fake.LLM = FakeLLM
    fake.SamplingParams = lambda **kw: SimpleNamespace(**{"prompt_logprobs": None, **kw})
    monkeypatch.setitem(sys.modules, "vllm", fake)
    wm = make_world_model({"kind": "prompted", "model": str(checkpoint), "backend": "vllm", "mode": "score"}, seed=0)
    engine = FakeLLM.instances[-1]
    assert engine.model == str(checkpoint) and engine.kwargs["enable_prefix_caching"]
    pred = wm.predict([WMQuery("wine", DESC, RF), WMQuery("wine", DESC, KNN)])
    prompts, params = engine.calls[-1]
    assert params.prompt_logprobs == 0 and params.max_tokens == 1
    assert len(prompts) == 2 * (6 + 5)  # every (query, answer): one request, the prompt shared by prefix caching
    head, statuses, buckets, own = wm._answers
    want = torch.tensor([-sum(a) / 1000 for a in statuses]).softmax(-1)
    torch.testing.assert_close(pred.status_probs[0], want)
    wm.cfg["mode"] = "generate"
    engine.answer = wm.tok('{"status": "timeout", "confidence": 1}', add_special_tokens=False)["input_ids"]
    pred = wm.predict([WMQuery("wine", DESC, RF)])
    prompts, params = engine.calls[-1]
    assert params.temperature == 0.0 and params.stop_token_ids == wm.lm.end_ids
    assert pred.status == [Status.TIMEOUT]


def test_config_asks_for_a_checkpoint_before_anything_runs():
    from wmrl.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="world_model.model"):
        load_config(["world_model.kind=prompted"])
    cfg = load_config(["world_model.kind=prompted", "policy.model=/some/ckpt"])  # the agent's own base model
    assert cfg.world_model.model is None and cfg.world_model.mode == "generate"
    assert load_config([]).world_model.kind == "learned"


def test_training_with_the_prompted_world_model_logs_its_fidelity_and_resumes_after_a_kill(tmp_path, session_cache):
    """`train.py experiment=smoke world_model.kind=prompted world_model.model=CKPT`: the built-in warm-started
    policy (shared with the smoke tests' cache) writes programs, the frozen LM predicts them, the usual wm/*
    fidelity is logged on anchors with wm/malformed_rate; killed after a checkpoint, it resumes to the end
    in the same MLflow run."""
    import os
    import signal
    import subprocess
    import time

    import mlflow

    root = Path(__file__).resolve().parent.parent
    ckpt = make_checkpoint(tmp_path / "lm")
    args = [sys.executable, str(root / "train.py"), "experiment=smoke", "world_model.kind=prompted",
            f"world_model.model={ckpt}", "world_model.max_new_tokens=16", "rl.steps=3", "eval.at_start=false",
            "eval.every_n_steps=3", f"run_dir={tmp_path}/runs", f"logger.tracking_uri=sqlite:///{tmp_path}/ml.db",
            f"task.cache_dir={session_cache}", "trainer.progress_bar=false", "logger.report=false"]
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    last, deadline = None, time.time() + 900
    while time.time() < deadline and proc.poll() is None:
        found = list((tmp_path / "runs").glob("*/checkpoints/last.ckpt")) if (tmp_path / "runs").exists() else []
        try:
            if found and torch.load(found[0], map_location="cpu", weights_only=False)["wmrl"]["rl_step"] >= 2:
                last = found[0]
                break
        except Exception:  # being written
            pass
        time.sleep(0.2)
    assert last is not None and proc.poll() is None, proc.stderr.read().decode()[-3000:] if proc.poll() is not None else ""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    r = subprocess.run(args + ["resume=last"], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    state = torch.load(last, map_location="cpu", weights_only=False)
    assert state["wmrl"]["rl_step"] == 3
    assert state["callbacks"]["WorldModelCallback"]["world_model"]["kind"] == "prompted"
    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/ml.db")
    (run,) = client.search_runs([client.get_experiment_by_name("wmrl").experiment_id])
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "time/step_s")) == [1, 2, 3]
    assert {"wm/malformed_rate", "wm/mae", "wm/coverage_2sigma", "wm/status_acc", "time/env_wm_s"} <= set(run.data.metrics)
    assert "wm/loss" not in run.data.metrics  # frozen: nothing trained
