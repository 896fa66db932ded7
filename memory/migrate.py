"""Schema migrations: numbered, named, append-only SQL files, recorded in `schema_migrations`.

Files live in the `migrations` package, one folder per dialect: `migrations/sqlite/0001_core.sql`,
`migrations/postgres/0001_core.sql`, ... A migration is never edited once released: a change is a new file.
Each one is applied in its own transaction together with its row in `schema_migrations(name, applied_at)`,
so a failure leaves the database at the previous migration.

The dialect-agnostic part (discovery, planning) is shared; `apply_sqlite` is the SQLite driver and
`apply_postgres` the asyncpg one (a whole file is sent as one script there; concurrent migrators, e.g. N
`hilo serve` processes starting together, are serialized by a transaction-scoped advisory lock).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from memory.store import StoreError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

    import asyncpg

#: A migration file name: four digits, an underscore, a snake_case name.
NAME_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

CREATE_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    "name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
)
SELECT_APPLIED = "SELECT name FROM schema_migrations ORDER BY name"
INSERT_APPLIED = "INSERT INTO schema_migrations(name, applied_at) VALUES (?, ?)"


class MigrationError(StoreError):
    """A migration could not be applied, or the database is newer than this build."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One SQL file. `name` is its file name without `.sql` (e.g. "0001_core")."""

    name: str
    sql: str


def discover(dialect: str) -> list[Migration]:
    """The migrations shipped for a dialect ("sqlite", "postgres"), in order."""
    folder = _folder(dialect)
    found: list[Migration] = []
    for entry in folder.iterdir():
        if entry.is_file() and NAME_RE.match(entry.name):
            found.append(Migration(entry.name[: -len(".sql")], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.name)
    numbers = [m.name[:4] for m in found]
    if len(set(numbers)) != len(numbers):
        raise MigrationError(f"two {dialect} migrations share a number: {numbers}")
    return found


def _folder(dialect: str) -> Traversable:
    """The dialect's folder of the `migrations` package. On disk (a checkout, pip's install) it is read as a
    directory: importlib.resources' machinery (its readers import zipfile) was ms of every command's start, as
    every store opens by migrating; a package elsewhere (a zip) is read through importlib.resources."""
    import migrations

    here = Path(migrations.__file__).parent / dialect
    if here.is_dir():
        return here
    from importlib import resources

    return resources.files("migrations").joinpath(dialect)


def plan(available: Sequence[Migration], applied: Iterable[str]) -> list[Migration]:
    """The migrations still to apply, in order.

    A name recorded in the database but unknown here means the database was migrated by a newer hilo:
    refuse rather than run old code against a newer schema.
    """
    done = set(applied)
    unknown = sorted(done - {m.name for m in available})
    if unknown:
        raise MigrationError(
            f"the database has migrations this build does not know ({', '.join(unknown)}): "
            "upgrade hilo, or point --db at another database"
        )
    return [m for m in available if m.name not in done]


def utc_stamp() -> str:
    """Now as fixed-width UTC ISO text, the format of every timestamp column."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def split_sqlite(script: str) -> list[str]:
    """Split a script into statements. sqlite3.complete_statement knows about strings, comments and the
    `BEGIN ... END;` of triggers, so a ';' only ends a statement when the statement is complete."""
    statements: list[str] = []
    buffer = ""
    for piece in script.split(";"):
        buffer += piece + ";"
        if sqlite3.complete_statement(buffer):
            if _strip_comments(buffer).strip(" \t\r\n;"):
                statements.append(buffer.strip())
            buffer = ""
    if _strip_comments(buffer).strip(" \t\r\n;"):
        raise MigrationError(f"incomplete SQL statement at the end of a migration: {buffer.strip()[:80]!r}")
    return statements


def _strip_comments(sql: str) -> str:
    return "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))


def apply_sqlite(conn: sqlite3.Connection, migrations: Sequence[Migration] | None = None) -> list[str]:
    """Apply pending migrations on an autocommit connection (isolation_level=None); return the names applied.

    Each migration runs inside BEGIN IMMEDIATE, which takes the write lock first: two processes starting
    together apply each migration once (the second sees it recorded and skips it).
    """
    if conn.isolation_level is not None:
        raise MigrationError("apply_sqlite needs an autocommit connection (isolation_level=None)")
    available = list(migrations) if migrations is not None else discover("sqlite")
    conn.execute(CREATE_TABLE)
    applied_now: list[str] = []
    for migration in plan(available, _applied(conn)):
        conn.execute("BEGIN IMMEDIATE")
        try:
            if migration.name in _applied(conn):  # another process got there first
                conn.execute("ROLLBACK")
                continue
            for statement in split_sqlite(migration.sql):
                conn.execute(statement)
            conn.execute(INSERT_APPLIED, (migration.name, utc_stamp()))
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise MigrationError(f"migration {migration.name} failed: {exc}") from exc
            raise
        applied_now.append(migration.name)
    return applied_now


def applied_sqlite(conn: sqlite3.Connection) -> list[str]:
    """The names recorded in schema_migrations (empty on a blank database)."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    return _applied(conn) if exists else []


def _applied(conn: sqlite3.Connection) -> list[str]:
    return [row[0] for row in conn.execute(SELECT_APPLIED)]


# -- Postgres ------------------------------------------------------------------------------------------------

PG_CREATE_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL)"
)
PG_INSERT_APPLIED = "INSERT INTO schema_migrations(name, applied_at) VALUES ($1, now())"
#: The advisory lock key every hilo migrator takes (pg_advisory_xact_lock): 'hilo' 'mig' in ASCII.
PG_LOCK_KEY = 0x68696C6F_6D6967


async def apply_postgres(
    conn: asyncpg.Connection, migrations: Sequence[Migration] | None = None,
) -> list[str]:
    """Apply pending migrations on an asyncpg connection (outside any transaction); return the names applied.

    Each migration is one transaction: the advisory lock, a re-check that it is still pending (another
    process may have applied it while this one waited), the whole file as one script, and its row in
    schema_migrations. A failure rolls that migration back and leaves the earlier ones applied.
    """
    import asyncpg

    available = list(migrations) if migrations is not None else discover("postgres")
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", PG_LOCK_KEY)
        await conn.execute(PG_CREATE_TABLE)
        pending = plan(available, await _applied_pg(conn))
    applied_now: list[str] = []
    for migration in pending:
        try:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", PG_LOCK_KEY)
                if migration.name in await _applied_pg(conn):  # another process got there first
                    continue
                await conn.execute(migration.sql)
                await conn.execute(PG_INSERT_APPLIED, migration.name)
        except asyncpg.PostgresError as exc:
            raise MigrationError(f"migration {migration.name} failed: {exc}") from exc
        applied_now.append(migration.name)
    return applied_now


async def applied_postgres(conn: asyncpg.Connection) -> list[str]:
    """The names recorded in schema_migrations (empty on a blank database)."""
    if await conn.fetchval("SELECT to_regclass('schema_migrations') IS NULL"):
        return []
    return await _applied_pg(conn)


async def _applied_pg(conn: asyncpg.Connection) -> list[str]:
    return [row[0] for row in await conn.fetch(SELECT_APPLIED)]
