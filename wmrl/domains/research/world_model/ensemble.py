"""The default world model: a bootstrapped ensemble of small transformers trained on real executions.

Each member sees its own bootstrap resample of the replay (Poisson(1) weight per example and
member, drawn once when the example arrives). Reward variance = mean aleatoric variance of the
members (status mixture + Gaussian pos) + the spread of their reward means (disagreement).
"""
from __future__ import annotations

import contextlib
import math
import time
from collections import Counter, OrderedDict
from dataclasses import asdict, fields
from typing import Any

import torch
import torch.nn.functional as F

from wmrl.config import Config, WorldModelConfig, plain
from wmrl.domains.research.outcome import PREDICTED_STATUSES, Outcome, Status, error_line
from wmrl.domains.research.tasks.action import action_class
from wmrl.domains.research.world_model.base import (N_STATUS, VALID_INDEX, ValueTable, WMPrediction, WMQuery, precheck_queries,
                                   reward_moments)
from wmrl.domains.research.world_model.model import EnsembleEncoder
from wmrl.domains.research.world_model.static import decided_status
from wmrl.domains.research.world_model.tokenizer import PAD, chunk, load_tokenizer

DESCRIPTOR_TOKENS = 48  # tokens of the task descriptor (averaged into one position)
PROGRAM_TOKENS = 384  # tokens of the program kept (its beginning)
HISTORY_TOKENS = 128  # tokens of the history kept (its end)
ERROR_LINES = 32  # error lines kept per (status, action class)
MEMORY_VAR = 1e-4  # reward variance of a remembered outcome: executions are seeded, only timing varies


def world_model_config(cfg: Any = None) -> WorldModelConfig:
    """The `world_model` config section as its schema dataclass: from a DictConfig, a mapping of
    some keys (the rest keep the schema's defaults) or None (all defaults). Unknown keys are an error."""
    if isinstance(cfg, WorldModelConfig):
        return cfg
    from omegaconf import OmegaConf

    given = {} if cfg is None else (OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else dict(cfg))
    unknown = set(given) - {f.name for f in fields(WorldModelConfig)}
    if unknown:
        raise ValueError(f"unknown world_model keys {sorted(unknown)}; valid: {sorted(f.name for f in fields(WorldModelConfig))}")
    return WorldModelConfig(**given)


@contextlib.contextmanager
def _torch_threads(n: int):
    """Run with n intra-op threads (0 = unchanged); restores the caller's setting."""
    before = torch.get_num_threads()
    if n > 0 and n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def _budget(chunks: list[list[int]], tokens: int) -> list[list[int]]:
    """The leading chunks holding at most `tokens` tokens in all."""
    out, used = [], 0
    for c in chunks:
        if used + len(c) > tokens:
            break
        out.append(c)
        used += len(c)
    return out


class LearnedEnsembleWM:
    """Bootstrapped transformer ensemble over chunked (descriptor, program, history) tokens."""

    kind = "ensemble"

    def __init__(self, cfg: Any = None, seed: int = Config.seed, tokenizer_json: str | None = None):
        self.cfg = plain(asdict(world_model_config(cfg)))  # plain strings: checkpointed
        c = self.cfg
        if c["members"] < 1:
            raise ValueError("world_model.members must be >= 1")
        self.seed = seed
        self.tokenizer = load_tokenizer(tokenizer_json)
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.pad_id = self.tokenizer.token_to_id(PAD)
        with torch.random.fork_rng(devices=[]):  # seeded initial weights, the caller's random stream untouched
            torch.manual_seed(seed)
            self.model = EnsembleEncoder(c["members"], self.tokenizer.get_vocab_size(), c["d_model"], c["layers"],
                                         c["heads"], c["max_tokens"], N_STATUS)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=c["lr"], weight_decay=1e-4)
        self.gen = torch.Generator().manual_seed(seed + 1)
        r, t, m = c["replay_size"], self.raw_tokens, c["members"]
        # replay of real executions: a FIFO ring buffer of tokenized examples
        self.replay = {
            "ids": torch.full((r, t), self.pad_id, dtype=torch.long),
            "slots": torch.full((r, t), -1, dtype=torch.long),
            "inner": torch.zeros((r, t), dtype=torch.long),
            "length": torch.zeros(r, dtype=torch.long),
            "status": torch.zeros(r, dtype=torch.long),
            "pos": torch.zeros(r),
            "boot": torch.zeros(r, m),  # Poisson(1) bootstrap weight of each example per member
        }
        self.replay_count = 0  # examples ever added; the ring position is count % replay_size
        self.table = ValueTable()  # task -> its metric's name and recent (pos, value) of valid executions
        # exact outcomes of programs already executed, per task: a program seen again is predicted from
        # memory (executions are seeded, so the same program on the same data does the same thing)
        self.memory: OrderedDict[tuple[str, str], tuple[int, float, float, str]] = OrderedDict()
        # error lines seen per (status, action class): a predicted failure is shown with the error such
        # programs most often raise, in the format of real feedback
        self.errors: dict[tuple[str, str], Counter] = {}
        self.updates = 0

    # ---- encoding -------------------------------------------------------------------------
    def encode(self, queries: list[WMQuery]) -> list[tuple[list[int], list[int], list[int]]]:
        """(token ids, position of each token, its place inside its chunk) for each query.

        Positions are chunks: descriptor fields, then the program's chunks (its first
        PROGRAM_TOKENS tokens), then the history's last HISTORY_TOKENS tokens; at most max_tokens
        positions, dropping the oldest history first, then the program's tail.
        """
        n, t = len(queries), self.cfg["max_tokens"]
        texts = [q.descriptor for q in queries] + [q.program for q in queries] + [q.history for q in queries]
        enc = self.tokenizer.encode_batch(texts, add_special_tokens=False)
        out = []
        for i in range(n):
            desc = _budget(chunk(enc[i], texts[i], on_space=True), DESCRIPTOR_TOKENS)
            prog = _budget(chunk(enc[n + i], texts[n + i]), PROGRAM_TOKENS)
            hist = _budget(chunk(enc[2 * n + i], texts[2 * n + i])[::-1], HISTORY_TOKENS)[::-1]
            hist = hist[len(hist) - max(0, min(len(hist), t - len(desc) - len(prog))):]
            chunks = (desc + prog + hist)[:t]
            ids, slots, inner = [], [], []
            for j, c in enumerate(chunks):
                ids += c
                slots += [j] * len(c)
                inner += range(len(c))
            out.append((ids, slots, inner))
        return out

    @property
    def raw_tokens(self) -> int:
        return DESCRIPTOR_TOKENS + PROGRAM_TOKENS + HISTORY_TOKENS

    def _pad(self, seqs: list[tuple[list[int], list[int], list[int]]], width: int | None = None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        width = width or max(1, max(len(s[0]) for s in seqs))
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        slots = torch.full((len(seqs), width), -1, dtype=torch.long)
        inner = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, (a, p, c) in enumerate(seqs):
            ids[i, : len(a)] = torch.tensor(a, dtype=torch.long)
            slots[i, : len(a)] = torch.tensor(p, dtype=torch.long)
            inner[i, : len(a)] = torch.tensor(c, dtype=torch.long)
        return ids, slots, inner

    # ---- prediction -----------------------------------------------------------------------
    @torch.inference_mode()
    def member_outputs(self, queries: list[WMQuery]) -> dict[str, torch.Tensor]:
        """Per-member predictions [M, B, ...] (no precheck), for analysis and tests."""
        with _torch_threads(self.cfg["threads"]):
            return self._member_outputs(queries)

    def _member_outputs(self, queries: list[WMQuery]) -> dict[str, torch.Tensor]:
        self.model.eval()
        logits, mu, logvar = self.model(*self._pad(self.encode(queries)))
        probs = logits.softmax(-1)
        var = logvar.exp()
        r_mean, r_var = reward_moments(probs, mu, var)
        return {"status_probs": probs, "pos_mean": mu, "pos_var": var, "reward_mean": r_mean, "reward_var": r_var}

    def predict(self, queries: list[WMQuery]) -> WMPrediction:
        b = len(queries)
        probs, reward_mean, decided, errors = precheck_queries(queries)
        pos_mean, pos_std, reward_var = torch.zeros(b), torch.zeros(b), torch.zeros(b)
        prechecked = decided.clone()
        for i, q in enumerate(queries):
            hit = None if decided[i] else self.memory.get((q.task, q.program.strip()))
            if hit is not None:
                status_index, pos, reward, errors[i] = hit
                probs[i, status_index] = 1.0
                pos_mean[i], reward_mean[i], reward_var[i] = pos, reward, MEMORY_VAR
                decided[i] = True
        rest = (~decided).nonzero().flatten().tolist()
        if rest:
            out = self.member_outputs([queries[i] for i in rest])
            m = out["reward_mean"].shape[0]
            probs[rest] = out["status_probs"].mean(0)
            pos_mean[rest] = out["pos_mean"].mean(0)
            spread = lambda x: x.var(0, unbiased=False) if m > 1 else torch.zeros_like(x[0])  # noqa: E731
            pos_std[rest] = (out["pos_var"].mean(0) + spread(out["pos_mean"])).sqrt()
            reward_mean[rest] = out["reward_mean"].mean(0)
            reward_var[rest] = out["reward_var"].mean(0) + spread(out["reward_mean"])
        for i in rest:
            errors[i] = self.likely_error(PREDICTED_STATUSES[int(probs[i].argmax())], queries[i].program)
        metrics, value = self.table.shown(queries, pos_mean)
        return WMPrediction(status_probs=probs, pos_mean=pos_mean, pos_std=pos_std, reward_mean=reward_mean,
                            reward_var=reward_var, value_mean=value, tasks=[q.task for q in queries],
                            metrics=metrics, prechecked=prechecked, errors=errors)

    def likely_error(self, status: Status, program: str) -> str:
        """The error line programs of this class most often raised with this status ("" if none seen)."""
        if status is Status.VALID:
            return ""
        seen = self.errors.get((status.value, action_class(program))) or self.errors.get((status.value, "*"))
        return seen.most_common(1)[0][0] if seen else ""

    def value_at(self, task: str, pos: float) -> float:
        """Metric value at a leaderboard position, interpolated from this task's real executions."""
        return self.table.value_at(task, pos)

    # ---- learning -------------------------------------------------------------------------
    @staticmethod
    def _trainable(q: WMQuery, o: Outcome) -> bool:
        """Infra errors are missing data; programs the checks decide (syntax, malformed, undefined names,
        bad imports) are never asked of the model, so it does not learn from them either: trained on them,
        it took the certain runtime errors (half of a warm-started policy's programs) for its prior and
        predicted runtime_error for 43 % of the valid programs it was asked about."""
        if o.status is Status.INFRA_ERROR or o.status not in PREDICTED_STATUSES:
            return False
        if o.status is Status.VALID and (o.pos is None or not math.isfinite(o.pos)):
            return False
        return decided_status(q.program, q.interface)[0] is None

    def _tensors(self, examples: list[tuple[WMQuery, Outcome]]) -> dict[str, torch.Tensor]:
        seqs = self.encode([q for q, _ in examples])
        ids, slots, inner = self._pad(seqs, self.raw_tokens)
        return {
            "ids": ids,
            "slots": slots,
            "inner": inner,
            "length": torch.tensor([len(s[0]) for s in seqs], dtype=torch.long),
            "status": torch.tensor([PREDICTED_STATUSES.index(o.status) for _, o in examples], dtype=torch.long),
            "pos": torch.tensor([float(o.pos) if o.status is Status.VALID else 0.0 for _, o in examples]),
            "boot": torch.poisson(torch.ones(len(examples), self.cfg["members"]), generator=self.gen),
        }

    def _remember(self, examples: list[tuple[WMQuery, Outcome]]) -> None:
        for q, o in examples:
            self.table.learn(q, o)
            if o.status in PREDICTED_STATUSES and math.isfinite(o.reward):
                key = (q.task, q.program.strip())
                self.memory[key] = (PREDICTED_STATUSES.index(o.status), float(o.pos or 0.0), float(o.reward),
                                    error_line(o.stderr_tail))
                self.memory.move_to_end(key)
                while len(self.memory) > self.cfg["replay_size"]:
                    self.memory.popitem(last=False)
            line = error_line(o.stderr_tail)
            if o.status in PREDICTED_STATUSES and o.status is not Status.VALID and line:
                for key in ((o.status.value, action_class(q.program)), (o.status.value, "*")):
                    seen = self.errors.setdefault(key, Counter())
                    seen[line] += 1
                    if len(seen) > ERROR_LINES:  # bounded: forget the rarest
                        del seen[min(seen, key=seen.get)]

    def add(self, examples: list[tuple[WMQuery, Outcome]]) -> int:
        """Add real executions to the bounded replay (oldest dropped first); returns how many were kept."""
        self._remember(examples)
        examples = [(q, o) for q, o in examples if self._trainable(q, o)]
        if not examples:
            return 0
        new = self._tensors(examples)
        r = self.cfg["replay_size"]
        slots = (torch.arange(len(examples)) + self.replay_count) % r
        for k, v in new.items():
            self.replay[k][slots[-r:]] = v[-r:]
        self.replay_count += len(examples)
        return len(examples)

    @property
    def replay_len(self) -> int:
        return min(self.replay_count, self.cfg["replay_size"])

    def _step(self, data: dict[str, torch.Tensor], n: int) -> dict[str, float]:
        """One gradient update; each member draws its batch from its own bootstrap weights."""
        m, bs = self.cfg["members"], min(self.cfg["batch_size"], max(n, 1))
        boot = data["boot"][:n].T.clone()  # [M, n]
        empty = boot.sum(1) == 0
        boot[empty] = 1.0  # a member whose resample is empty (tiny n) sees everything
        idx = torch.multinomial(boot, bs, replacement=True, generator=self.gen)  # [M, bs]
        t = int(data["length"][idx].max())
        ids, slots, inner = (data[k][idx][..., :t] for k in ("ids", "slots", "inner"))
        status, pos = data["status"][idx], data["pos"][idx]
        self.model.train()
        logits, mu, logvar = self.model(ids, slots, inner)
        ce = F.cross_entropy(logits.reshape(-1, N_STATUS), status.reshape(-1))
        valid = (status == VALID_INDEX).float()
        nll_each = 0.5 * (logvar + (pos - mu) ** 2 / logvar.exp())
        nll = (nll_each * valid).sum() / valid.sum().clamp_min(1.0)
        loss = ce * m + nll * m  # sum over members of each member's mean loss
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.updates += 1
        return {"loss": loss.item() / m, "status_ce": ce.item(), "pos_nll": nll.item()}

    def update(self, examples: list[tuple[WMQuery, Outcome]]) -> dict[str, float]:
        """Add real executions to the replay, then take `updates_per_step` gradient updates on it."""
        start = time.perf_counter()
        added = self.add(examples)
        stats: dict[str, float] = {"wm/added": float(added), "wm/replay": float(self.replay_len)}
        n = self.replay_len
        if n == 0:
            return stats
        acc: dict[str, float] = {}
        with _torch_threads(self.cfg["threads"]):
            for _ in range(self.cfg["updates_per_step"]):
                for k, v in self._step(self.replay, n).items():
                    acc[k] = acc.get(k, 0.0) + v
        steps = max(self.cfg["updates_per_step"], 1)
        stats.update({f"wm/{k}": v / steps for k, v in acc.items()})
        stats["wm/update_s"] = time.perf_counter() - start
        return stats

    def fit(self, examples: list[tuple[WMQuery, Outcome]], epochs: int = 20) -> dict[str, float]:
        """Offline fit on a whole dataset (ignores replay_size), then keep the newest in the replay."""
        self._remember(examples)
        kept = [(q, o) for q, o in examples if self._trainable(q, o)]
        if not kept:
            return {"wm/examples": 0.0}
        data = self._tensors(kept)
        n = len(kept)
        steps = epochs * math.ceil(n / self.cfg["batch_size"])
        last: dict[str, float] = {}
        with _torch_threads(self.cfg["threads"]):
            for _ in range(steps):
                last = self._step(data, n)
        self.add(kept[-self.cfg["replay_size"]:])
        return {"wm/examples": float(n), "wm/updates": float(steps), **{f"wm/{k}": v for k, v in last.items()}}

    # ---- persistence ----------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "kind": self.kind,
            "config": dict(self.cfg),
            "seed": self.seed,
            "tokenizer": self.tokenizer.to_str(),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "replay": {k: v.clone() for k, v in self.replay.items()},
            "replay_count": self.replay_count,
            **self.table.state_dict(),
            "memory": [[t, p, *v] for (t, p), v in self.memory.items()],
            "errors": [[s_, c, dict(cnt)] for (s_, c), cnt in self.errors.items()],
            "updates": self.updates,
            "generator": self.gen.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Load a state of the same architecture (use `LearnedEnsembleWM.from_state` otherwise)."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        r = self.cfg["replay_size"]
        old = state["replay"]
        keep = min(int(state["replay_count"]), old["ids"].shape[0], r)
        order = torch.arange(int(state["replay_count"]) - keep, int(state["replay_count"])) % old["ids"].shape[0]
        for k, buf in self.replay.items():  # re-pack oldest-to-newest into this replay's ring
            buf.fill_({"ids": self.pad_id, "slots": -1}.get(k, 0))
            buf[:keep] = old[k][order]
        self.replay_count = keep
        self.table.load_state_dict(state)
        self.memory = OrderedDict(((t, p), (int(i), float(pos), float(r), str(line)))
                                  for t, p, i, pos, r, line in state["memory"])
        self.errors = {(s_, c): Counter(cnt) for s_, c, cnt in state["errors"]}
        self.updates = int(state["updates"])
        self.gen.set_state(state["generator"])

    @classmethod
    def from_state(cls, state: dict, overrides: dict | None = None) -> "LearnedEnsembleWM":
        known = {f.name for f in fields(WorldModelConfig)}
        cfg = {k: v for k, v in state["config"].items() if k in known}  # keys of other schema versions drop
        cfg.update({k: v for k, v in (overrides or {}).items() if k not in ARCHITECTURE_KEYS})
        wm = cls(cfg, seed=int(state["seed"]), tokenizer_json=state["tokenizer"])
        wm.load_state_dict(state)
        for g in wm.optimizer.param_groups:  # the running config decides the learning rate
            g["lr"] = cfg["lr"]
        return wm

    def save(self, path: str) -> None:
        torch.save(self.state_dict(), path)

    @classmethod
    def load(cls, path: str, overrides: dict | None = None) -> "LearnedEnsembleWM":
        return cls.from_state(torch.load(path, map_location="cpu", weights_only=True), overrides)


# keys a saved model's architecture fixes; the others (lr, replay_size, ...) may change on load
ARCHITECTURE_KEYS = ("members", "d_model", "layers", "heads", "max_tokens")

