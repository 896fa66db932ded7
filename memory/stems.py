"""Index terms: the one function that turns text into what lexical recall indexes and searches, for both
dialects (SQLite FTS5 and Postgres tsvector index the same stored terms, so both rank the same terms).

A word (memory/search_terms.py `words`: lowercase, diacritic-folded, no stopword) becomes its Snowball stems,
English AND Spanish (PyStemmer), since a person's language is not known per message: "hiking" -> "hike" (en) and
"hiking" (es); "caminatas" -> "caminata" (en) and "caminat" (es). Both stems are indexed (one when they agree), and
a query searches both stems of each of its words, so "hike" meets "hiking" through the English stem and
"caminata" meets "caminatas" through either.

Stems are computed in Python when a message is stored (ingest, finish_turn, notices, `hilo import`) into
`messages.terms`; rows stored before migration 0013 get theirs from `memory.reindex` (at `hilo migrate` / open),
and until then their content is indexed as it is.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import Stemmer

from memory.search_terms import search_terms, words

LANGUAGES = ("english", "spanish")
_local = threading.local()


def _stemmers() -> list[Stemmer.Stemmer]:
    # a Stemmer object is not safe to share between threads (SQLite's worker, the event loop, import threads)
    found: list[Stemmer.Stemmer] | None = getattr(_local, "stemmers", None)
    if found is None:
        found = _local.stemmers = [Stemmer.Stemmer(lang, 50_000) for lang in LANGUAGES]
    return found


#: word -> its stems (per thread, like the stemmers; cleared when full): everyday words repeat.
CACHE_MAX = 100_000


def stems(word_list: Iterable[str]) -> list[str]:
    """The stems of folded words, each word's English then Spanish stem (once when they agree), in order."""
    cache: dict[str, tuple[str, ...]] | None = getattr(_local, "cache", None)
    if cache is None or len(cache) > CACHE_MAX:
        cache = _local.cache = {}
    out: list[str] = []
    for word in word_list:
        found = cache.get(word)
        if found is None:
            en, es = (s.stemWord(word) for s in _stemmers())
            found = cache[word] = (en,) if en == es else (en, es)
        out.extend(found)
    return out


def index_terms(text: str) -> str:
    """What a message indexes: the stems of its words, space-separated, repeats kept (BM25 counts them)."""
    return " ".join(stems(words(text)))


def query_terms(text: str) -> list[str]:
    """What a question searches: the distinct stems of its search terms (up to 16 words, no frequency cut)."""
    return list(dict.fromkeys(stems(search_terms(text))))
