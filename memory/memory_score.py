"""The multi-factor score of a memory for a new message: how the context pool ranks the person's memories.

Pure: no I/O. Five components, each in [0, 1]:
- relevance   lexical: the share of the message's words the memory names (any of a word's stems), or of the
              memory's stems the message holds, whichever is higher (memory_match: stems on both sides); when
              the message has a vector and the memory one of the same embedder, their cosine mapped to [0, 1]
              (`vector_relevance`) when it is higher;
- importance  as stored (the extractor's estimate; 0.5 for `/remember`);
- confidence  as stored (by source: stated 1.0, inferred 0.7, observed 0.5);
- recency     0.5 ** (days since last used in a context, or since it changed, / RECENCY_HALF_LIFE_DAYS);
- frequency   log(1 + uses) / log(1 + FREQUENCY_SATURATION), capped at 1.
With a vector, the scores also carry the raw "cosine" (not a component: it reaches the score only through
relevance). The score is their weighted mean (`MemoryWeights`, HILO_MEMORY_WEIGHTS): relevance must weigh more
than any other component, so that what the message is about comes first; the rest orders what it does not decide.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime

from kernel.types import Memory
from memory.memory_match import covered, flat, overlap, query_words

RECENCY_HALF_LIFE_DAYS = 30.0
#: A cosine at or below COSINE_FLOOR says nothing (unrelated sentences reach 0.1-0.3 with the local embedder and
#: OpenAI's); from COSINE_FULL on, the memory is as relevant as one naming every word; linear in between.
COSINE_FLOOR = 0.2
COSINE_FULL = 0.6
FREQUENCY_SATURATION = 10
COMPONENTS = ("relevance", "importance", "confidence", "recency", "frequency")


@dataclass(frozen=True, slots=True)
class MemoryWeights:
    """The weight of each component (any non-negative numbers: the score divides by their sum)."""

    relevance: float = 0.55
    importance: float = 0.15
    confidence: float = 0.1
    recency: float = 0.1
    frequency: float = 0.1

    def __post_init__(self) -> None:
        values = [getattr(self, f.name) for f in fields(self)]
        if any(v < 0 or not math.isfinite(v) for v in values):
            raise ValueError(f"memory weights must be non-negative numbers, got {self}")
        if any(v >= self.relevance for v in values[1:]):
            raise ValueError(f"relevance must weigh more than every other memory weight, got {self}")

    @classmethod
    def parse(cls, text: str) -> MemoryWeights:
        """'relevance=0.6,importance=0.15,...': the named weights; the others keep their defaults."""
        given: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition("=")
            name = name.strip()
            if not sep or name not in COMPONENTS:
                raise ValueError(f"{part!r}: expected NAME=NUMBER with NAME one of {', '.join(COMPONENTS)}")
            try:
                given[name] = float(value)
            except ValueError:
                raise ValueError(f"{part!r}: {value.strip()!r} is not a number") from None
        return cls(**given)

    def total(self, parts: Mapping[str, float]) -> float:
        weights: dict[str, float] = {name: getattr(self, name) for name in COMPONENTS}
        return sum(weights[n] * parts[n] for n in COMPONENTS) / sum(weights.values())


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def vector_relevance(cosine: float) -> float:
    """A cosine as relevance in [0, 1] (COSINE_FLOOR -> 0, COSINE_FULL -> 1)."""
    return min(1.0, max(0.0, (cosine - COSINE_FLOOR) / (COSINE_FULL - COSINE_FLOOR)))


def components(memory: Memory, query: Sequence[Sequence[str]], now: datetime,
               cosine: float | None = None) -> dict[str, float]:
    """The five components of `memory` for a message of words `query` (memory_match.query_words), at `now`, and
    its "cosine" when given (see the module docstring)."""
    relevance = max(covered(query, memory.terms), overlap(memory.terms, flat(query)))
    if cosine is not None:
        relevance = max(relevance, vector_relevance(cosine))
    last = memory.last_accessed_at or memory.updated_at
    days = max(0.0, (_utc(now) - _utc(last)).total_seconds() / 86400)
    return ({"cosine": cosine} if cosine is not None else {}) | {
        "relevance": relevance,
        "importance": memory.importance,
        "confidence": memory.confidence,
        "recency": 0.5 ** (days / RECENCY_HALF_LIFE_DAYS),
        "frequency": min(1.0, math.log1p(memory.access_count) / math.log1p(FREQUENCY_SATURATION)),
    }


def score_memories(memories: Sequence[Memory], text: str, now: datetime, weights: MemoryWeights | None = None,
                   cosines: Mapping[int, float] | None = None) -> list[dict[str, float]]:
    """Per memory (in order), its components and its score under "memory" (the weighted mean)."""
    if not memories:  # most people have none: the question is not stemmed for nothing
        return []
    weights = weights or MemoryWeights()
    query = query_words(text)
    out = []
    for m in memories:
        parts = components(m, query, now, cosines.get(m.id) if cosines else None)
        out.append({"memory": weights.total(parts), **parts})
    return out
