"""Search terms from free text, for lexical recall (FTS5 on SQLite, tsquery on Postgres).

Why drop stopwords: BM25 gives a word found in most messages almost no weight, yet every message holding
it must be scored. "the", "you", "que" would make a heavy user's recall cost tens of milliseconds and
change no ranking that matters. The list holds only the most frequent function words of the languages
hilo is most likely to hear; anything else is searched.
"""

from __future__ import annotations

import heapq
import re
import time
from collections.abc import Awaitable, Callable

#: Word tokens as FTS5's unicode61 tokenizer sees them: letters and digits; '_' and punctuation separate.
WORD = re.compile(r"[^\W_]+")
MAX_TERMS = 16

_STOPWORD_TEXT = """
a about after all also am an and any are as at be because been but by can could did do does doing for
from had has have having he her here hers him his how i if in into is it its just me my no not now of
on or our ours out she so some than that the their them then there these they this those to too up us
very was we were what when where which who whom why will with would you your yours yeah yes ok okay hi
hello please thanks thank im dont its ive id
el la los las un una unos unas de del al y o que en es son por para con sin se su sus lo le les mi mis
tu tus yo te nos como pero mas más muy ya si sí no este esta esto ese esa eso hay fue ser estar está
le la les des du de et ou que qui en est sont pour par avec sans se sa son ses ce cet cette il elle je
tu nous vous ils elles on ne pas plus mais au aux un une dans sur
der die das den dem des ein eine einen einem und oder ist sind zu mit von für auf im in nicht ich du er
sie es wir ihr wie was auch aber noch nur so
o a os as um uma de do da dos das e ou que em no na nos nas por para com sem se seu sua não sim eu você
é são foi
il lo la gli le un una di del della e o che in è sono per con non si mi ti ci io tu
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def search_terms(text: str, max_terms: int = MAX_TERMS) -> list[str]:
    """Distinct lowercase words of `text` worth searching, in order of appearance.

    Drops one-character words and stopwords. A long text keeps its `max_terms` longest words (usually
    the rarest; between equally long ones, the first seen) so a pasted page does not become a query of
    hundreds of terms. One pass over the text, and a heap of `max_terms` words: linear in its length.
    """
    words: list[str] = []
    seen: set[str] = set()
    for word in WORD.findall(text.lower()):
        if len(word) > 1 and word not in seen and word not in STOPWORDS:
            seen.add(word)
            words.append(word)
    if len(words) > max_terms:
        keep = set(heapq.nlargest(max_terms, words, key=len))  # = sorted(..., reverse=True)[:max_terms]
        words = [w for w in words if w in keep]
    return words


#: A term found in more than this share of all messages (and at least 50) is not searched: its BM25 weight is
#: near zero, and scoring every row that holds it is what makes a search slow.
COMMON_TERM_SHARE = 0.05
#: At most this many terms, the rarest, are searched.
MAX_SEARCHED_TERMS = 8
#: How long a term's frequency is trusted (seconds): it changes slowly, and a stale one only shifts a weight.
DF_TTL_S = 600.0
DF_CACHE_MAX = 50_000


def rarest(words: list[str], freq: dict[str, float], total: float) -> list[str]:
    """The words worth searching, rarest first: in at least one message (`freq`) and not too common."""
    limit = max(50.0, total * COMMON_TERM_SHARE)
    return sorted((w for w in words if 0 < freq.get(w, 0) <= limit), key=lambda w: freq[w])[:MAX_SEARCHED_TERMS]


#: lookup(terms) -> (the frequency of each term that some message holds, the number of messages)
Lookup = Callable[[list[str]], Awaitable[tuple[dict[str, float], float]]]


async def selective(text: str, cache: dict[str, tuple[float, float]], lookup: Lookup) -> list[str]:
    """The search terms of `text` worth a lexical search, rarest first (see rarest).

    Frequencies are cached in `cache` (term -> (frequency, monotonic expiry)) for DF_TTL_S; the dialect's
    `lookup` reads the others. A term it does not return matches nothing: it is dropped and not cached, so a new
    word is found at once."""
    words = search_terms(text)
    if not words:
        return []
    now = time.monotonic()
    freq = {w: hit[0] for w in words if (hit := cache.get(w)) is not None and hit[1] > now}
    if len(cache) > DF_CACHE_MAX:
        cache.clear()
    found, total = await lookup([w for w in words if w not in freq])
    for term, n in found.items():
        freq[term] = n
        cache[term] = (n, now + DF_TTL_S)
    return rarest(words, freq, total)
