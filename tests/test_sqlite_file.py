"""A SQLite file deleted, replaced or robbed of its -wal under an open store (memory/sqlite_file.py): every
transaction after it is StoreUnavailable naming the path, no new file is created, and the same file put back lets
the store go on. tests/test_store_file_serve.py shows the same under `hilo serve`."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from kernel.types import InboundMessage
from memory.dialect_sqlite import SqliteStore
from memory.store import StoreUnavailable


def msg(n: int) -> InboundMessage:
    return InboundMessage(surface="web", sender="v1", external_id=f"e{n}", text=f"hello {n}")


@pytest.fixture
async def store(tmp_path: Path) -> SqliteStore:
    s = SqliteStore(tmp_path / "hilo.db")
    await s.open()
    assert await s.ingest(msg(0), 2) is not None
    yield s  # type: ignore[misc]
    await s.close()


@pytest.mark.parametrize("suffix", ["", "-wal"])
async def test_a_deleted_file_refuses_every_transaction_until_it_is_back(
    store: SqliteStore, tmp_path: Path, suffix: str,
) -> None:
    path = tmp_path / f"hilo.db{suffix}"
    os.rename(path, tmp_path / "away")
    with pytest.raises(StoreUnavailable, match=str(tmp_path / "hilo.db")):
        await store.ingest(msg(1), 2)
    with pytest.raises(StoreUnavailable):
        await store.probe()
    assert not path.exists()  # nothing recreated it
    os.rename(tmp_path / "away", path)
    assert await store.ingest(msg(2), 2) is not None
    await store.close()
    with closing(sqlite3.connect(tmp_path / "hilo.db")) as conn:
        assert [r[0] for r in conn.execute("SELECT external_id FROM messages ORDER BY id")] == ["e0", "e2"]


async def test_a_replaced_file_is_refused_too(store: SqliteStore, tmp_path: Path) -> None:
    other = SqliteStore(tmp_path / "other.db")
    await other.open()
    await other.close()
    os.replace(tmp_path / "other.db", tmp_path / "hilo.db")
    with pytest.raises(StoreUnavailable, match="replaced"):
        await store.ingest(msg(1), 2)
