"""The ranked pool of context assembly: what competes for the budget left after the always-kept parts.

Candidates: the person's memories (facts, preferences...), the recalled messages (retrieval over their whole
history) and the older exchanges of the current conversation. Each has a score in [0, 1]; the pool is filled
greedily in score order, each candidate taken if it still fits, skipped if not, until nothing more fits, so no
part of the budget is left unused while a candidate that fits remains. Older exchanges are whole and contiguous:
the conversation keeps a newest suffix, so the first older exchange that does not fit closes the conversation for
the rest of the pool.

Scores. Memories score their multi-factor score (memory/memory_score.py: relevance to the new message first,
then importance, confidence, recency, frequency; in [0, 1]), given by the caller. For the rest the store gives an
order, not a scale: recalled messages best match first, older exchanges newest first; each scores the reciprocal
of its rank within its kind, 1 / (1 + rank): the best recalled message and the newest older exchange score 1.0,
the next ones 0.5, and so on, so the kinds interleave (ties: memory, then recalled, then exchange). Recalled
messages the store scored (`ContextRows.recall_scores`, memory/retrieval.py) score their fused score on the same
scale instead: the best 1.0, one z-unit below it 0.5, two 0.33 (retrieval.pool_score).

Costs are exact (memory/context_render.py): the memory block's header is paid by its first item, a recalled
message pays its line plus what it changes in its episode headers. The block is two messages when it holds both
kinds (the facts, then the recalled messages: the facts change seldom, so the model's input starts with a stable
prefix a provider can cache, memory/context.py): the first item of the second kind pays that message's overhead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from kernel.tokens import MESSAGE_OVERHEAD
from memory.context_render import MEMORY_HEADER, Timeline, data_line, header_tokens, memory_label, turn_line
from memory.retrieval import pool_score
from memory.store import Memory, StoredMessage

_FACT, _RECALLED, _EXCHANGE = 0, 1, 2
#: Recalled messages asked of the store per budget token, and the bounds: enough hits that the pool can fill
#: the budget (a recalled line with its episode header costs about 20-40 tokens), few enough to stay cheap.
#: Measured (bench/recall_lab.py on bench/memory_bench.py's corpus, seed 11; bench/context_bench.py side by side):
#: a cap of 64 left 4,000 tokens at the recall of 2,000 (with the embedder 0.582 / 0.648 EN / ES, 2,200 tokens
#: spent), 128 reaches 0.678 / 0.705 (3,964 spent) and 250 no more (0.674 / 0.700); at the default 8,000-token
#: budget 128 costs assemble() 2.0 -> 2.2 ms p50 (SQLite, 10k messages), the store's read the same within noise.
RECALL_PER_TOKEN = 1 / 16
RECALL_MIN, RECALL_MAX = 20, 128
#: Nothing in the pool costs less (a conversation message costs its overhead, a data line more): below it the
#: pool is full.
_MIN_COST = MESSAGE_OVERHEAD


def recall_limit(budget: int) -> int:
    """How many recalled messages to ask the store for (`ContextQuery.search_limit`) at this budget."""
    return max(RECALL_MIN, min(RECALL_MAX, int(budget * RECALL_PER_TOKEN)))


def rank_score(rank: int) -> float:
    """The score of the candidate at `rank` (0 = best) of its kind."""
    return 1.0 / (1 + rank)


def message_cost(messages: Sequence[StoredMessage]) -> int:
    """What messages cost as chat messages of the conversation block."""
    return sum(m.token_count + MESSAGE_OVERHEAD for m in messages)


@dataclass(slots=True)
class Pick:
    """A chosen memory or recalled message: its score, its data line and what the line costs; a memory's `parts`
    are its score's components (memory/memory_score.py)."""

    score: float
    line: str
    cost: int
    fact: Memory | None = None
    message: StoredMessage | None = None
    parts: Mapping[str, float] | None = None


@dataclass(slots=True)
class Pool:
    """What the pool chose. `memory_tokens` is the whole memory block (header, lines, episode headers)."""

    facts: list[Pick] = field(default_factory=list)
    recalled: Timeline[Pick] = field(default_factory=lambda: Timeline(None))
    older: list[tuple[list[StoredMessage], float]] = field(default_factory=list)
    memory_tokens: int = 0
    spent: int = 0


def _opening(pool: Pool, memory_header: int, kind_opened: bool) -> int:
    """What the next item of one kind (facts or recalled) pays beyond its line: the block's header for the first
    item of the block, a message's overhead for the first of its kind after the other kind opened the block."""
    if not pool.memory_tokens:
        return memory_header
    return 0 if kind_opened else MESSAGE_OVERHEAD


def recalled_scores(recalled: Sequence[StoredMessage], fused: Mapping[int, Mapping[str, float]]) -> list[float]:
    """The pool score of each recalled message: its fused retrieval score on the pool's scale
    (memory/retrieval.py pool_score: the best 1.0) when the store scored it, else its rank score."""
    known = [fused[m.id]["fused"] for m in recalled if m.id in fused and "fused" in fused[m.id]]
    best = max(known, default=0.0)
    return [pool_score(fused[m.id]["fused"], best) if m.id in fused and "fused" in fused[m.id] else rank_score(r)
            for r, m in enumerate(recalled)]


def fill(facts: Sequence[Memory], recalled: Sequence[StoredMessage], older: Sequence[list[StoredMessage]],
         limit: int, now: datetime | None, fact_scores: Sequence[Mapping[str, float]] | None = None,
         fused: Mapping[int, Mapping[str, float]] | None = None) -> Pool:
    """Fill `limit` tokens from the pool (see the module docstring).

    facts: the memories, oldest first, as stored; fact_scores: theirs (memory_score.score_memories, in order:
    the score under "memory"); without them a memory scores by its rank, newest first. recalled: best first,
    already de-duplicated. older: the older exchanges of the conversation, newest first. The chosen memories keep
    their stored order; recalled messages are a timeline; older exchanges come out oldest first.
    """
    n_facts = len(facts)
    if fact_scores is None:
        fact_scores = [{"memory": rank_score(n_facts - 1 - i)} for i in range(n_facts)]
    recall = recalled_scores(recalled, fused or {})
    exchanges = [(rank_score(k), _EXCHANGE, k) for k in range(len(older))]
    # older exchanges alone (a web visitor's turns, before anything is recalled) are in rank order already, newest
    # first: sorting every candidate by a key was most of what this function cost them
    candidates = exchanges if not facts and not recalled else sorted(
        [(fact_scores[i]["memory"], _FACT, i) for i in range(n_facts)]
        + [(recall[r], _RECALLED, r) for r in range(len(recalled))] + exchanges,
        key=lambda c: (-c[0], c[1], -c[2] if c[1] == _FACT else c[2]),  # equal memories: the newest first
    )
    pool = Pool(recalled=Timeline(now))
    memory_header = header_tokens(MEMORY_HEADER)
    conversation_open = True
    fact_picks: dict[int, Pick] = {}
    for score, kind, i in candidates:
        room = limit - pool.spent
        if room < _MIN_COST:
            break
        if kind == _EXCHANGE:
            if not conversation_open:
                continue
            cost = message_cost(older[i])
            if cost > room:
                conversation_open = False  # never a gap: no older exchange behind this one
                continue
            pool.older.append((older[i], score))
            pool.spent += cost
            continue
        if kind == _FACT:
            opening = _opening(pool, memory_header, bool(fact_picks))
            f = facts[i]
            if f.token_count + _MIN_COST > room:  # cannot fit whatever its line: skip it before rendering it
                continue
            line, cost = data_line(memory_label(f.kind, f.source, f.created_at), f.content, f.token_count)
            if opening + cost <= room:
                fact_picks[i] = Pick(score, line, cost, fact=f, parts=fact_scores[i])
                pool.memory_tokens += opening + cost
                pool.spent += opening + cost
            continue
        opening = _opening(pool, memory_header, bool(len(pool.recalled)))
        m = recalled[i]
        if m.token_count + _MIN_COST > room:  # cannot fit whatever its line: skip it before rendering it
            continue
        line, cost = turn_line(m.role, m.content, m.token_count)
        headers = pool.recalled.header_delta(m)
        if opening + cost + headers <= room:
            pool.recalled.add(m, Pick(score, line, cost, message=m))
            pool.memory_tokens += opening + cost + headers
            pool.spent += opening + cost + headers
    pool.facts = [fact_picks[i] for i in sorted(fact_picks)]
    pool.older.reverse()
    return pool
