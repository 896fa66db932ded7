"""Migrations: discovered from the package, applied in order on a blank database and on an older one, each
in its own transaction, recorded in schema_migrations. Also: opening a store by URL."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kernel.errors import ConfigError
from memory.dialect_sqlite import SqliteStore
from memory.migrate import (
    Migration,
    MigrationError,
    applied_postgres,
    applied_sqlite,
    apply_postgres,
    apply_sqlite,
    discover,
    plan,
    split_sqlite,
)
from memory.open import open_store, sqlite_path
from memory.sqlite_terms import term_query
from memory.store import ContextQuery, MemoryDraft
from tests.fakes.postgres import SERVER, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)

CORE_TABLES = {"users", "identities", "conversations", "messages", "model_calls", "memories", "messages_fts"}


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    with closing(sqlite3.connect(tmp_path / "m.db", isolation_level=None)) as c:
        c.execute("PRAGMA foreign_keys = ON")
        yield c


@pytest.fixture
def pg_url() -> str:
    """A fresh database of the session's embedded Postgres (dropped after the test)."""
    return SERVER.create_database()


def tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def test_discover_finds_numbered_files_in_order() -> None:
    names = [m.name for m in discover("sqlite")]
    assert names[:3] == ["0001_core", "0002_facts", "0003_messages_fts"]
    assert names == sorted(names)
    numbers = [int(n[:4]) for n in names]
    # unique and increasing; issue 11's areas took numbers in parallel (0013-0017), so a branch may skip some
    assert numbers == sorted(set(numbers)) and numbers[0] == 1


def test_blank_database_gets_every_migration_once(conn: sqlite3.Connection) -> None:
    every = [m.name for m in discover("sqlite")]
    assert applied_sqlite(conn) == []
    assert apply_sqlite(conn) == every
    assert tables(conn) >= CORE_TABLES
    rows = conn.execute("SELECT name, applied_at FROM schema_migrations ORDER BY name").fetchall()
    assert [r[0] for r in rows] == every
    assert all(len(r[1]) == len("2024-01-01T00:00:00.000000Z") and r[1].endswith("Z") for r in rows)
    assert apply_sqlite(conn) == [], "a second run applies nothing"


def test_upgrade_keeps_data_and_indexes_old_messages(tmp_path: Path, conn: sqlite3.Connection) -> None:
    every = discover("sqlite")
    assert apply_sqlite(conn, every[:1]) == ["0001_core"]
    assert "facts" not in tables(conn)
    ts = "2024-01-01T00:00:00.000000Z"
    conn.execute("INSERT INTO users(id, handle, created_at) VALUES (1, 'ana', ?)", (ts,))
    conn.execute(
        "INSERT INTO conversations(id, user_id, surface, singleton, created_at, updated_at) "
        "VALUES (1, 1, 'cli', 1, ?, ?)", (ts, ts),
    )
    conn.execute(
        "INSERT INTO messages(conversation_id, user_id, surface, role, content, external_id, created_at) "
        "VALUES (1, 1, 'cli', 'user', 'the old lighthouse keeper', 'x1', ?)", (ts,),
    )

    assert apply_sqlite(conn) == [m.name for m in every[1:]]
    assert conn.execute("SELECT handle FROM users").fetchall() == [("ana",)]
    assert conn.execute("SELECT content FROM messages").fetchall() == [("the old lighthouse keeper",)]
    # its words as they were (no index terms then), in its owner's postings
    hits = conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?",
                        (term_query(1, "lighthouse"),)).fetchall()
    assert len(hits) == 1, "messages stored before the FTS migration are indexed"
    conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)")  # content too


async def test_store_recalls_messages_from_before_the_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with closing(sqlite3.connect(path, isolation_level=None)) as c:
        apply_sqlite(c, discover("sqlite")[:1])
        ts = "2024-01-01T00:00:00.000000Z"
        c.execute("INSERT INTO users(handle, created_at) VALUES ('ana', ?)", (ts,))
        c.execute("INSERT INTO conversations(user_id, surface, singleton, created_at, updated_at) "
                  "VALUES (1, 'cli', 1, ?, ?)", (ts, ts))
        c.execute("INSERT INTO messages(conversation_id, user_id, surface, role, content, created_at) "
                  "VALUES (1, 1, 'cli', 'user', 'my cat is called Pixel', ?)", (ts,))
    store = SqliteStore(path)
    await store.open()
    try:
        assert store.applied == [m.name for m in discover("sqlite")[1:]]
        now = datetime.now(UTC)
        rows = await store.load_context(ContextQuery(
            user_id=1, surface="web", conversation_id=None, current_message_id=None, at=now,
            cross_since=now - timedelta(hours=1), search_text="what is my cat called?",
        ))
        assert [m.content for m in rows.recalled] == ["my cat is called Pixel"]
    finally:
        await store.close()


def test_failed_migration_rolls_back_and_is_not_recorded(conn: sqlite3.Connection) -> None:
    good = discover("sqlite")
    broken = Migration("9999_broken", "CREATE TABLE half_done (x INTEGER);\nCREATE TABLEX oops (y);")
    with pytest.raises(MigrationError, match="9999_broken"):
        apply_sqlite(conn, [*good, broken])
    assert "half_done" not in tables(conn)
    assert applied_sqlite(conn) == [m.name for m in good], "earlier migrations stay applied"
    assert not conn.in_transaction


def test_database_newer_than_the_build_is_refused(conn: sqlite3.Connection) -> None:
    apply_sqlite(conn)
    conn.execute("INSERT INTO schema_migrations(name, applied_at) VALUES ('9000_future', 'x')")
    with pytest.raises(MigrationError, match="upgrade hilo"):
        apply_sqlite(conn)


def test_plan_lists_only_pending() -> None:
    ms = [Migration("0001_a", ""), Migration("0002_b", ""), Migration("0003_c", "")]
    assert [m.name for m in plan(ms, ["0001_a", "0003_c"])] == ["0002_b"]


def test_split_keeps_triggers_and_comment_semicolons_whole() -> None:
    script = """
    -- a comment; with a semicolon
    CREATE TABLE t (x TEXT DEFAULT ';');
    CREATE TRIGGER tr AFTER INSERT ON t BEGIN
        INSERT INTO t(x) SELECT 'y' WHERE 0;
        DELETE FROM t WHERE 0;
    END;
    -- trailing comment
    """
    statements = split_sqlite(script)
    assert len(statements) == 2
    assert statements[1].startswith("CREATE TRIGGER") and statements[1].endswith("END;")


async def test_migrate_on_a_fresh_store_reports_names_then_nothing(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "fresh.db")
    try:
        assert await store.migrate() == [m.name for m in discover("sqlite")]
        assert await store.migrate() == []
    finally:
        await store.close()
    reopened = SqliteStore(tmp_path / "fresh.db")
    await reopened.open()
    assert reopened.applied == []
    await reopened.close()


def test_sqlite_urls() -> None:
    assert sqlite_path("sqlite:///hilo.db") == "hilo.db"
    assert sqlite_path("sqlite:///data/hilo.db") == "data/hilo.db"
    assert sqlite_path("sqlite:////var/lib/hilo/hilo.db") == "/var/lib/hilo/hilo.db"
    store = open_store("sqlite:////tmp/x/hilo.db")
    assert isinstance(store, SqliteStore) and store.path == "/tmp/x/hilo.db"
    with pytest.raises(ConfigError, match=r"sqlite:///hilo\.db"):
        open_store("sqlite:///")


@pytest.mark.parametrize("url", ["postgres://u:p@localhost/hilo", "postgresql://localhost/hilo"])
def test_postgres_urls_open_the_postgres_store(url: str) -> None:
    from memory.dialect_pg import PostgresStore

    store = open_store(url)
    assert isinstance(store, PostgresStore) and store.options["statement_cache_size"] == 100


def test_postgres_url_options() -> None:
    from memory.dialect_pg import parse_url

    dsn, options = parse_url("postgresql://u:p@db/hilo?statement_cache_size=0&sslmode=require&pool_max_size=4")
    assert dsn == "postgresql://u:p@db/hilo?sslmode=require"
    assert options == {"statement_cache_size": 0, "pool_min_size": 1, "pool_max_size": 4}
    supabase = "postgresql://u:p@aws-0-eu-west-1.pooler.supabase.com:6543/postgres"
    assert parse_url(supabase)[1]["statement_cache_size"] == 0, "the transaction pooler forbids prepared statements"
    assert parse_url(supabase.replace(":6543", ":5432"))[1]["statement_cache_size"] == 100
    with pytest.raises(ConfigError, match="whole number"):
        parse_url("postgresql://db/hilo?statement_cache_size=none")


def test_discover_postgres_mirrors_sqlite() -> None:
    assert [m.name for m in discover("postgres")] == [m.name for m in discover("sqlite")]


async def test_postgres_blank_database_gets_every_migration_once(pg_url: str) -> None:
    import asyncpg

    every = [m.name for m in discover("postgres")]
    conn = await asyncpg.connect(pg_url)
    try:
        assert await applied_postgres(conn) == []
        assert await apply_postgres(conn) == every
        found = {r[0] for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert found >= {"users", "identities", "conversations", "messages", "model_calls", "memories", "deliveries",
                         "link_codes", "link_failures", "identity_audit", "schema_migrations"}
        assert await applied_postgres(conn) == every
        assert await apply_postgres(conn) == [], "a second run applies nothing"
        indexes = {r[0] for r in await conn.fetch("SELECT indexname FROM pg_indexes WHERE tablename = 'messages'")}
        assert {"messages_user_created", "messages_conversation", "messages_search"} <= indexes
    finally:
        await conn.close()


async def test_postgres_concurrent_migrators_apply_each_migration_once(pg_url: str) -> None:
    import asyncio

    import asyncpg

    conns = [await asyncpg.connect(pg_url) for _ in range(4)]
    try:
        results = await asyncio.gather(*(apply_postgres(c) for c in conns))
        assert sorted(name for r in results for name in r) == [m.name for m in discover("postgres")]
    finally:
        for c in conns:
            await c.close()


async def test_postgres_upgrade_indexes_old_messages_and_failures_roll_back(pg_url: str) -> None:
    import asyncpg

    every = discover("postgres")
    conn = await asyncpg.connect(pg_url)
    try:
        assert await apply_postgres(conn, every[:2]) == ["0001_core", "0002_facts"]
        await conn.execute(
            "INSERT INTO users(id, handle, created_at) VALUES (1, 'ana', now());"
            "INSERT INTO conversations(id, user_id, surface, singleton, created_at, updated_at) "
            "VALUES (1, 1, 'cli', true, now(), now());"
            "INSERT INTO messages(conversation_id, user_id, surface, role, content, created_at) "
            "VALUES (1, 1, 'cli', 'user', 'the old lighthouse keeper', now())"
        )
        broken = Migration("9999_broken", "CREATE TABLE half_done (x int); CREATE TABLEX oops (y int);")
        with pytest.raises(MigrationError, match="9999_broken"):
            await apply_postgres(conn, [*every, broken])
        assert await applied_postgres(conn) == [m.name for m in every], "earlier migrations stay applied"
        assert await conn.fetchval("SELECT to_regclass('half_done')") is None
        hits = await conn.fetch("SELECT id FROM messages WHERE search @@ to_tsquery('simple', 'lighthouse')")
        assert len(hits) == 1, "messages stored before the search migration are indexed"
    finally:
        await conn.close()


def test_unknown_url_scheme_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"sqlite:///hilo\.db"):
        open_store("mysql://localhost/hilo")
    with pytest.raises(ConfigError) as refused:  # (`hilo --db URL` comes here without Settings' check)
        open_store("mysql://hilo:s3cret-pw@db/hilo")
    assert "s3cret-pw" not in str(refused.value) and "mysql://hilo:***@db/hilo" in str(refused.value)


async def test_unopenable_path_is_store_unavailable(tmp_path: Path) -> None:
    from memory.store import StoreUnavailable

    store = SqliteStore(tmp_path / "missing-dir" / "hilo.db")
    with pytest.raises(StoreUnavailable, match="missing-dir does not exist: create it"):
        await store.open()
    await store.close()


def _damaged_hilo_database(path: Path) -> bytes:
    """hilo's database, migrated, then 64 bytes overwritten at the start of every page after the first two."""
    asyncio.run(_migrated(path))
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode = DELETE")  # its pages in the file, not in a -wal beside it
    content = bytearray(path.read_bytes())
    for at in range(2 * 4096, len(content), 4096):
        content[at:at + 64] = b"\xee" * 64
    return bytes(content)


async def _migrated(path: Path) -> None:
    store = SqliteStore(path)
    await store.open()
    await store.close()


@pytest.mark.parametrize(("content", "says"), [
    (lambda _: b"DATABASE_URL=sqlite:///hilo.db\nTELEGRAM_BOT_TOKEN=...\n" * 8,
     "is not a SQLite database.*point HILO_DATABASE_URL"),
    (lambda _: b"SQLite format 3\x00" + b"\xff" * 4080, "is not a SQLite database"),  # its header, then garbage
    (_damaged_hilo_database, "is damaged .*malformed.*restore it from a copy"),
], ids=["a text file", "a header and garbage", "a damaged hilo database"])
def test_a_file_that_is_not_a_sqlite_database_is_a_clear_error(
        tmp_path: Path, content: Callable[[Path], bytes], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    """HILO_DATABASE_URL pointed at another file (a .env, a dump, an encrypted database) or at a damaged one: a
    StoreError that says what to do, the file left as it was; `hilo` prints it in one line, no traceback (it printed
    sqlite3.DatabaseError's traceback, and left the connection it had opened unclosed)."""
    from bot.cli import main
    from memory.store import StoreError, StoreUnavailable

    path = tmp_path / "hilo.db"
    data = content(path)
    path.write_bytes(data)

    async def refused() -> StoreError:
        store = SqliteStore(path)
        try:
            with pytest.raises(StoreError, match=says) as raised:
                await store.open()
        finally:
            await store.close()
        return raised.value

    assert not isinstance(asyncio.run(refused()), StoreUnavailable)  # retrying will not help: not "retry later"
    assert path.read_bytes() == data
    assert main(["migrate", "--db", f"sqlite:///{path}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hilo: ") and "Traceback" not in err and len(err.splitlines()) == 1


def _before_memories(dialect: str) -> list[Migration]:
    return [m for m in discover(dialect) if m.name < "0016"]


TS = "2024-01-01T00:00:00.000000Z"


def old_sqlite(path: Path, before: str, rows: str) -> None:
    """A SQLite database migrated up to (not including) migration `before`, with user 1 'ana' and `rows` (an
    INSERT whose every ? is TS)."""
    with closing(sqlite3.connect(path, isolation_level=None)) as c:
        apply_sqlite(c, [m for m in discover("sqlite") if m.name < before])
        c.execute("INSERT INTO users(handle, created_at) VALUES ('ana', ?)", (TS,))
        c.execute(rows, (TS,) * rows.count("?"))


async def test_facts_become_stated_memories_keeping_their_ids(tmp_path: Path) -> None:
    path = tmp_path / "facts.db"
    old_sqlite(path, "0016", "INSERT INTO facts(id, user_id, content, token_count, created_at) VALUES "
               "(3, 1, 'likes tea', 2, ?), (7, 1, 'lives in Porto', 3, ?)")
    store = SqliteStore(path)
    await store.open()
    try:
        assert "0016_memories" in store.applied
        found = await store.memories(1)
        assert [(m.id, m.content, m.kind, m.source, m.confidence, m.token_count, m.terms) for m in found] == [
            (7, "lives in Porto", "fact", "stated", 1.0, 3, ("live", "liv", "porto", "port")),
            (3, "likes tea", "fact", "stated", 1.0, 2, ("like", "lik", "tea"))]
        assert found[0].created_at == found[0].updated_at == datetime(2024, 1, 1, tzinfo=UTC)
        assert (await store.add_memory(1, MemoryDraft("works at Acme"))).memory.id == 8  # ids never reused
    finally:
        await store.close()
    with closing(sqlite3.connect(path)) as c:
        assert "facts" not in tables(c)


async def test_postgres_facts_become_stated_memories_keeping_their_ids(pg_url: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(pg_url)
    try:
        await apply_postgres(conn, _before_memories("postgres"))
        await conn.execute(
            "INSERT INTO users(id, handle, created_at) VALUES (1, 'ana', now());"
            "INSERT INTO facts(id, user_id, content, token_count, created_at) VALUES "
            "(3, 1, 'likes tea', 2, now()), (7, 1, 'lives in Porto', 3, now())")
    finally:
        await conn.close()
    store = open_store(pg_url)
    await store.open()
    try:
        found = await store.memories(1)
        assert [(m.id, m.content, m.source, m.confidence) for m in found] == [
            (7, "lives in Porto", "stated", 1.0), (3, "likes tea", "stated", 1.0)]
        assert (await store.add_memory(1, MemoryDraft("works at Acme"))).memory.id == 8  # the identity moved on
    finally:
        await store.close()


async def test_a_store_that_fails_to_open_leaves_no_connection_or_thread_behind(tmp_path: Path) -> None:
    """A database a newer hilo migrated (a migration this one does not know): open() refuses it, after connecting.
    The connection and the store's threads are closed then; they were left open (and a caller that then called
    close() on a store it never got was the only way out)."""
    import threading

    path = tmp_path / "hilo.db"
    await _migrated(path)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("INSERT INTO schema_migrations(name, applied_at) VALUES ('9999_from_a_newer_hilo', 'x')")
        conn.commit()
    before = set(threading.enumerate())
    store = SqliteStore(path)
    with pytest.raises(MigrationError, match="9999_from_a_newer_hilo"):
        await store.open()
    assert {t.name for t in set(threading.enumerate()) - before if t.is_alive()} == set()
    assert store._conn is None


def test_an_older_hilo_refuses_a_database_a_newer_one_migrated_in_one_line(tmp_path: Path) -> None:
    """What docs/deploy.md ("Upgrading") quotes: going back to an older hilo stops at once, naming the migration."""
    import subprocess
    import sys

    from tests.fakes.serve_process import clean_env

    path = tmp_path / "hilo.db"
    asyncio.run(_migrated(path))
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("INSERT INTO schema_migrations(name, applied_at) VALUES ('0999_from_a_newer_hilo', 'x')")
        conn.commit()
    proc = subprocess.run([sys.executable, "-m", "bot.cli", "migrate"], cwd=tmp_path, capture_output=True, text=True,
                          env=clean_env({"HILO_DATABASE_URL": f"sqlite:///{path}"}), timeout=60)
    assert proc.returncode == 1
    assert proc.stderr == ("hilo: the database has migrations this build does not know (0999_from_a_newer_hilo): "
                           "upgrade hilo, or point --db at another database\n")
