"""The text the turn benchmarks seed and send: everyday English and Spanish lines (bench/memory_filler.py's
templates: requests and replies about work, family, food, travel...), one person's history as ImportRows, and
`import_all`, how every bench imports rows (through the store's public API, as `hilo import` does)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from bench.memory_filler import assistant_line, user_line
from kernel import tokens
from memory.store import ImportRow

LANGS = ("en", "es")
SURFACES = ("telegram", "whatsapp", "web")


def sentence(rng: random.Random, lang: str | None = None, role: str = "user") -> str:
    """One everyday line a person (or, with role="assistant", the assistant) writes, in `lang` (drawn when None)."""
    lang = lang or rng.choice(LANGS)
    return user_line(lang, rng) if role == "user" else assistant_line(lang, rng)


def language_of(k: int) -> str:
    """The language of the k-th seeded person: English and Spanish alternate."""
    return LANGS[k % 2]


def seed_rows(handle: str, n: int, now: datetime, rng: random.Random, lang: str = "en",
              days: int = 60) -> list[ImportRow]:
    """`n` messages of `handle` over the `days` before `now` (the newest ten minutes before it, so the last 24 h
    hold some), alternating user and assistant, on telegram, whatsapp and web (web in conversations of 200), in
    `lang` with one session in five in the other language."""
    rows = []
    other = LANGS[1 - LANGS.index(lang)]
    start = now - timedelta(days=days)
    step = (days * 86400 - 600) / max(1, n)
    for i in range(n):
        surface = SURFACES[(i // 20) % 3]  # sessions of 20 messages on one surface
        said = other if (i // 20) % 5 == 4 else lang
        text = sentence(rng, said, "user" if i % 2 == 0 else "assistant")
        rows.append(ImportRow(
            user=handle, surface=surface, role="user" if i % 2 == 0 else "assistant", content=text,
            created_at=start + timedelta(seconds=i * step), token_count=tokens.count(text),
            external_id=f"{handle}-{i}", conversation=f"web-{i // 200}" if surface == "web" else None,
        ))
    return rows


async def import_all(store: Any, rows: Sequence[ImportRow]) -> None:
    """Import `rows` through the store's public API in batches of 5,000, as `hilo import` does."""
    for i in range(0, len(rows), 5000):
        await store.import_rows(rows[i:i + 5000])
