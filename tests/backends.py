"""Every store backend the contract suites run on, and a clock the tests can move.

conftest.py turns BACKENDS into the `backend` fixture (one test per backend: `test_x[sqlite]`,
`test_x[postgres]`) and the `store` fixture on it, so any suite that asks for `store` (or `backend`) runs on
both. Tests talk to the `Store` Protocol; what a test must check underneath (rows left after `forget`, the
full-text index, recorded migrations, a write that fails as a full disk would) goes through the backend's small
adapter here. Adding a backend is adding one adapter class to BACKENDS: no test changes.

Postgres is the session's real embedded server (tests/fakes/postgres.py, a plugin of conftest.py, imported
here only when used so that pytest can load it as a plugin first): one fresh database per test, dropped after it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from memory import sqlite_fts
from memory.open import open_store
from memory.sqlite_terms import term_query
from memory.store import Store

TABLES = ("users", "identities", "conversations", "messages", "model_calls", "memories", "message_vectors")


class TestClock:
    """The store's "now": the real time plus an offset that `advance` moves forward. Time still flows (so a
    store behaves as it would in production), and a test jumps past a code's expiry or a lockout's end instead
    of editing rows by hand."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


class Backend(Protocol):
    """How a suite makes stores on one database and looks underneath them."""

    name: str
    url: str

    def make(self) -> Store:
        """A new store (unopened) on the backend's database, on the backend's clock."""
        ...

    def counts(self, user_id: int) -> dict[str, int]: ...
    def count(self, table: str) -> int: ...
    def select(self, sql: str) -> list[tuple[Any, ...]]:
        """The rows of a parameterless SELECT, as tuples."""
        ...
    def fts_hits(self, word: str) -> list[int]: ...
    def migrations(self) -> list[str]: ...

    def reset(self) -> None:
        """Back to a blank database (no store may be open on it): what a fresh database would be, cheaper."""
        ...

    def fail_replies(self, why: str) -> None:
        """From now on every insert of an assistant message fails in the database with `why` (as a full disk
        or a lost connection would make the reply's write fail)."""
        ...


class SqliteBackend:
    name = "sqlite"

    def __init__(self, tmp_path: Path, clock: Callable[[], datetime]) -> None:
        self.path = tmp_path / "hilo.db"
        self.url = f"sqlite:///{self.path}"  # an absolute path: sqlite:////tmp/...
        self.clock = clock

    def make(self) -> Store:
        return open_store(self.url, clock=self.clock)

    def _all(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        with closing(sqlite3.connect(self.path)) as conn, conn:
            return conn.execute(sql, params).fetchall()

    def _index_caught_up(self) -> None:
        """The FTS5 index caught up with the messages, as the store's worker does when idle (memory/sqlite_fts.py:
        written behind the turns): what it holds once it has."""
        with closing(sqlite3.connect(self.path, isolation_level=None)) as conn:
            sqlite_fts.catch_up(conn)

    def counts(self, user_id: int) -> dict[str, int]:
        self._index_caught_up()
        found = {t: self._all(f"SELECT count(*) FROM {t} WHERE {'id' if t == 'users' else 'user_id'} = ?",
                              (user_id,))[0][0] for t in TABLES}
        found["fts"] = self._all("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?",
                                 (f'"u{user_id}"',))[0][0]  # the owner token (migrations/sqlite/0033)
        return found

    def count(self, table: str) -> int:
        return int(self._all(f"SELECT count(*) FROM {table}")[0][0])

    def select(self, sql: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self._all(sql)]

    def fts_hits(self, word: str) -> list[int]:
        # each person's postings apart (migrations/sqlite/0033): the word in the index of every owner token there
        self._index_caught_up()
        owners = self._all("SELECT term FROM messages_fts_vocab WHERE term GLOB 'u[0-9]*' "
                           "AND term NOT GLOB 'u*[^0-9]*'")
        return sorted(r[0] for (owner,) in owners for r in self._all(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?", (term_query(int(owner[1:]), word),)))

    def migrations(self) -> list[str]:
        return [r[0] for r in self._all("SELECT name FROM schema_migrations ORDER BY name")]

    def reset(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            self.path.with_name(self.path.name + suffix).unlink(missing_ok=True)

    def fail_replies(self, why: str) -> None:
        self._all("CREATE TRIGGER no_replies BEFORE INSERT ON messages WHEN new.role = 'assistant' "
                  f"BEGIN SELECT RAISE(ABORT, '{why}'); END")


class PostgresBackend:
    """One fresh database of the session's embedded Postgres per test (dropped after it)."""

    name = "postgres"

    def __init__(self, tmp_path: Path, clock: Callable[[], datetime]) -> None:
        from tests.fakes.postgres import SERVER, db_name

        self.server = SERVER
        self.url = SERVER.create_database()
        self.database = db_name(self.url)
        self.clock = clock

    def make(self) -> Store:
        return open_store(self.url, clock=self.clock)

    def _all(self, sql: str, *args: Any) -> list[Any]:
        return self.server.query(self.database, sql, *args)

    def counts(self, user_id: int) -> dict[str, int]:
        found = {t: self._all(f"SELECT count(*) FROM {t} WHERE {'id' if t == 'users' else 'user_id'} = $1",
                              user_id)[0][0] for t in TABLES}
        # the search index is a column of messages: a person's indexed rows are their messages with a vector
        found["fts"] = self._all("SELECT count(*) FROM messages WHERE user_id = $1 AND search IS NOT NULL",
                                 user_id)[0][0]
        return found

    def count(self, table: str) -> int:
        return int(self._all(f"SELECT count(*) FROM {table}")[0][0])

    def select(self, sql: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self._all(sql)]

    def fts_hits(self, word: str) -> list[int]:
        return [r[0] for r in self._all(
            "SELECT id FROM messages WHERE search @@ to_tsquery('simple', quote_literal($1)) ORDER BY id", word)]

    def migrations(self) -> list[str]:
        return [r[0] for r in self._all("SELECT name FROM schema_migrations ORDER BY name")]

    def reset(self) -> None:
        # the migrated schema stays; every row goes and every id counts from 1 again (a quarter of the time of a
        # new database and its migrations)
        tables = [r[0] for r in self._all("SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                                          "AND tablename <> 'schema_migrations'")]
        if tables:
            self._all(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")

    def fail_replies(self, why: str) -> None:
        self._all("CREATE FUNCTION no_replies() RETURNS trigger LANGUAGE plpgsql AS "
                  f"$$ BEGIN RAISE EXCEPTION '{why}'; END $$")
        self._all("CREATE TRIGGER no_replies BEFORE INSERT ON messages FOR EACH ROW "
                  "WHEN (new.role = 'assistant') EXECUTE FUNCTION no_replies()")


BACKENDS: dict[str, type[SqliteBackend | PostgresBackend]] = {"sqlite": SqliteBackend, "postgres": PostgresBackend}
