"""The multi-factor memory score (memory/memory_score.py): pure, relevance first; and the pool ranks by it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.config import Settings
from kernel.errors import ConfigError
from kernel.tokens import count
from memory.context import assemble
from memory.memory_match import query_words
from memory.memory_score import MemoryWeights, components, score_memories
from memory.store import ContextRows
from tests.test_context import SYSTEM, T0, fact


def test_components_are_each_in_their_place() -> None:
    m = fact(1, "works at Acme in Lisbon", importance=0.8, confidence=0.7, access_count=10,
             last_accessed_at=T0 - timedelta(days=30))
    parts = components(m, query_words("does Ana still work at Acme?"), T0)
    # stems: "work" meets "works"; the message names 3 of the memory's 5 stems (work works acm acme lisbon), a
    # larger share than its own 2 words of 4 (ana, still, work, acme) the memory names
    assert parts["relevance"] == pytest.approx(3 / 5)
    assert (parts["importance"], parts["confidence"]) == (0.8, 0.7)
    assert parts["recency"] == pytest.approx(0.5)  # one half-life since it was last used
    assert parts["frequency"] == pytest.approx(1.0)
    assert components(m, (), T0)["relevance"] == 0.0
    assert "cosine" not in components(m, (), T0)
    vector = components(m, (), T0, cosine=0.5)  # a vector's word when it is higher: (0.5 - 0.2) / (0.6 - 0.2)
    assert (vector["relevance"], vector["cosine"]) == (pytest.approx(0.75), 0.5)
    assert components(m, (), T0, cosine=0.1)["relevance"] == 0.0  # unrelated sentences' cosines say nothing
    assert components(m, query_words("Acme"), T0, cosine=0.95)["relevance"] == 1.0


def test_relevance_dominates_and_the_rest_orders_the_unrelated() -> None:
    relevant = fact(1, "has a parrot called Kiwi", importance=0.1, confidence=0.5)
    important = fact(2, "is allergic to peanuts", importance=1.0, access_count=50)
    minor = fact(3, "likes the colour blue", importance=0.2)
    scores = score_memories([relevant, important, minor], "how is Kiwi the parrot?", T0)
    assert scores[0]["memory"] > scores[1]["memory"] > scores[2]["memory"]
    assert all(0 <= s["memory"] <= 1 for s in scores)


def test_weights_parse_validate_and_come_from_the_environment() -> None:
    w = MemoryWeights.parse("relevance=0.7, importance=0.1")
    assert (w.relevance, w.importance, w.confidence) == (0.7, 0.1, 0.1)
    assert MemoryWeights.parse("") == MemoryWeights()
    for bad in ("relevance=0.1", "relevance=x", "weight=1", "relevance", "recency=-1"):
        with pytest.raises(ValueError):
            MemoryWeights.parse(bad)
    assert Settings.from_mapping({"HILO_MEMORY_WEIGHTS": "relevance=0.9"}).memory_weights.relevance == 0.9
    with pytest.raises(ConfigError, match="HILO_MEMORY_WEIGHTS"):
        Settings.from_mapping({"HILO_MEMORY_WEIGHTS": "importance=0.9"})
    with pytest.raises(ConfigError, match="HILO_MEMORY_EXPIRY_IMPORTANCE"):
        Settings.from_mapping({"HILO_MEMORY_EXPIRY_IMPORTANCE": "2"})
    assert Settings.from_mapping({}).memory_expiry_days == 120


def test_the_pool_takes_the_relevant_memory_first_and_shows_its_scores() -> None:
    memories = [fact(i, f"unrelated memory number {i} about gardening", importance=0.9) for i in range(1, 40)]
    memories.append(fact(99, "my sister is called Marta", importance=0.1, source_external_ids=("tg-7",)))
    rows = ContextRows(memories, [], [], [])
    new = "what is my sister called?"
    # room for only a few memory lines: the relevant one must be among them, although it is the least important
    ctx = assemble(rows, system_prompt=SYSTEM, new_text=new, new_tokens=count(new), budget=count(SYSTEM) + 120,
                   surface="cli", now=T0)
    chosen = [i for i in ctx.items if i.block == "memory"]
    assert 0 < len(chosen) < len(memories)
    top = max(chosen, key=lambda i: i.scores["pool"])
    assert top.memory_id == 99 and top.source_external_ids == ("tg-7",)
    assert top.scores["relevance"] == 1.0 and top.scores["pool"] == top.scores["memory"]
    assert ctx.memory_ids() == [i.memory_id for i in chosen]
