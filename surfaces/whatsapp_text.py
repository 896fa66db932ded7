"""Pure text helpers of the WhatsApp surface: splitting replies to Twilio's size limit (surfaces.text_split),
and opt-out keywords.

No I/O and no twilio import here, so these are tested (and reused) on their own.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

from surfaces.text_split import split_text, utf16_len

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


def split_message(text: str, limit: int = MAX_BODY_CHARS) -> list[str]:
    """`text` as parts of at most `limit` UTF-16 units (as Twilio counts), in order, cut on paragraph, then
    line, then sentence, then word boundaries (surfaces.text_split). An empty text gives no part."""
    if limit < 2:
        raise ValueError("limit must be at least 2")
    return split_text(text, limit, length=utf16_len)


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
