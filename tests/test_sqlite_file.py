"""A SQLite file deleted, replaced or robbed of its -wal under an open store (memory/sqlite_file.py): every
transaction after it is StoreUnavailable naming the path, no new file is created, and the same file put back lets
the store go on. tests/test_store_file_serve.py shows the same under `hilo serve`."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
import structlog

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


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The umask of a login shell, under which PM2 or a terminal starts hilo (systemd's unit sets 0077)."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


@pytest.mark.parametrize("through_a_symlink", [False, True], ids=["a path", "a symlink to a file not there yet"])
async def test_a_new_database_and_its_wal_and_shm_are_private_to_their_owner(
        tmp_path: Path, umask_022: None, through_a_symlink: bool) -> None:
    """Every person's messages are in the file: like the .secret, the journal and the exports, it is 0600 (SQLite
    made it 0644 less the umask, readable by every local user, and gave its -wal and -shm the same mode)."""
    path = tmp_path / "hilo.db"
    if through_a_symlink:  # SQLite creates the file the link names
        (tmp_path / "link.db").symlink_to(path)
    store = SqliteStore(tmp_path / ("link.db" if through_a_symlink else "hilo.db"))
    await store.open()
    try:
        assert await store.ingest(msg(0), 2) is not None
        modes = {p.name: oct(p.stat().st_mode & 0o777) for p in tmp_path.iterdir() if p.name.startswith("hilo.db")}
    finally:
        await store.close()
    assert modes == {"hilo.db": "0o600", "hilo.db-wal": "0o600", "hilo.db-shm": "0o600"}


async def test_an_existing_database_others_can_read_is_left_as_it_is_and_said_once(
        tmp_path: Path, umask_022: None) -> None:
    """A file an earlier hilo made 0644, or that its operator opened to a group: its mode is theirs to change, so
    the store says what it found and how to close it, once per open, and changes nothing."""
    path = tmp_path / "hilo.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE t (x)")
    os.chmod(path, 0o640)
    with structlog.testing.capture_logs() as logs:
        store = SqliteStore(path)
        await store.open()
        try:
            assert await store.ingest(msg(0), 2) is not None
        finally:
            await store.close()
    said = [e for e in logs if e["event"] == "store.file_readable"]
    assert [(s["log_level"], s["path"], s["mode"]) for s in said] == [("warning", str(path), "0640")]
    assert f"chmod 600 {path}" in said[0]["fix"]
    assert path.stat().st_mode & 0o777 == 0o640
