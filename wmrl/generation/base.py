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
        """Called after each optimizer update; a no-op when the generator shares the module's model."""
