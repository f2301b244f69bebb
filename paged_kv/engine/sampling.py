"""How a request picks its next token: greedy (temperature 0) or seeded sampling."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Optional

import torch


@dataclass(frozen=True)
class SamplingParams:
    """``max_tokens``: tokens to generate; ``temperature`` 0 means greedy (argmax); ``seed`` makes a
    sampled request reproducible on its own, whatever else runs in the same batch."""

    max_tokens: int = 32
    temperature: float = 0.0
    seed: Optional[int] = None

    def __post_init__(self) -> None:
        if (
            isinstance(self.max_tokens, bool)
            or not isinstance(self.max_tokens, numbers.Integral)
            or self.max_tokens < 1
        ):
            raise ValueError(f"max_tokens must be a positive int, got {self.max_tokens!r}")
        if (
            isinstance(self.temperature, bool)
            or not isinstance(self.temperature, numbers.Real)
            or not 0 <= self.temperature < float("inf")
        ):
            raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature!r}")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) or self.seed < 0
        ):
            raise ValueError(f"seed must be None or a non-negative int, got {self.seed!r}")

    def generator(self) -> Optional[torch.Generator]:
        """A fresh CPU generator for a sampled request (None when greedy)."""
        if self.temperature == 0:
            return None
        gen = torch.Generator()
        if self.seed is None:
            gen.seed()
        else:
            gen.manual_seed(self.seed)
        return gen


def sample_next(logits: torch.Tensor, temperature: float, generator: Optional[torch.Generator]) -> int:
    """One token id from ``logits [vocab]``: argmax when ``temperature == 0``, else softmax sampling."""
    if logits.dim() != 1:
        raise ValueError(f"logits must be 1-D [vocab], got shape {tuple(logits.shape)}")
    if temperature == 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.float().cpu() / temperature, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))
