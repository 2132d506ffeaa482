"""The real-execution budget of a run: how many anchors (fixed, or adaptive from the world model's
recent fidelity), which trajectories (random groups, or by uncertainty / predicted advantage with
inclusion probabilities), and which must be executed whatever the budget (the guard's flagged
classes). Stateful but free of Lightning: the environment asks it, a callback feeds it anchors."""
from __future__ import annotations

from collections import deque

import numpy as np

from wmrl.anchoring.selection import adaptive_anchor_rate, anchor_scores, select_anchors
from wmrl.config import EnvConfig  # defaults live in the schema
from wmrl.anchoring.guard import RewardHackingGuard
from wmrl.fidelity import fidelity


class AnchorBudget:
    def __init__(self, *, selection: str, rate: float, adaptive: bool, rate_min: float, rate_max: float,
                 fidelity_window: int, uniform_floor: float, guard: RewardHackingGuard | None,
                 mae_scale: float = EnvConfig.adaptive_mae_scale, min_pairs: int = EnvConfig.adaptive_min_pairs):
        self.selection, self.adaptive, self.rate_min, self.rate_max = selection, adaptive, rate_min, rate_max
        self.mae_scale, self.min_pairs = mae_scale, min_pairs
        self.uniform_floor, self.guard = uniform_floor, guard
        self.rate = rate_max if adaptive else rate  # an adaptive rate starts high: the WM is unmeasured
        self.recent: deque[tuple[float, float, float]] = deque(maxlen=fidelity_window)  # (wm corrected, real, std)

    @classmethod
    def from_config(cls, env_cfg) -> "AnchorBudget":
        guard = None
        if env_cfg.guard:
            guard = RewardHackingGuard(threshold=env_cfg.guard_threshold, half_life=env_cfg.guard_half_life,
                                       z=env_cfg.guard_z, min_pairs=env_cfg.guard_min_pairs)
        return cls(selection=env_cfg.anchor_selection, rate=env_cfg.anchor_rate, adaptive=env_cfg.adaptive_rate,
                   rate_min=env_cfg.anchor_rate_min, rate_max=env_cfg.anchor_rate_max,
                   fidelity_window=env_cfg.fidelity_window, uniform_floor=env_cfg.anchor_floor, guard=guard,
                   mae_scale=env_cfg.adaptive_mae_scale, min_pairs=env_cfg.adaptive_min_pairs)

    @property
    def per_trajectory(self) -> bool:
        """Anchors chosen per trajectory after the world model scored them (else whole random groups)."""
        return self.selection != "random"

    def choose(self, wm_var: np.ndarray, predicted_advantage: np.ndarray, rng: np.random.Generator
               ) -> tuple[np.ndarray, np.ndarray]:
        """(chosen mask, inclusion probability π) over world-model-scored trajectories."""
        score = anchor_scores(self.selection, wm_var=wm_var, predicted_advantage=predicted_advantage, n=len(wm_var))
        return select_anchors(score, self.rate, rng, self.uniform_floor)

    def forced(self, classes: list[list[str]]) -> np.ndarray:
        """Trajectories with a turn in a class the guard flagged: executed for real, whatever the rate."""
        if self.guard is None or not self.guard.flagged:
            return np.zeros(len(classes), dtype=bool)
        return np.array([bool(self.guard.route_real(cs).any()) for cs in classes], dtype=bool)

    def observe(self, wm: np.ndarray, real: np.ndarray, std: np.ndarray, classes: list[str]) -> dict[str, float]:
        """Learn from a step's anchor pairs (the WM score the policy trains on, out of sample; the real
        reward; the score's std; its class); returns env/... and guard/... metrics."""
        self.recent.extend(zip(np.asarray(wm, float).tolist(), np.asarray(real, float).tolist(),
                               np.asarray(std, float).tolist()))
        out: dict[str, float] = {}
        if self.recent:
            w, r, s = (np.array(c) for c in zip(*self.recent))
            # coverage at 1.96σ: the adaptive rate compares it with a nominal 95 %
            fid = fidelity(w, r, s, z=1.96, min_pairs=3)
            out.update({f"env/recent_{k}": float(v) for k, v in fid.items()})
            if self.adaptive:
                self.rate = adaptive_anchor_rate(fid, self.rate_min, self.rate_max, self.mae_scale,
                                                 min_pairs=self.min_pairs)
        out["env/anchor_rate"] = self.rate
        if self.guard is not None:
            if len(classes):
                self.guard.update(classes, wm, real)
            out.update(self.guard.metrics())
        return out

    def state_dict(self) -> dict:
        return {"rate": self.rate, "recent": [list(p) for p in self.recent],
                "guard": None if self.guard is None else self.guard.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.rate = float(state["rate"])
        self.recent.clear()
        self.recent.extend(tuple(p) for p in state["recent"])
        if self.guard is not None and state["guard"] is not None:
            self.guard.load_state_dict(state["guard"])
