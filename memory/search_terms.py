"""Search terms from free text, for lexical recall (FTS5 on SQLite, tsquery on Postgres).

Words are lowercase and diacritic-folded ("Qué" -> "que", "año" -> "ano"), as FTS5's unicode61 tokenizer with
remove_diacritics folds them, and the stopword check comes after the folding, so "qué", "más" and "cuándo" are
dropped like "que", "mas" and "cuando".

Why drop stopwords: BM25 gives a word found in most messages almost no weight, yet every message holding
it must be scored. "the", "you", "que" would make a heavy user's recall cost tens of milliseconds and
change no ranking that matters. The list holds only the most frequent function words of the languages
hilo is most likely to hear (and the question words: "when", "cuándo"); anything else is searched, up to
MAX_TERMS words, whatever its frequency (memory/stems.py turns them into index terms).
"""

from __future__ import annotations

import heapq
import re
import unicodedata

#: Word tokens as FTS5's unicode61 tokenizer sees them: letters and digits; '_' and punctuation separate.
WORD = re.compile(r"[^\W_]+")
MAX_TERMS = 16
#: A longer run of letters is no word (a pasted key, a blob): neither indexed nor searched (Postgres refuses a
#: tsquery word over 2,047 bytes).
MAX_WORD = 64

_STOPWORD_TEXT = """
a about after all also am an and any are as at be because been but by can could did do does doing for
from had has have having he her here hers him his how i if in into is it its just me my no not now of
on or our ours out she so some than that the their them then there these they this those to too up us
very was we were what when where which who whom why will with would you your yours yeah yes ok okay hi
hello please thanks thank im dont its ive id
el la los las un una unos unas de del al y o que en es son por para con sin se su sus lo le les mi mis
tu tus yo te nos como pero mas más muy ya si sí no este esta esto ese esa eso hay fue ser estar está
cuando cuándo donde dónde cual cuál cuales quien quién quienes cuanto cuánto cuantos cuántos qué cómo
le la les des du de et ou que qui en est sont pour par avec sans se sa son ses ce cet cette il elle je
tu nous vous ils elles on ne pas plus mais au aux un une dans sur
der die das den dem des ein eine einen einem und oder ist sind zu mit von für auf im in nicht ich du er
sie es wir ihr wie was auch aber noch nur so
o a os as um uma de do da dos das e ou que em no na nos nas por para com sem se seu sua não sim eu você
é são foi
il lo la gli le un una di del della e o che in è sono per con non si mi ti ci io tu
"""


def fold(text: str) -> str:
    """Lowercase, diacritics removed ("Mañana, QUÉ" -> "manana, que"); ASCII text is only lowercased."""
    text = text.lower()
    if text.isascii():
        return text
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


STOPWORDS = frozenset(fold(_STOPWORD_TEXT).split())


def words(text: str) -> list[str]:
    """The folded words of `text` worth indexing or searching, in order, repeats kept: 2 to MAX_WORD characters,
    no stopword."""
    return [w for w in WORD.findall(fold(text)) if 1 < len(w) <= MAX_WORD and w not in STOPWORDS]


def search_terms(text: str, max_terms: int = MAX_TERMS) -> list[str]:
    """Distinct folded words of `text` worth searching (see `words`), in order of appearance.

    A long text keeps its `max_terms` longest words (usually the rarest; between equally long ones, the first
    seen) so a pasted page does not become a query of hundreds of terms. One pass over the text, and a heap of
    `max_terms` words: linear in its length.
    """
    found = list(dict.fromkeys(words(text)))
    if len(found) > max_terms:
        keep = set(heapq.nlargest(max_terms, found, key=len))  # = sorted(..., reverse=True)[:max_terms]
        found = [w for w in found if w in keep]
    return found
