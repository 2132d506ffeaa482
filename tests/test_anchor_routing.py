"""The environment spends real executions as the anchor budget says: per-trajectory anchors chosen
after the world model scored them (with their inclusion probabilities), and every trajectory of a
class the guard flagged executed whatever the budget."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from wmrl.config import EnvConfig
from wmrl.anchoring import AnchorBudget
from wmrl.env import Environment
from wmrl.domains.research.domain import ResearchDomain
from wmrl.domains.research.outcome import Status
from wmrl.rollout import Judgement, Trajectory, Turn
from wmrl.step import Handoff


def _env(**overrides) -> tuple[Environment, Handoff]:
    """An environment and what a step handed it: a world model and the budget `overrides` configure."""
    cfg = EnvConfig(**{"mode": "wm", "warmup_steps": 0, **overrides})
    return Environment(ResearchDomain(None), env_cfg=cfg), Handoff(SimpleNamespace(), AnchorBudget.from_config(cfg))


def _trajs(variances, classes=None, group_size=4):
    classes = classes or ["linear"] * len(variances)
    return [Trajectory("wine", i // group_size, [1], [0.0], [0.0], scored=True,
                       turns=[Turn("p", c, Judgement(wm_reward=0.5 + 0.01 * i, wm_var=v, wm_status=Status.VALID))])
            for i, (v, c) in enumerate(zip(variances, classes))]


def test_random_selection_anchors_whole_groups_before_sampling():
    env, handoff = _env(anchor_selection="random", anchor_rate=0.25)
    executed, scored = env.routing(8, step=5, rng=__import__("random").Random(0), handoff=handoff)
    assert sum(executed) == 2 and all(scored)
    todo, prob = env.after_scoring(_trajs([0.01] * 8), np.random.default_rng(0), handoff)
    assert not todo.any() and (prob == 1).all()  # nothing more to choose after scoring


def test_random_anchor_groups_are_the_nominal_rate_on_average():
    env, handoff = _env(anchor_selection="random", anchor_rate=0.25)
    rng = __import__("random").Random(0)
    counts = [sum(env.routing(6, step=5, rng=rng, handoff=handoff)[0]) for _ in range(4000)]
    assert set(counts) == {1, 2}  # 0.25 x 6 = 1.5 groups: one or two, never a fixed 2 (33 %)
    assert np.mean(counts) == pytest.approx(1.5, abs=0.05)
    for rate, groups in ((0.0, 0), (1.0, 6)):
        env, handoff = _env(anchor_selection="random", anchor_rate=rate)
        assert sum(env.routing(6, step=5, rng=rng, handoff=handoff)[0]) == groups


def test_uncertainty_selection_executes_where_the_world_model_is_least_sure():
    env, handoff = _env(anchor_selection="uncertainty", anchor_rate=0.25, anchor_floor=0.2)
    assert env.routing(4, step=5, rng=__import__("random").Random(0), handoff=handoff) == ([False] * 4, [True] * 4)
    variances = [0.0001] * 12 + [0.04] * 4
    counts, probs = np.zeros(16), None
    for seed in range(400):
        todo, probs = env.after_scoring(_trajs(variances), np.random.default_rng(seed), handoff)
        assert todo.sum() == 4  # rate x N trajectories
        counts += todo
    assert np.isclose(probs.sum(), 4.0) and probs[12:].min() > 5 * probs[:12].max()
    assert np.allclose(counts / 400, probs, atol=0.06)  # chosen with the recorded probability
    assert probs.min() >= 0.2 * 0.25 - 1e-9  # the uniform floor bounds 1/p


def test_a_flagged_class_is_executed_whatever_the_budget():
    env, handoff = _env(anchor_selection="random", anchor_rate=0.25)
    handoff.budget.guard.flagged = {"forest"}
    classes = ["forest", "linear"] * 4
    todo, prob = env.after_scoring(_trajs([0.01] * 8, classes), np.random.default_rng(0), handoff)
    assert todo.tolist() == [c == "forest" for c in classes] and (prob[todo] == 1).all()


class _Sandbox:
    """Records what it is asked to execute and when the trainer waits for it; every execution scores 0.9."""

    def __init__(self, events=None):
        self.requests, self.events = [], [] if events is None else events

    def submit(self, requests):
        from wmrl.domains.research.outcome import Outcome, Status

        self.requests += list(requests)

        def result(timeout=None):
            self.events.append(("wait", [r.meta.get("deferred", False) for r in requests]))
            return [Outcome(r.task.name, Status.VALID, reward=0.9, wall_s=0.1) for r in requests]
        return SimpleNamespace(result=result)


class _WorldModel:
    """Scores the k-th program it is shown 0.1 + 0.05 k (a spread for the advantage to choose from)."""

    def __init__(self):
        self.seen = 0

    def predict(self, queries):
        import torch
        from wmrl.domains.research.outcome import Outcome, Status

        r = torch.tensor([0.1 + 0.05 * (self.seen + k) for k in range(len(queries))])
        self.seen += len(queries)
        return SimpleNamespace(reward_mean=r, reward_var=torch.full_like(r, 0.01), malformed=None, prechecked=None,
                               outcome=lambda k: Outcome(queries[k].task, Status.VALID, reward=float(r[k])))


def _rollout(sandbox, groups_selection="advantage", rate=0.125, events=None, lag=1):
    from wmrl.rollout.collect import Rollout, Sampling

    task = SimpleNamespace(name="wine", prompt=lambda: "p", descriptor=lambda: "task=wine", metric="accuracy", interface="estimator",
                           action_class=lambda program: "linear")
    suite = SimpleNamespace(get=lambda name: task)
    cfg = EnvConfig(mode="wm", warmup_steps=0, anchor_selection=groups_selection, anchor_rate=rate, guard=False,
                    anchor_lag=lag)
    env = Environment(ResearchDomain(suite, sandbox), cfg)
    handoff = Handoff(_WorldModel(), AnchorBudget.from_config(cfg))
    events = [] if events is None else events
    generator = SimpleNamespace(generate=lambda ids, **kw: events.append(("generate", len(ids))) or [
        SimpleNamespace(token_ids=[5, 6], logprobs=[-1.0, -1.0]) for _ in ids])
    tok = SimpleNamespace(pad_token_id=0, decode=lambda ids, skip_special_tokens=True: "def build():\n    return 1\n")
    chat = SimpleNamespace(prompt_ids=lambda p: [1, 2], observation_text=lambda o: o, observation_ids=lambda t: [3])
    rollout = Rollout(tok, chat, generator, env, suite, turns=1, sampling=Sampling(1.0, 1.0, 8), max_length=64, seed=0)
    collect = rollout.collect_train
    rollout.collect_train = lambda *a, **kw: collect(*a, handoff=handoff, **kw)  # each step hands the next these
    return rollout, task


def test_anchors_chosen_after_scoring_run_in_the_background_and_train_next_step_with_their_groups():
    sandbox = _Sandbox()
    rollout, task = _rollout(sandbox)
    first = rollout.collect_train(0, [task] * 4, group_size=4, defer=True)  # 16 rows, 2 anchors (rate 1/8)
    deferred = [r.meta for r in sandbox.requests]
    assert len(deferred) == 2 and all(m["deferred"] and m["step"] == 0 and m["rank"] == 0 for m in deferred)
    held = {m["group"] for m in deferred}
    assert len(first) == 16 - 4 * len(held)  # the anchors' groups wait for them; the other groups train now
    assert not first.is_anchor.any() and (first.source == 1).all()
    second = rollout.collect_train(1, [task] * 4, group_size=4, defer=False)  # the last step: anchors now
    assert len(second) == 16 + 4 * len(held) and second.stats["rollout/deferred_anchors"] == 4 * len(held)
    carried = second.group_ids >= 4
    assert int((second.is_anchor & carried).sum()) == 2  # only the chosen ones executed; their mates kept WM rewards
    assert torch.allclose(second.real_reward[second.is_anchor & carried], torch.tensor(0.9))
    assert (second.anchor_prob[second.is_anchor & carried] < 1).all()  # chosen with a recorded probability
    assert int((second.is_anchor & ~carried).sum()) == 2 and len(sandbox.requests) == 4


def test_last_steps_anchors_execute_while_this_step_generates():
    events = []
    rollout, task = _rollout(_Sandbox(events), groups_selection="random", rate=0.25, events=events)
    rollout.collect_train(0, [task] * 4, group_size=4, defer=True)  # one random anchor group, in the background
    events.clear()
    rollout.collect_train(1, [task] * 4, group_size=4, defer=True)
    waits = [k for k, e in enumerate(events) if e[0] == "wait" and all(e[1])]
    assert len(waits) == 1 and events[0][0] == "generate" and waits[0] > events.index(("generate", 16))


class _HeldSandbox:
    """Every submission's outcomes (0.9 each) arrive only when the test releases them (or at once, `immediate`)."""

    def __init__(self):
        self.futures, self.immediate = [], False

    def submit(self, requests):
        from concurrent.futures import Future
        from wmrl.domains.research.outcome import Outcome, Status

        future = Future()
        self.futures.append((future, [Outcome(r.task.name, Status.VALID, reward=0.9, wall_s=0.1) for r in requests]))
        if self.immediate:
            self.release(len(self.futures) - 1)
        return future

    def release(self, k, after_s=0.0):
        import threading

        future, outcomes = self.futures[k]
        threading.Timer(after_s, future.set_result, [outcomes]).start() if after_s else future.set_result(outcomes)


def test_anchor_groups_train_lag_steps_after_their_own_whatever_finished_first():
    sandbox = _HeldSandbox()
    rollout, task = _rollout(sandbox, groups_selection="random", rate=0.25, lag=3)  # one group of 4 per step
    sizes = [len(rollout.collect_train(0, [task] * 4, group_size=4, defer=True))]
    sandbox.release(0)  # step 0's anchors finished at once: they still wait for their step
    for step in (1, 2):
        batch = rollout.collect_train(step, [task] * 4, group_size=4, defer=True)
        sizes.append(len(batch))
        assert batch.stats["rollout/deferred_anchors"] == 0
    assert sizes == [12, 12, 12] and len(sandbox.futures) == 3
    sandbox.release(1)  # step 1's finished too, but is not due before step 4
    batch = rollout.collect_train(3, [task] * 4, group_size=4, defer=True)
    assert batch.stats["rollout/deferred_anchors"] == 4 and len(batch) == 12 + 4
    assert torch.allclose(batch.real_reward[batch.group_ids >= 4], torch.tensor(0.9))
    assert rollout.collect_train(4, [task] * 4, group_size=4, defer=True).stats["rollout/deferred_anchors"] == 4
    for k in (2, 3, 4):  # still running when the last step starts: the trainer waits for them
        sandbox.release(k, after_s=0.3)
    sandbox.immediate = True  # the last step executes its own anchors now
    last = rollout.collect_train(5, [task] * 4, group_size=4, defer=False)  # and waits for everything left
    assert last.stats["rollout/deferred_anchors"] == 12 and len(last) == 16 + 12  # steps 2, 3 and 4
    carried = last.group_ids >= 4
    assert len(set(last.group_ids[carried].tolist())) == 3  # three earlier steps' groups stay apart
    assert torch.allclose(last.real_reward[carried & last.is_anchor], torch.tensor(0.9))


def test_background_anchors_of_a_checkpoint_with_several_steps_in_flight_resume_and_are_replayed():
    from wmrl.rollout.collect import Rollout

    sandbox = _HeldSandbox()
    rollout, task = _rollout(sandbox, groups_selection="random", rate=0.25, lag=3)
    for step in (0, 1):
        rollout.collect_train(step, [task] * 4, group_size=4, defer=True)
    state = rollout.state_dict()
    assert Rollout.replayed(state) == {(0, 0), (0, 1)}
    resumed, _ = _rollout(sandbox, groups_selection="random", rate=0.25, lag=3)
    resumed.load_state_dict(state)
    assert len(sandbox.futures) == 4  # both submissions execute again
    for k in range(4):
        sandbox.release(k)
    sandbox.immediate = True
    assert resumed.collect_train(2, [task] * 4, group_size=4, defer=False).stats["rollout/deferred_anchors"] == 8
    old = {"pending_anchors": {"step": 4, "split": "val", "trajectories": []}}  # one step in flight, as written before
    assert Rollout.replayed(old) == {(0, 4)}


def test_rewind_forgets_the_background_anchors_a_resumed_run_replays_and_keeps_those_already_trained(tmp_path):
    from wmrl.domains.research.outcome import Outcome, Status
    from wmrl.domains.research.sandbox import ExecutionLog, read_log, rewind

    log = ExecutionLog(tmp_path / "executions.sqlite")
    metas = [{"purpose": "train", "step": 3},  # kept: before the checkpoint at step 5
             {"purpose": "train", "step": 5},  # replayed: the step the checkpoint resumes at
             {"purpose": "train", "step": 2, "deferred": True, "rank": 0},  # trained at step 4: kept
             {"purpose": "train", "step": 3, "deferred": True, "rank": 0},  # still in flight: replayed
             {"purpose": "train", "step": 3, "deferred": True, "rank": 1},  # rank 1's of step 3 trained already: kept
             {"purpose": "train", "step": 4, "deferred": True},  # rank 0 (no rank recorded), in flight: replayed
             {"purpose": "train", "step": 3, "deferred": True, "consumed": 4},  # an older log's row, trained: kept
             {"purpose": "eval", "step": 5}, {"purpose": "eval", "step": 6},  # the checkpoint holds step 5's eval
             {"purpose": "transfer", "step": 5}, {"purpose": "transfer", "step": 6}]  # and the transfer tasks' beside it
    for k, meta in enumerate(metas):
        log.append(Outcome("wine", Status.VALID, reward=0.5), f"p{k}", {**meta, "k": k})
    log.close()
    removed = rewind(tmp_path / "executions.sqlite", 5, {(0, 3), (0, 4)})
    assert removed == 5 and [r["meta"]["k"] for r in read_log(tmp_path / "executions.sqlite")] == [0, 2, 4, 6, 7, 9]


def test_nothing_is_deferred_when_no_group_would_be_left_to_train_on_now():
    from wmrl.rollout.collect import Rollout

    trajs = _trajs([0.01] * 4, group_size=2)
    todo = np.array([True, False, False, True])
    assert (Rollout._defer_chosen(trajs, todo, np.full(4, 0.5), keep_some=True) == todo).all()
    assert not any(t.deferred or t.pending for t in trajs)
    left = Rollout._defer_chosen(trajs, todo, np.full(4, 0.5), keep_some=False)  # last step's anchors train now
    assert not left.any() and [t.pending for t in trajs] == todo.tolist() and all(t.deferred for t in trajs)


def test_a_checkpoint_written_before_group_mates_could_wait_resumes_its_anchors():
    t = Trajectory("wine", 0, [1], [0.0], [0.0], scored=True, deferred=True)
    d = t.to_dict()
    del d["pending"]
    assert Trajectory.from_dict(d, ResearchDomain(None)).pending


class _SlowSandbox:
    """Each execution takes 50 ms on a thread of its own; records how many ran at once."""

    slots = 4

    def __init__(self):
        import threading

        self.lock, self.running, self.most, self.submits = threading.Lock(), 0, 0, 0

    def submit(self, requests):
        import threading
        import time
        from concurrent.futures import Future
        from wmrl.domains.research.outcome import Outcome, Status

        self.submits += 1
        future = Future()

        def run():
            with self.lock:
                self.running += len(requests)
                self.most = max(self.most, self.running)
            time.sleep(0.05)
            with self.lock:
                self.running -= len(requests)
            future.set_result([Outcome(r.meta["name"], Status.VALID, reward=0.5) for r in requests])

        threading.Thread(target=run).start()
        return future


def _items(n):
    from wmrl.rollout import TurnItem

    return [TurnItem("wine", f"p{k}", meta={"name": f"p{k}"}) for k in range(n)]


def test_background_executions_keep_at_most_their_slots_busy_and_return_in_order():
    sandbox = _SlowSandbox()
    suite = SimpleNamespace(get=lambda name: SimpleNamespace(name=name))
    env = Environment(ResearchDomain(suite, sandbox), EnvConfig(), background_slots=2)
    outcomes = env.execute_background(_items(7), "val").result(timeout=10)
    assert [o.task for o in outcomes] == [f"p{k}" for k in range(7)] and sandbox.most == 2
    unlimited = Environment(ResearchDomain(suite, _SlowSandbox()), EnvConfig())
    unlimited.execute_background(_items(7), "val").result(timeout=10)
    assert unlimited.domain.sandbox.most == 7 and unlimited.domain.sandbox.submits == 1


def test_background_submissions_of_several_steps_share_one_limit():
    sandbox = _SlowSandbox()
    suite = SimpleNamespace(get=lambda name: SimpleNamespace(name=name))
    env = Environment(ResearchDomain(suite, sandbox), EnvConfig(), background_slots=1)
    first, second = env.execute_background(_items(4), "val"), env.execute_background(_items(4), "val")
    assert len(first.result(timeout=10)) == len(second.result(timeout=10)) == 4 and sandbox.most == 1


def test_once_the_trainer_waits_the_background_executions_take_every_slot():
    sandbox = _SlowSandbox()
    suite = SimpleNamespace(get=lambda name: SimpleNamespace(name=name))
    env = Environment(ResearchDomain(suite, sandbox), EnvConfig(), background_slots=1)
    running = env.execute_background(_items(12), "val")
    running.hurry()
    assert len(running.result()) == 12 and sandbox.most == sandbox.slots


def test_a_failing_background_submission_reaches_the_trainer():
    def submit(requests):
        raise RuntimeError("sandbox is closed")

    suite = SimpleNamespace(get=lambda name: SimpleNamespace(name=name))
    env = Environment(ResearchDomain(suite, SimpleNamespace(submit=submit, slots=2)), EnvConfig(),
                      background_slots=1)
    with pytest.raises(RuntimeError, match="sandbox is closed"):
        env.execute_background(_items(3), "val").result(timeout=10)


@pytest.mark.parametrize("cores,threads,backend,setting,world,expected", [
    (2, 0, "local", 0, 1, 1),  # 2 cores, 1 trainer thread: one background execution
    (16, 0, "local", 0, 1, 8),  # 8 trainer threads leave 8 cores
    (16, 4, "local", 0, 2, 4),  # two ranks of 4 threads leave 8 cores, 4 each
    (2, 0, "ray", 0, 1, 0),  # a Ray cluster's slots are not this machine's cores: no limit
    (2, 0, "local", -1, 1, 0),  # asked for every slot
    (2, 0, "local", 3, 1, 3),
])
def test_background_slots_default_to_the_cores_the_trainer_leaves_free(monkeypatch, cores, threads, backend, setting,
                                                                      world, expected):
    from wmrl import recipe
    from wmrl.config import load_config

    monkeypatch.setattr(recipe.os, "cpu_count", lambda: cores)
    cfg = load_config([f"threads={threads}", f"sandbox.backend={backend}", f"env.background_slots={setting}"])
    assert recipe.background_slots(cfg, world) == expected
