"""Schema parity: the SQLite and the Postgres migrations build the same schema (tables, columns, type
families, nullability, defaults, indexes, primary/unique/foreign keys with their ON DELETE, checks), blank and
upgraded. What each dialect legitimately has on its own is in ALLOWED below, with the reason.
The rules for comparing across dialects are in tests/schema_shape.py's docstring."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import asyncpg
import pytest

from memory.migrate import apply_postgres, apply_sqlite, discover
from tests.fakes.postgres import SERVER, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)
from tests.schema_shape import Shape, differences, postgres_shape, sqlite_shape

#: (dialect, kind, name) -> why it exists in that dialect only (or, for "both", why it is not compared).
ALLOWED: dict[tuple[str, str, str], str] = {
    # Lexical recall. SQLite: an FTS5 external-content index kept by triggers (migrations/sqlite/0003);
    # Postgres: a generated tsvector column with a GIN index (migrations/postgres/0003).
    ("sqlite", "table", "messages_fts"): "the FTS5 virtual table (Postgres: messages.search)",
    ("sqlite", "table", "messages_fts_data"): "FTS5 shadow table (its b-tree segments), made by FTS5 itself",
    ("sqlite", "table", "messages_fts_idx"): "FTS5 shadow table (its segment index), made by FTS5 itself",
    ("sqlite", "table", "messages_fts_docsize"): "FTS5 shadow table (token counts per row), made by FTS5 itself",
    ("sqlite", "table", "messages_fts_config"): "FTS5 shadow table (its settings), made by FTS5 itself",
    ("sqlite", "view", "messages_fts_source"): "the FTS5 external content: message text plus the owner token",
    ("sqlite", "trigger", "messages_fts_delete"): "keeps FTS5 in step (Postgres: the column is generated)",
    ("sqlite", "trigger", "messages_fts_update"): "keeps FTS5 in step (Postgres: the column is generated)",
    ("postgres", "column", "messages.search"): "the tsvector of the message (SQLite: messages_fts)",
    ("postgres", "column", "episodes.search"): "the tsvector of the episode (SQLite: none, its 0044)",
    ("postgres", "index", "episodes_search"): "the GIN index over episodes.search (SQLite: none, its 0044)",
    ("postgres", "index", "messages_search"): "the GIN index over messages.search (SQLite: messages_fts)",
    # Term statistics: SQLite reads document frequencies from an fts5vocab table (migrations/sqlite/0004);
    # Postgres needs none (its 0004 is a no-op kept so that the numbers match).
    ("sqlite", "table", "messages_fts_vocab"): "the fts5vocab table of messages_fts's terms",
    # The conversation windows' count of changed and deleted messages (migrations/sqlite/0045, memory/windows.py):
    # Postgres keeps no windows.
    ("sqlite", "table", "message_changes"): "counts changes and deletions of messages for the conversation windows",
    ("sqlite", "trigger", "message_changes_update"): "counts a message changed (the windows' columns)",
    ("sqlite", "trigger", "message_changes_delete"): "counts a message deleted",
    # The newest message the FTS5 index holds (migrations/sqlite/0046, memory/sqlite_fts.py): the index is written
    # behind the turns; Postgres's generated column and GIN index need no such mark.
    ("sqlite", "table", "fts_progress"): "the newest message id the FTS5 index holds (it is written behind)",
    # Bookkeeping of the engines and the runner, not of the migration files.
    ("sqlite", "table", "sqlite_sequence"): "SQLite's AUTOINCREMENT counters (Postgres: identity sequences)",
    ("both", "table", "schema_migrations"): "made by the runner (memory/migrate.py), not by a migration file; "
                                            "tests/test_migrate.py covers it",
}
SKIP = {name for (_dialect, kind, name) in ALLOWED if kind == "table"}


@pytest.fixture
def lite(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    with closing(sqlite3.connect(tmp_path / "parity.db", isolation_level=None)) as conn:
        conn.execute("PRAGMA foreign_keys = ON")
        yield conn


async def pg_migrated(count: int | None = None) -> Shape:
    """A fresh database of the session's Postgres, migrated (all, or the first `count` then the rest)."""
    conn = await asyncpg.connect(SERVER.create_database())
    try:
        every = discover("postgres")
        if count is not None:
            await apply_postgres(conn, every[:count])
        await apply_postgres(conn, every)
        return await postgres_shape(conn, SKIP)
    finally:
        await conn.close()


async def test_blank_sqlite_and_postgres_schemas_match(lite: sqlite3.Connection) -> None:
    apply_sqlite(lite)
    drift = differences(sqlite_shape(lite, SKIP), await pg_migrated(), set(ALLOWED))
    assert drift == [], "the two dialects' migrations drifted:\n" + "\n".join(drift)


def test_upgraded_sqlite_matches_blank(tmp_path: Path, lite: sqlite3.Connection) -> None:
    """A database migrated to any earlier point (with a row in every table of it) and then upgraded has the
    schema of a blank one: a migration that only works on an empty database, or that an upgrade skips, shows."""
    apply_sqlite(lite)
    blank = sqlite_shape(lite, SKIP)
    every = discover("sqlite")
    for count in range(1, len(every)):
        with closing(sqlite3.connect(tmp_path / f"up{count}.db", isolation_level=None)) as old:
            old.execute("PRAGMA foreign_keys = ON")
            apply_sqlite(old, every[:count])
            seed(old)
            apply_sqlite(old)
            assert differences(sqlite_shape(old, SKIP), blank, set()) == [], f"upgraded from {every[count - 1].name}"


async def test_upgraded_postgres_matches_blank() -> None:
    """The Postgres twin of the test above, from the migration before the newest one."""
    every = discover("postgres")
    blank, upgraded = await pg_migrated(), await pg_migrated(len(every) - 1)
    assert vars(upgraded) == vars(blank)


def seed(conn: sqlite3.Connection) -> None:
    """One person with a conversation, two messages and a delivery, in whatever of that the schema has yet."""
    ts = "2024-01-01T00:00:00.000000Z"
    conn.execute("INSERT INTO users(id, handle, created_at) VALUES (1, 'ana', ?)", (ts,))
    conn.execute("INSERT INTO conversations(id, user_id, surface, singleton, created_at, updated_at) "
                 "VALUES (1, 1, 'cli', 1, ?, ?)", (ts, ts))
    conn.execute("INSERT INTO messages(id, conversation_id, user_id, surface, role, content, created_at) "
                 "VALUES (1, 1, 1, 'cli', 'user', 'hello', ?)", (ts,))
    conn.execute("INSERT INTO messages(conversation_id, user_id, surface, role, content, created_at, reply_to) "
                 "VALUES (1, 1, 'cli', 'assistant', 'hi', ?, 1)", (ts,))
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "deliveries" in tables:
        conn.execute("INSERT INTO deliveries(user_id, message_id, surface, recipient, status, created_at, "
                     "updated_at) VALUES (1, 2, 'cli', 'ana', 'sent', ?, ?)", (ts, ts))


async def test_every_allowed_entry_names_a_real_object(lite: sqlite3.Connection) -> None:
    """A stale entry would hide the next object of that name: each one must still exist where it says."""
    apply_sqlite(lite)
    shapes = {"sqlite": [sqlite_shape(lite, SKIP)], "postgres": [await pg_migrated()]}
    shapes["both"] = shapes["sqlite"] + shapes["postgres"]
    for dialect, kind, name in ALLOWED:
        for shape in shapes[dialect]:
            assert has(shape, kind, name), f"ALLOWED names {kind} {name}, which {dialect} no longer has"


def has(shape: Shape, kind: str, name: str) -> bool:
    if kind == "column":
        table, column = name.split(".")
        return column in shape.tables[table].columns
    return {"table": name in shape.tables, "index": name in shape.indexes}.get(kind, f"{kind} {name}" in shape.others)


# -- the comparison itself can see drift ---------------------------------------------------------------------

SQLITE_PAIR = """
CREATE TABLE parent (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE);
CREATE TABLE child (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    parent_id INTEGER REFERENCES parent(id) ON DELETE CASCADE,
    flag INTEGER NOT NULL DEFAULT 0 CHECK (flag IN (0, 1)),
    kind TEXT NOT NULL DEFAULT 'a' CHECK (kind IN ('a', 'b')),
    note TEXT,
    at TEXT NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}',
    UNIQUE (parent_id, kind)
);
CREATE INDEX child_at ON child(at) WHERE flag = 1;
CREATE TABLE loose (id INTEGER PRIMARY KEY, on_off INTEGER NOT NULL);
"""
POSTGRES_PAIR = """
CREATE TABLE parent (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, name text NOT NULL UNIQUE);
CREATE TABLE child (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    parent_id bigint REFERENCES parent(id) ON DELETE SET NULL,
    flag boolean NOT NULL DEFAULT false,
    kind text NOT NULL DEFAULT 'a' CHECK (kind IN ('a', 'b')),
    note integer,
    at timestamptz,
    meta jsonb NOT NULL DEFAULT '{}',
    UNIQUE (parent_id, kind)
);
CREATE INDEX child_at ON child(at) WHERE flag;
CREATE INDEX child_note ON child(note);
CREATE TABLE loose (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, on_off boolean NOT NULL);
"""


async def test_the_comparison_sees_each_kind_of_drift_and_no_false_one(lite: sqlite3.Connection) -> None:
    lite.executescript(SQLITE_PAIR)
    conn = await asyncpg.connect(SERVER.create_database())
    try:
        await conn.execute(POSTGRES_PAIR)
        pg = await postgres_shape(conn, set())
    finally:
        await conn.close()
    assert differences(sqlite_shape(lite, {"sqlite_sequence"}), pg, {("sqlite", "table", "sqlite_sequence")}) == [
        "column child.at: NOT NULL in sqlite only",
        "column child.note: postgres integer (spelt integer in SQLite), sqlite text",
        "column loose.id: default 'rowid' in sqlite, 'identity' in postgres",
        "column loose.on_off: boolean without CHECK (on_off IN (0, 1)) in sqlite",
        "index child(note) (child_note): postgres only",
        "table child: foreign key (('parent_id',), 'parent', ('id',), 'CASCADE') in sqlite only",
        "table child: foreign key (('parent_id',), 'parent', ('id',), 'SET NULL') in postgres only",
    ]
