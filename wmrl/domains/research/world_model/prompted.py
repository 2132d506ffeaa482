"""The paper's world model: a frozen causal LM is shown the task descriptor, the feedback so far and
the program, and predicts the outcome. Frozen: `update` trains nothing.

Programs the deterministic checks decide (syntax, malformed, certain runtime errors) are predicted
exactly, as the learned ensemble does; the LM answers the rest, in one of two modes:

- `generate` (the paper's): the LM writes one JSON object
  {"status": ..., "quality": bucket, "confidence": c, "error": "..."}, parsed strictly. The stated
  status gets c + (1-c)/6 of the probability, every other status (1-c)/6; the leaderboard position is
  c·Uniform(bucket) + (1-c)·Uniform(0, 1); `error` is the line the agent reads. An answer that does not
  parse is a maximally uncertain prediction (c = 0: uniform status, uniform position), counted in
  `WMPrediction.malformed` (logged as `wm/malformed_rate`).
- `score`: the log-likelihood of each answer `{"status": "s"` (6 statuses) and, given
  `{"status": "valid", "quality":`, of each bucket, normalised into P(status) and P(bucket | valid):
  the reward's mean and variance are those of the model's own distribution. One forward of the
  prompt, then one batched forward of all its answers on the cached prefix. No error line is predicted.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, replace
from typing import Any

import torch

from wmrl.config import plain
from wmrl.domains.research.outcome import PREDICTED_STATUSES, Outcome, Status, error_line
from wmrl.domains.research.world_model.base import N_STATUS, ValueTable, WMPrediction, WMQuery, precheck_queries, reward_moments
from wmrl.domains.research.world_model.lm import FrozenLM

STATUS_NAMES = [s.value for s in PREDICTED_STATUSES]
SYSTEM = "You predict what happens when a Python program is executed in a sandbox. Answer with one JSON object only."
ANSWER_HEAD = '{"status":'  # every answer starts so; in score mode it ends the cached prefix


def instructions(buckets: int) -> str:
    return ('Predict the outcome of running the program (its build() returns a scikit-learn estimator that is fit and '
            'scored on the task data). Answer with JSON: {"status": one of ' + ", ".join(f'"{s}"' for s in STATUS_NAMES)
            + f', "quality": the leaderboard position bucket if valid, 0 (worst) to {buckets - 1} (best), '
            '"confidence": 0 to 1, "error": the last line of the error if it fails, else ""}')


def user_message(q: WMQuery, buckets: int) -> str:
    history = f"Feedback of earlier turns:\n{q.history}\n" if q.history else ""
    return f"Task: {q.descriptor}\n{history}Program:\n```python\n{q.program}\n```\n{instructions(buckets)}"


def parse_answer(text: str, buckets: int) -> dict | None:
    """The answer as {"status", "quality", "confidence", "error"}, or None when it is not exactly one JSON
    object (a ```json fence allowed) with a known status, a confidence in [0, 1], an integer quality in
    [0, buckets) when valid and a string error; no other keys."""
    text = text.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, re.DOTALL)
    try:
        d = json.loads(fenced.group(1) if fenced else text)
    except ValueError:
        return None
    if not isinstance(d, dict) or not set(d) <= {"status", "quality", "confidence", "error"}:
        return None
    status, conf, quality, error = d.get("status"), d.get("confidence"), d.get("quality"), d.get("error", "")
    if status not in STATUS_NAMES or not _number(conf) or not 0.0 <= conf <= 1.0 or not isinstance(error, str):
        return None
    if status == Status.VALID.value:
        if not (isinstance(quality, int) and not isinstance(quality, bool) and 0 <= quality < buckets):
            return None
    elif quality is not None and not (isinstance(quality, int) and not isinstance(quality, bool)):
        return None
    return {"status": status, "quality": quality, "confidence": float(conf), "error": error}


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def answer_distribution(answer: dict | None, buckets: int) -> tuple[torch.Tensor, float, float]:
    """(status probabilities [6], pos mean, pos variance) of a parsed answer; None = maximally uncertain.

    Status: c on the stated one plus (1-c) spread uniformly. Position: the mixture c·U(bucket) + (1-c)·U(0,1)
    (its mean and variance); a non-valid answer says nothing about position: U(0,1)."""
    c = 0.0 if answer is None else answer["confidence"]
    probs = torch.full((N_STATUS,), (1.0 - c) / N_STATUS)
    if answer is not None:
        probs[STATUS_NAMES.index(answer["status"])] += c
    mean, second = 0.5, 1.0 / 3.0  # U(0, 1)
    if answer is not None and answer["status"] == Status.VALID.value:
        w = 1.0 / buckets
        lo = answer["quality"] * w
        b_mean, b_second = lo + w / 2, (lo + w / 2) ** 2 + w * w / 12
        mean, second = c * b_mean + (1 - c) * mean, c * b_second + (1 - c) * second
    return probs, mean, max(second - mean * mean, 0.0)


def score_distribution(status_lp: torch.Tensor, bucket_lp: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """(status probabilities, pos mean, pos variance) from answer log-likelihoods: softmax over the six
    statuses; softmax over buckets given valid, each bucket U(its interval)."""
    probs = status_lp.double().softmax(-1).float()
    k = bucket_lp.shape[0]
    p = bucket_lp.double().softmax(-1)
    centers = (torch.arange(k, dtype=torch.float64) + 0.5) / k
    mean = float((p * centers).sum())
    second = float((p * (centers ** 2 + 1.0 / (12 * k * k))).sum())
    return probs, mean, max(second - mean * mean, 0.0)


class PromptedLMWM:
    """`cfg`: the world_model section (mode, quality_buckets, max_new_tokens, prompt_tokens, predict_batch).
    `lm`: the frozen LM (`wmrl.domains.research.world_model.lm`)."""

    kind = "prompted"

    def __init__(self, cfg: Any, lm: FrozenLM):
        from wmrl.domains.research.world_model.ensemble import world_model_config

        self.cfg = plain(asdict(world_model_config(cfg)))  # plain strings: checkpointed
        self.lm, self.tok = lm, lm.tokenizer
        self.buckets = self.cfg["quality_buckets"]
        self.table = ValueTable()  # task -> its metric's name and (pos, value) of real valid executions
        self._answers = self._answer_ids()

    @classmethod
    def from_config(cls, cfg: Any, base_model: str | None = None) -> "PromptedLMWM":
        from wmrl.domains.research.world_model.ensemble import world_model_config
        from wmrl.domains.research.world_model.lm import load_frozen

        c = world_model_config(cfg)
        path = c.model or base_model
        if not path:
            raise ValueError("world_model.kind=prompted needs world_model.model=PATH (or policy.model=PATH)")
        return cls(c, load_frozen(path, c.backend))

    # ---- prompts ------------------------------------------------------------------------------
    def _render(self, user: str) -> str:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
        if self.tok.chat_template is None:
            return f"{SYSTEM}\n\n{user}\nAnswer: "
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _ids(self, q: WMQuery) -> list[int]:
        return self.tok(self._render(user_message(q, self.buckets)), add_special_tokens=False)["input_ids"]

    def prompt_ids(self, q: WMQuery) -> list[int]:
        """The prompt's tokens, within `prompt_tokens`: the oldest history goes first, then the program's tail."""
        room = self.cfg["prompt_tokens"] - len(self._ids(replace(q, program="", history="")))
        prog = self.tok(q.program, add_special_tokens=False)["input_ids"]
        hist = self.tok(q.history, add_special_tokens=False)["input_ids"] if q.history else []
        if len(prog) + len(hist) > room:
            prog = prog[:max(room, 0)]
            hist = hist[len(hist) - max(0, room - len(prog)):] if room > len(prog) else []
            q = replace(q, program=self.tok.decode(prog), history=self.tok.decode(hist))
        return self._ids(q)

    def _answer_ids(self) -> tuple[list[int], list[list[int]], list[list[int]], list[int]]:
        """(head, status answers, bucket answers, length of each bucket's own tokens), tokenized piece by
        piece so that every answer's tokens are exactly head + its pieces."""
        enc = lambda s: self.tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
        statuses = [enc(f' "{s}"') for s in STATUS_NAMES]
        valid_quality = enc(f' "{Status.VALID.value}"') + enc(', "quality":')
        bucket_own = [enc(f" {b}") for b in range(self.buckets)]
        return enc(ANSWER_HEAD), statuses, [valid_quality + b for b in bucket_own], [len(b) for b in bucket_own]

    # ---- prediction -----------------------------------------------------------------------------
    def predict(self, queries: list[WMQuery]) -> WMPrediction:
        b = len(queries)
        probs, _, decided, errors = precheck_queries(queries)
        pos_mean, pos_var = torch.where(decided, 0.0, 0.5), torch.zeros(b)
        malformed = torch.zeros(b, dtype=torch.bool)
        rest = (~decided).nonzero().flatten().tolist()
        step = max(1, self.cfg["predict_batch"])
        for start in range(0, len(rest), step):
            chunk = rest[start:start + step]
            prompts = [self.prompt_ids(queries[i]) for i in chunk]
            if self.cfg["mode"] == "score":
                results = self._score(prompts)
            else:
                results = self._generate(prompts)
            for i, (p, mean, var, error, bad) in zip(chunk, results):
                probs[i], pos_mean[i], pos_var[i], errors[i], malformed[i] = p, mean, var, error, bad
        reward_mean, reward_var = reward_moments(probs, pos_mean, pos_var)
        metrics, value = self.table.shown(queries, pos_mean)
        return WMPrediction(status_probs=probs, pos_mean=pos_mean, pos_std=pos_var.sqrt(), reward_mean=reward_mean,
                            reward_var=reward_var, value_mean=value, tasks=[q.task for q in queries], metrics=metrics,
                            prechecked=decided, errors=errors, malformed=malformed)

    def _generate(self, prompts: list[list[int]]) -> list[tuple]:
        out = []
        for ids in self.lm.complete(prompts, self.cfg["max_new_tokens"]):
            answer = parse_answer(self.tok.decode(ids, skip_special_tokens=True), self.buckets)
            p, mean, var = answer_distribution(answer, self.buckets)
            error = error_line(answer["error"]) if answer and answer["status"] != Status.VALID.value else ""
            out.append((p, mean, var, error, answer is None))
        return out

    def _score(self, prompts: list[list[int]]) -> list[tuple]:
        head, statuses, buckets, own = self._answers
        lps = self.lm.score([(p + head, statuses + buckets) for p in prompts])
        out = []
        for rows in lps:
            status_lp = torch.tensor([sum(r) for r in rows[:N_STATUS]])
            bucket_lp = torch.tensor([sum(r[-n:]) for r, n in zip(rows[N_STATUS:], own)])
            p, mean, var = score_distribution(status_lp, bucket_lp)
            out.append((p, mean, var, "", False))
        return out

    def value_at(self, task: str, pos: float) -> float:
        """Metric value at a leaderboard position, interpolated from this task's real executions."""
        return self.table.value_at(task, pos)

    # ---- learning: none ---------------------------------------------------------------------------
    def update(self, examples: list[tuple[WMQuery, Outcome]]) -> dict[str, float]:
        """Frozen: no weight changes. Only keeps the metric's name and (position, value) points of real
        valid executions, so that a predicted position can be shown as a metric value."""
        for q, o in examples:
            self.table.learn(q, o)
        return {}

    # ---- persistence: the config and the value table; the weights are the checkpoint's ------------
    def state_dict(self) -> dict:
        return {"kind": self.kind, "config": dict(self.cfg), **self.table.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.table.load_state_dict(state)

    @classmethod
    def from_state(cls, state: dict, overrides: dict | None = None) -> "PromptedLMWM":
        from dataclasses import fields

        from wmrl.config import WorldModelConfig

        known = {f.name for f in fields(WorldModelConfig)}
        cfg = {k: v for k, v in {**state["config"], **(overrides or {})}.items() if k in known}
        wm = cls.from_config(cfg)
        wm.load_state_dict(state)
        return wm

    def save(self, path: str) -> None:
        torch.save(self.state_dict(), path)
