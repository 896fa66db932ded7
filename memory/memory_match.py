"""Lexical (and vector) matching of memories, pure: their index terms, near-duplicates, the best match of words.

Terms: `memory_terms`, the English and Spanish stems of a memory's words (memory/stems.py, as recalled messages
are indexed), so that "hike" meets "hiking" and "senderista" meets "senderismo". A memory's terms are stored with
it (`memories.terms`); rows stored before they were stems (migration 0018 empties them) get theirs on read until
memory/reindex.py has stored them. A question, or the words of `/forget <words>`, is `query_words`: each of its
words with its stems, and a word is named when a memory holds any of them (`covered`).

Near-duplicates (merged by `Store.add_memory`): the same kind and a similarity (Jaccard) of their sets of words
of at least `MERGE_LEXICAL`, or, when both have a vector of the same embedder, a cosine of at least `MERGE_COSINE`.
Every word counts there, stopwords, numbers and all ("room 12" is not "room 14"; "likes tea" is not "does not
like tea"): merging is for the same thing said again, not for things about the same subject.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence

from memory.search_terms import WORD, search_terms
from memory.stems import stems

#: Term-set similarity (Jaccard) from which two memories of one kind are the same memory.
MERGE_LEXICAL = 0.75
#: Cosine similarity of their vectors (same embedder) from which two memories of one kind are the same memory.
MERGE_COSINE = 0.92
#: `/forget <words>`: a runner-up scoring at least this share of the best match makes the choice ambiguous.
AMBIGUOUS_SHARE = 0.8
#: Terms kept per memory (a memory is a sentence or two; a pasted page keeps its longest words).
MAX_MEMORY_TERMS = 32


def memory_terms(text: str) -> tuple[str, ...]:
    """The index terms of a memory: the distinct stems of its words (MAX_MEMORY_TERMS words at most)."""
    return tuple(dict.fromkeys(stems(search_terms(text, MAX_MEMORY_TERMS))))


def query_words(text: str) -> tuple[tuple[str, ...], ...]:
    """The words of a question (or of `/forget <words>`), each as its stems."""
    return tuple(tuple(stems([w])) for w in search_terms(text, MAX_MEMORY_TERMS))


def flat(query: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """Every stem of `query_words`, once."""
    return tuple(dict.fromkeys(t for word in query for t in word))


def covered(query: Sequence[Sequence[str]], terms: Sequence[str]) -> float:
    """The share of the query's words a memory names (any of a word's stems among its terms), in [0, 1]."""
    if not query:
        return 0.0
    held = set(terms)
    return sum(1 for word in query if not held.isdisjoint(word)) / len(query)


def words(text: str) -> frozenset[str]:
    """Every word of `text`, lowercase: what near-duplicates are compared by."""
    return frozenset(WORD.findall(text.lower()))


def jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    sa, sb = set(a), set(b)
    if not sa or not sb:
        return 0.0
    return len(sa & sb) / len(sa | sb)


def overlap(query: Sequence[str], terms: Sequence[str]) -> float:
    """How much of `query`'s terms `terms` hold, in [0, 1] (0 when the query has no terms)."""
    if not query:
        return 0.0
    held = set(terms)
    return sum(1 for t in query if t in held) / len(query)


def pack(vector: Sequence[float]) -> bytes:
    """A vector as float32 bytes (the `memories.vector` column)."""
    return array("f", vector).tobytes()


def unpack(blob: bytes | None) -> array[float] | None:
    if not blob:
        return None
    values = array("f")
    values.frombytes(bytes(blob))
    return values


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) != len(b) or not a:
        return 0.0
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def cosines(query: Sequence[float], blobs: Sequence[tuple[int, bytes | None]]) -> dict[int, float]:
    """id -> cosine of `query` and each stored vector (`pack`ed) of its size; ids with none are left out."""
    import numpy as np

    q = np.asarray(query, dtype=np.float32)
    found = [(i, np.frombuffer(bytes(b), dtype=np.float32)) for i, b in blobs if b]
    found = [(i, v) for i, v in found if v.shape == q.shape]
    norm = float(np.linalg.norm(q))
    if not found or not norm:
        return {}
    matrix = np.stack([v for _, v in found])
    norms = np.linalg.norm(matrix, axis=1)
    sims = (matrix @ q) / np.where(norms > 0, norms * norm, 1.0)
    return {i: float(s) for (i, _), s in zip(found, sims, strict=True)}


def best_matches(words: str, candidates: Sequence[tuple[int, Sequence[str]]]) -> list[int]:
    """`/forget <words>`: the ids of the memories the words name, best first. One id: that memory; several: the
    best ones are too close to choose between (a runner-up within AMBIGUOUS_SHARE of the best); none: no match.
    A memory scores the share of the words' terms it holds, plus a little for the share of its own terms named
    (so that "acme" picks "works at Acme" over a longer memory that also names Acme)."""
    query = query_words(words)
    stemmed = flat(query)
    scored = []
    for memory_id, terms in candidates:
        hits = covered(query, terms)
        if hits > 0:
            scored.append((hits + 0.1 * overlap(terms, stemmed), memory_id))
    if not scored:
        return []
    scored.sort(key=lambda s: (-s[0], -s[1]))
    best = scored[0][0]
    return [memory_id for score, memory_id in scored if score >= best * AMBIGUOUS_SHARE]
