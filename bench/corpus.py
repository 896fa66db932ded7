"""The text bench/context_bench.py seeds and sends: Zipf-like sentences, and one person's history as ImportRows;
and `import_all`, how every bench imports rows (through the store's public API, as `hilo import` does)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from kernel import tokens
from memory.store import ImportRow

TOPICS = ("valencia dog rufo paella meeting tomorrow invoice order refund shipping password garden bike "
          "train doctor appointment birthday gift coffee weather beach project deadline report football guitar").split()
_SYL = ("ka", "lo", "mi", "ra", "te", "so", "nu", "pe", "di", "ga", "vo", "ze", "li", "ba", "tu", "ne")
#: A Zipf-like vocabulary (3,000 words; word k drawn with weight 1/k), like natural text: a few words are in
#: most messages, most words in few.
VOCAB = TOPICS + ["".join(random.Random(k).choice(_SYL) for _ in range(3)) + str(k) for k in range(3000)]
WEIGHTS = [1.0 / (k + 1) for k in range(len(VOCAB))]


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choices(VOCAB, WEIGHTS, k=rng.randint(6, 30))).capitalize() + "."


def seed_rows(handle: str, n: int, now: datetime, rng: random.Random) -> list[ImportRow]:
    rows = []
    for i in range(n):
        surface = ("telegram", "whatsapp", "web")[i % 3]
        created = now - timedelta(days=60) + timedelta(seconds=i * (60 * 86400 / n))
        text = sentence(rng)
        rows.append(ImportRow(
            user=handle, surface=surface, role="user" if i % 2 == 0 else "assistant", content=text,
            created_at=created, token_count=tokens.count(text), external_id=f"{handle}-{i}",
            conversation=f"web-{i // 200}" if surface == "web" else None,
        ))
    return rows


async def import_all(store: Any, rows: Sequence[ImportRow]) -> None:
    """Import `rows` through the store's public API in batches of 5,000, as `hilo import` does."""
    for i in range(0, len(rows), 5000):
        await store.import_rows(rows[i:i + 5000])
