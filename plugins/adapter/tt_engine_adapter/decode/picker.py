"""Each row's next token from its logits (engine environment; torch is passed in, never imported here).

Greedy rows (temperature 0 or below) take one argmax over the whole batch;
the others are sampled on the CPU from their own seeded `torch.Generator`
(temperature, then top-p: the smallest set of tokens whose probability
reaches `top_p`, the most likely always kept), so a row's tokens depend on
its seed, never on the rows it is batched with. A row's settings are anything
with `temperature` and `top_p` (`Sampling`, the server's `ChatParams`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol, Sequence


class Settings(Protocol):
    temperature: float
    top_p: float


@dataclass(frozen=True)
class Sampling:
    """One row's sampling settings."""

    temperature: float
    top_p: float = 1.0


def seeded(torch: Any, seed: int) -> Any:
    """A CPU `torch.Generator` seeded with `seed`: one per sampled row."""
    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed)
    return generator


def pick(torch: Any, logits: Any, settings: Sequence[Settings], generators: Sequence[Optional[Any]]) -> list[int]:
    """The next token of each row of `logits` (`[rows, vocab]`): greedy rows by one argmax, others sampled."""
    greedy = torch.argmax(logits, dim=-1).tolist()
    return [greedy[i] if s.temperature <= 0 else sample(torch, logits[i], s, generators[i])
            for i, s in enumerate(settings)]


def sample(torch: Any, logits: Any, settings: Settings, generator: Any) -> int:
    """One token drawn from one row's logits (`[vocab]`) with temperature and top-p."""
    probs = torch.softmax(logits.cpu() / settings.temperature, dim=-1)
    if settings.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < settings.top_p
        keep[0] = True
        filtered = torch.zeros_like(probs)
        filtered[order[keep]] = sorted_probs[keep]
        probs = filtered / filtered.sum()
    return int(torch.multinomial(probs, 1, generator=generator).item())
