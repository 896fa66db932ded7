"""Opt-out: a person who sends STOP (the whole message) is written to no more until they send START.

The policy lives here, the state in the store (`identities.opted_out_at`); a surface only asks `OptOut.check`
what a message does before it hands it to the pipeline (WhatsApp today: Twilio's STOP/START convention).
While opted out, nothing new is stored and nothing is sent.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

from memory.store import Store

# Whole-message keywords, compared case- and accent-insensitively, surrounding punctuation ignored.
# English ones follow Twilio's default opt-out / opt-in lists (without YES and INFO/HELP, which are
# ordinary words in a conversation with an assistant).
_OPT_OUT_ES = frozenset({
    "baja", "darme de baja", "dar de baja", "parar", "cancelar", "detener", "desuscribir", "desuscribirme",
    "no mas mensajes",
})
_OPT_IN_ES = frozenset({
    "alta", "darme de alta", "dar de alta", "empezar", "comenzar", "reanudar", "suscribir", "suscribirme",
})
OPT_OUT_KEYWORDS = frozenset({"stop", "stopall", "unsubscribe", "cancel", "end", "quit"}) | _OPT_OUT_ES
OPT_IN_KEYWORDS = frozenset({"start", "unstop", "subscribe", "resume"}) | _OPT_IN_ES
_SPANISH_KEYWORDS = _OPT_OUT_ES | _OPT_IN_ES

Keyword = Literal["stop", "start"]


def _normalize(text: str) -> str:
    folded = unicodedata.normalize("NFKD", text.casefold())
    bare = "".join(ch for ch in folded if not unicodedata.combining(ch))
    words = re.sub(r"[^\w\s]", " ", bare).split()
    return " ".join(words)


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


@dataclass(frozen=True, slots=True)
class Step:
    """What a message did to the sender's opt-out. action:
    opted_out   STOP: the identity is opted out now (no reply: the provider confirms it)
    opted_in    START while opted out: replies resume (the surface confirms, in `lang`)
    silenced    anything else while opted out: dropped, neither stored nor answered
    none        not opted out and no STOP: the message is an ordinary one (START included)"""

    action: Literal["opted_out", "opted_in", "silenced", "none"]
    user_id: int | None = None
    lang: str | None = None


class OptOut:
    def __init__(self, store: Store) -> None:
        self._store = store

    async def check(self, surface: str, sender: str, text: str) -> Step:
        """Apply `text`'s effect on the opt-out of (surface, sender). StoreError: nothing changed."""
        word, lang = keyword(text)
        if word == "stop":
            return Step("opted_out", await self._store.set_opt_out(surface, sender, True), lang)
        if not await self._store.is_opted_out(surface, sender):
            return Step("none")
        if word != "start":
            return Step("silenced")
        return Step("opted_in", await self._store.set_opt_out(surface, sender, False), lang)
