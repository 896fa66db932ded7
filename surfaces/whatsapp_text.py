"""Pure text helpers of the WhatsApp surface: splitting replies to Twilio's size limit, and opt-out keywords.

No I/O and no twilio import here, so these are tested (and reused) on their own.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

#: Twilio refuses a WhatsApp body over 1,600 characters (counted in UTF-16 units, as its API does).
MAX_BODY_CHARS = 1600

# Whole-message keywords, compared case- and accent-insensitively, surrounding punctuation ignored.
# English ones follow Twilio's default opt-out / opt-in lists (without YES and INFO/HELP, which are
# ordinary words in a conversation with an assistant).
OPT_OUT_KEYWORDS = frozenset({
    "stop", "stopall", "unsubscribe", "cancel", "end", "quit",
    "baja", "darme de baja", "dar de baja", "parar", "cancelar", "detener", "desuscribir", "desuscribirme",
    "no mas mensajes",
})
OPT_IN_KEYWORDS = frozenset({
    "start", "unstop", "subscribe", "resume",
    "alta", "darme de alta", "dar de alta", "empezar", "comenzar", "reanudar", "suscribir", "suscribirme",
})
_SPANISH_KEYWORDS = frozenset({
    "baja", "darme de baja", "dar de baja", "parar", "cancelar", "detener", "desuscribir", "desuscribirme",
    "no mas mensajes", "alta", "darme de alta", "dar de alta", "empezar", "comenzar",
    "reanudar", "suscribir", "suscribirme",
})

_PARAGRAPH = re.compile(r"\n[ \t]*\n")
_SENTENCE = re.compile(r"[.!?…。]['\")\]]*\s|\n")
_SPACE = re.compile(r"\s")


def utf16_len(text: str) -> int:
    """Length as Twilio counts it: characters outside the Basic Multilingual Plane (most emoji) count twice."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _fit(text: str, limit: int) -> int:
    """The longest prefix length (in code points) whose UTF-16 length is at most `limit`."""
    units = 0
    for i, ch in enumerate(text):
        units += 2 if ord(ch) > 0xFFFF else 1
        if units > limit:
            return i
    return len(text)


def _last_end(pattern: re.Pattern[str], window: str, floor: int) -> int:
    """End of the last match of `pattern` in `window` that leaves at least `floor` characters before it."""
    best = -1
    for m in pattern.finditer(window):
        if m.start() >= floor:
            best = m.end()
    return best


def split_message(text: str, limit: int = MAX_BODY_CHARS) -> list[str]:
    """Split `text` into parts of at most `limit` (UTF-16 units), in order.

    Each cut prefers, within the window: a paragraph break, else a sentence end, else a space (each only if
    it leaves the part at least half full, so a part is never tiny), else it falls back to a hard cut.
    Whitespace at the cut is dropped; nothing else is lost or reordered. An empty text gives no part.
    """
    if limit < 2:
        raise ValueError("limit must be at least 2")
    parts: list[str] = []
    rest = text.strip()
    while rest:
        if utf16_len(rest) <= limit:
            parts.append(rest)
            break
        n = _fit(rest, limit)
        window = rest[:n]
        floor = n // 2
        cut = _last_end(_PARAGRAPH, window, floor)
        if cut < 0:
            cut = _last_end(_SENTENCE, window, floor)
        if cut < 0:
            cut = _last_end(_SPACE, window, 1)
        if cut <= 0:
            cut = n
            # never separate a base character from a combining mark that follows it
            while cut > 1 and unicodedata.combining(rest[cut]):
                cut -= 1
        part = rest[:cut].rstrip()
        if part:
            parts.append(part)
        rest = rest[cut:].lstrip()
    return parts


def _normalize(text: str) -> str:
    folded = unicodedata.normalize("NFKD", text.casefold())
    bare = "".join(ch for ch in folded if not unicodedata.combining(ch))
    words = re.sub(r"[^\w\s]", " ", bare).split()
    return " ".join(words)


Keyword = Literal["stop", "start"]


def keyword(text: str) -> tuple[Keyword | None, str | None]:
    """("stop" | "start" | None, language of the keyword "en" | "es" | None) for a whole message."""
    if len(text) > 40:  # a keyword is a short message on its own, never a sentence that contains one
        return None, None
    key = _normalize(text)
    lang = "es" if key in _SPANISH_KEYWORDS else "en"
    if key in OPT_OUT_KEYWORDS:
        return "stop", lang
    if key in OPT_IN_KEYWORDS:
        return "start", lang
    return None, None
