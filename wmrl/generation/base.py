from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass
class Completion:
    token_ids: list[int]  # generated ids, ending with an end-of-turn id when `finished`
    logprobs: list[float]  # log-prob of each generated id under the sampling policy (logits / temperature)
    finished: bool


class Generator(Protocol):
    """Samples completions for prompts given as token ids; sees the trainer's latest weights."""

    def generate(self, prompts: list[list[int]], *, temperature: float, top_p: float,
                 max_new_tokens: int, seed: int) -> list[Completion]: ...

    def sync_weights(self, model) -> None:
        """Load `model`'s current weights (called through `WeightSync` before sampling with weights
        that changed); a no-op when the generator shares the trained model object."""


class WeightSync:
    """Pushes the trained policy's weights into the generator, once per policy version (the number
    of RL steps trained). Rollout collection and evaluation both call it before sampling; the
    first call always syncs (a resumed run's generator was built before the checkpoint loaded)."""

    def __init__(self, generator: Generator, policy):
        self.generator, self.policy = generator, policy
        self.version: int | None = None

    def __call__(self, version: int) -> None:
        if version != self.version:
            self.generator.sync_weights(self.policy)
            self.version = version
