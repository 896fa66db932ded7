"""Real SQLite write failures without mocks: "database or disk is full" (the store's own connection may not grow
the file past its size now, so SQLite itself refuses the next write that needs a new page) and "attempt to write a
readonly database" (PRAGMA query_only). No mock, no full filesystem, no remount."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

#: A text whose row and index entries need new pages (a page holds 4096 bytes).
PAGE_SIZED_TEXT = " ".join(f"w{i}" for i in range(1000))[:3990]


@asynccontextmanager
async def disk_full(store: Any) -> AsyncIterator[None]:
    """While inside, every write to `store` (a SqliteStore) that needs a page fails as on a full disk: the file's
    free pages are given back first (VACUUM), then it may not grow."""

    def cap() -> None:
        # free pages inside the file (a migration dropped a table) take writes without growing it: none left
        if store._conn.execute("PRAGMA freelist_count").fetchone()[0]:
            store._conn.execute("VACUUM")
        pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
        store._conn.execute(f"PRAGMA max_page_count = {pages}")

    await store._call(cap)
    try:
        yield
    finally:
        await store._call(lambda: store._conn.execute("PRAGMA max_page_count = 1073741823"))


@asynccontextmanager
async def read_only(store: Any) -> AsyncIterator[None]:
    """While inside, every write to `store` (a SqliteStore) fails as on a read-only file or mount: SQLite's own
    "attempt to write a readonly database" (PRAGMA query_only on the store's connection)."""
    await store._call(lambda: store._conn.execute("PRAGMA query_only = ON"))
    try:
        yield
    finally:
        await store._call(lambda: store._conn.execute("PRAGMA query_only = OFF"))
