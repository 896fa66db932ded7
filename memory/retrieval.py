"""Scoring of recalled messages: a pure function of what the store gathered (no I/O).

The store (memory/sql_recall.py) gathers, for one question, over the person's whole history:
- lexical hits: messages whose index terms (memory/stems.py) meet the question's, with their BM25 score;
- episode hits: episodes (one conversation's run of messages with no gap over an hour) whose whole text meets
  the question's terms, with their BM25 score, and every message of the best of them;
- the neighbours (the message before and after, in the conversation) of every lexical hit;
- optionally each candidate's cosine with the question (the vector helper: message id -> cosine).

Each candidate's fused score, every term on a common scale (z-scores over the candidates):
    base      = z(bm25)
    lexical   = base + EPISODE * z(episode bm25) + NEIGHBOUR * max(base of the message before, after)
                + DATE * [the question names the month or year the message was written in]
    fused     = lexical                                           (no vectors)
              = 0.4 * z(lexical) + 0.6 * z(cosine)                (with vectors: VECTOR_SHARE)
              + TENSE * cue * z(date)                             (recency: the question asks for now / before)
where cue is +1 when the question asks what holds now ("now", "currently", "these days", "ahora", "actualmente")
and -1 when it asks what held before ("before", "previously", "used to", "antes", "anterior"; before wins: "where
did I work before my current job?"), so of two messages about the same thing the newer, or the older, comes
first (measured: bench/recall_lab.py, seed 11, +emb at 2,000 tokens 0.586 / 0.637 -> 0.604 / 0.655 EN / ES; a
recency term without a cue, 0.1 * z(date), lost: 0.551 / 0.620). The cosine is every candidate's own (the vector
hits', and the lexical, neighbour and episode candidates' too: memory/sql_recall.py).
The lexical composite is z-scored again before it meets the cosine, so the episode and neighbour terms (which
only the lexical side has) do not outweigh the vector: measured on bench/memory_bench.py, 0.525 / 0.592 (EN / ES
at 2,000 tokens) when the cosine entered the base beside z(bm25), 0.551 / 0.618 this way. The shares: with
every candidate's cosine, the tense cue and a recall limit up to 128 (bench/recall_lab.py, EN / ES at
500/1,000/2,000/4,000), seed 11: 0.5 0.463/0.499/0.604/0.722, 0.534/0.566/0.655/0.727; 0.6 0.463/0.534/0.621/0.727,
0.537/0.566/0.659/0.740; 0.7 0.481/0.529/0.643/0.718, 0.528/0.564/0.659/0.731; seed 23 (held out): 0.5
0.475/0.506/0.585/0.703, 0.487/0.507/0.583/0.689; 0.6 0.480/0.523/0.620/0.712, 0.490/0.512/0.602/0.690; 0.7
0.477/0.523/0.633/0.716, 0.474/0.534/0.594/0.681. 0.6 is at or above 0.5 in every cell of both seeds.
z(x) = (x - mean) / stdev over the hits (a candidate that is not a hit scores x = 0: below every hit). A
candidate with no neighbour among the candidates, or no episode hit, takes the floor of that term (the z of 0).
The weights are the issue's starting points, measured on bench/memory_bench.py (docs/memory-benchmark.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from memory.search_terms import fold

#: The weights of the fused score (docs/memory-benchmark.md: measured one by one).
EPISODE = 1.0
NEIGHBOUR = 0.3
DATE = 1.0
#: With vectors, fused = (1 - VECTOR_SHARE) * z(lexical composite) + VECTOR_SHARE * z(cosine).
VECTOR_SHARE = 0.6
#: When the question asks for the present ("now", "ahora") or the past ("before", "antes"): the weight of the
#: candidate's z(date) (newer higher), signed by the cue.
TENSE = 0.5

#: Words that ask for what holds now / what held before (folded: no accents). "before" wins when both come
#: ("where did I work before my current job?").
NOW_CUES = frozenset(
    "now currently current nowadays presently latest newest ahora actualmente actual actuales".split())
NOW_PHRASES = ("these days", "at the moment", "right now", "estos dias", "en este momento", "hoy en dia",
               "a dia de hoy")
BEFORE_CUES = frozenset(
    "before previously previous former formerly earlier originally antes anterior anteriores anteriormente "
    "previo previa antiguo antigua solia solias".split())
BEFORE_PHRASES = ("used to", "did i use to", "at first", "in the past", "al principio", "en el pasado")

MONTHS = {
    **{m: i for i, m in enumerate(("january", "february", "march", "april", "may", "june", "july", "august",
                                   "september", "october", "november", "december"), 1)},
    **{m: i for i, m in enumerate(("enero", "febrero", "marzo", "abril", "mayo", "junio", "julio", "agosto",
                                   "septiembre", "octubre", "noviembre", "diciembre"), 1)},
    "setiembre": 9, "sept": 9,
}
_YEAR = re.compile(r"\b(19[7-9]\d|20\d\d)\b")
_WORD = re.compile(r"[a-z]+")


@dataclass(slots=True)
class Candidate:
    """A message the store gathered. `bm25`: its lexical score (0: not a lexical hit); `episode_id` and the
    episode's score come separately; `prev_id` / `next_id`: its neighbours in the conversation, when known.
    Not frozen: a turn builds some 300 of them, and a frozen dataclass's __init__ costs four times a plain one's
    (0.73 against 0.18 us)."""

    message_id: int
    created_at: datetime
    bm25: float = 0.0
    episode_id: int | None = None
    prev_id: int | None = None
    next_id: int | None = None


@dataclass(frozen=True, slots=True)
class DateCue:
    """The month (1-12) and/or year a question names ("in March", "en marzo de 2025", "in 2024")."""

    month: int | None = None
    year: int | None = None

    def matches(self, moment: datetime) -> bool:
        if self.month is None and self.year is None:
            return False
        return (self.month is None or moment.month == self.month) and (self.year is None or moment.year == self.year)


def date_cue(question: str) -> DateCue:
    """The month and year named in `question`, English or Spanish ("may" only with a year or "in May": it is
    also a verb)."""
    text = fold(question)
    year_match = _YEAR.search(text)
    year = int(year_match.group(1)) if year_match else None
    month = None
    words = _WORD.findall(text)
    for i, w in enumerate(words):
        if w in MONTHS:
            if w == "may" and year is None and (i == 0 or words[i - 1] not in ("in", "of", "since", "during")):
                continue
            month = MONTHS[w]
            break
    return DateCue(month, year)


def tense_cue(question: str) -> int:
    """+1 when the question asks what holds now, -1 when it asks what held before (before wins), else 0."""
    text = " ".join(_WORD.findall(fold(question)))
    words = set(text.split())
    if words & BEFORE_CUES or any(f" {p} " in f" {text} " for p in BEFORE_PHRASES):
        return -1
    if words & NOW_CUES or any(f" {p} " in f" {text} " for p in NOW_PHRASES):
        return 1
    return 0


def _stats(xs: Sequence[float]) -> tuple[float, float]:
    """(mean, stdev) of `xs`, the stdev never ~0 (then the mean's size, or 1.0)."""
    mean = math.fsum(xs) / len(xs)
    # plain floats: statistics.pstdev's exact Fractions cost about 1 ms a question for no ranking difference
    sd = math.sqrt(math.fsum([(x - mean) ** 2 for x in xs]) / len(xs)) if len(xs) > 1 else 0.0
    if sd <= 1e-12:
        sd = abs(mean) or 1.0
    return mean, sd


def _z(values: Mapping[int, float]) -> tuple[dict[int, float], float]:
    """(z-score of each value, the z of 0: the floor for what has no value)."""
    if not values:
        return {}, 0.0
    mean, sd = _stats(list(values.values()))
    return {k: (v - mean) / sd for k, v in values.items()}, (0.0 - mean) / sd


def _zs(xs: list[float]) -> list[float]:
    """The z-score of each of `xs` (not empty)."""
    mean, sd = _stats(xs)
    return [(x - mean) / sd for x in xs]


#: A candidate's components, in the order `Fused.parts` names them.
PARTS = ("bm25", "lexical", "episode", "neighbour", "date")


@dataclass(frozen=True, slots=True)
class Fused:
    """Every candidate's terms as plain floats, one list per term, in the candidates' order: the fused score of
    hundreds of candidates costs no dict each, and the components of the few returned are built as dicts (`parts`):
    a question's 450 candidates with vectors, the best 40 returned, 1.63 -> 1.08 ms of CPU on a 2-core Xeon (300
    without vectors: 0.77 -> 0.55). `vector` and `recency` are empty when not used."""

    ids: list[int]
    terms: tuple[list[float], ...]  # PARTS' terms, in that order
    vector: list[float]
    recency: list[float]
    fused: list[float]

    def ranked(self) -> list[int]:
        """Positions, best fused score first (`best_first`)."""
        return best_first(self.fused, self.ids)

    def parts(self, k: int) -> dict[str, float]:
        """The components of the candidate at position `k`: {"bm25", "lexical", "episode", "neighbour", "date",
        ["vector",] ["recency",] "fused"}."""
        out = {name: term[k] for name, term in zip(PARTS, self.terms, strict=True)}
        if self.vector:
            out["vector"] = self.vector[k]
        if self.recency:
            out["recency"] = self.recency[k]
        out["fused"] = self.fused[k]
        return out

    def best(self, limit: int) -> dict[int, dict[str, float]]:
        """The best `limit` candidates' components, best first (message id -> parts)."""
        return {self.ids[k]: self.parts(k) for k in self.ranked()[:limit]}


def fuse(candidates: Sequence[Candidate], episode_scores: Mapping[int, float], question: str,
         cosines: Mapping[int, float] | None = None, *, episode: float | None = None,
         neighbour: float | None = None, date: float | None = None,
         vector_share: float | None = None, tense: float | None = None) -> Fused:
    """Each candidate's terms and fused score (the module's docstring); `cosines`: message id -> cosine with the
    question (None or empty: lexical only). Not empty `candidates`."""
    episode = EPISODE if episode is None else episode
    neighbour = NEIGHBOUR if neighbour is None else neighbour
    date = DATE if date is None else date
    vector_share = VECTOR_SHARE if vector_share is None else vector_share
    when = (TENSE if tense is None else tense) * tense_cue(question)
    ids = [c.message_id for c in candidates]
    bm25 = [c.bm25 for c in candidates]
    zl, floor_l = _z({c.message_id: c.bm25 for c in candidates if c.bm25 > 0})
    ze, floor_e = _z({e: s for e, s in episode_scores.items() if s > 0})
    base = {i: zl.get(i, floor_l) for i in ids}
    lexical = [base[i] for i in ids]
    floor_b = min(lexical)
    episodes = [episode * (ze.get(c.episode_id, floor_e) if c.episode_id is not None else floor_e) for c in candidates]
    near: list[float] = []
    for c in candidates:
        p = base.get(c.prev_id) if c.prev_id is not None else None
        n = base.get(c.next_id) if c.next_id is not None else None
        best = p if n is None else n if p is None else max(p, n)
        near.append(neighbour * (best if best is not None else floor_b))
    cue = date_cue(question) if date else DateCue()
    named = cue.month is not None or cue.year is not None
    dates = [date * float(cue.matches(c.created_at)) for c in candidates] if named else [0.0] * len(ids)
    fused = [lexical[k] + episodes[k] + near[k] + dates[k] for k in range(len(ids))]
    vector: list[float] = []
    if cosines:
        # the lexical composite and the cosine on one footing: each z-scored over the candidates, then shared
        zc, _ = _z({i: cosines[i] for i in ids if i in cosines})
        floor_c = min(zc.values(), default=0.0)
        vector = [cosines.get(i, 0.0) for i in ids]
        fused = [(1 - vector_share) * f + vector_share * zc.get(i, floor_c)
                 for f, i in zip(_zs(fused), ids, strict=True)]
    recency: list[float] = []
    if when:
        recency = [when * z for z in _zs([c.created_at.timestamp() for c in candidates])]
        fused = [f + r for f, r in zip(fused, recency, strict=True)]
    return Fused(ids, (bm25, lexical, episodes, near, dates), vector, recency, fused)


def score(candidates: Sequence[Candidate], episode_scores: Mapping[int, float], question: str,
          cosines: Mapping[int, float] | None = None, *, episode: float | None = None,
          neighbour: float | None = None, date: float | None = None,
          vector_share: float | None = None, tense: float | None = None) -> dict[int, dict[str, float]]:
    """Every candidate's components and fused score (`fuse`, `Fused.parts`): {message_id: {"bm25", "lexical",
    "episode", "neighbour", "date", ["vector",] ["recency",] "fused"}} ("bm25" is the raw score, the others the
    terms as they were added)."""
    if not candidates:
        return {}
    fused = fuse(candidates, episode_scores, question, cosines, episode=episode, neighbour=neighbour, date=date,
                 vector_share=vector_share, tense=tense)
    return {i: fused.parts(k) for k, i in enumerate(fused.ids)}


def best(candidates: Sequence[Candidate], episode_scores: Mapping[int, float], question: str,
         cosines: Mapping[int, float] | None, limit: int) -> dict[int, dict[str, float]]:
    """The best `limit` candidates' components (`score`'s), best first: what recall returns."""
    return fuse(candidates, episode_scores, question, cosines).best(limit) if candidates else {}


def best_first(fused: Sequence[float], ids: Sequence[int]) -> list[int]:
    """The positions of candidates `ids` with scores `fused`, best fused score first (ties: the newer message, the
    higher id, first): recall's one order."""
    return [k for _, _, k in sorted(zip([-f for f in fused], [-i for i in ids], range(len(ids)), strict=True))]


def ranked(scores: Mapping[int, Mapping[str, float]]) -> list[int]:
    """Message ids of `score`'s result, best first (`best_first`)."""
    ids = list(scores)
    return [ids[k] for k in best_first([scores[i]["fused"] for i in ids], ids)]


def pool_score(fused: float, best: float) -> float:
    """A fused score on the pool's scale (memory/context_pool.py): the best recalled message scores 1.0, one
    z-unit below it 0.5, two 0.33..., as the pool's rank scores of the other kinds fall."""
    return 1.0 / (1.0 + max(0.0, best - fused))
