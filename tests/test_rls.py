"""Row-level security (migrations/postgres/0011_rls.sql), on a real Postgres shaped as Supabase has it and on a
plain one: anon and authenticated read no row of any table and change none, service_role reads every row, and the
daemon keeps working as the tables' owner, a plain login role (no superuser, no BYPASSRLS), as an operator's own
Postgres has it.

The Supabase roles are made as Supabase makes them: NOLOGIN anon, authenticated and service_role (BYPASSRLS),
granted to the NOINHERIT login role `authenticator` that PostgREST connects as and that takes one of them with
SET LOCAL ROLE per request; and ALL on the public schema's new tables, sequences and functions granted to the
three by default privileges. Roles belong to the whole cluster (the session's server), so each test makes its
own and drops them when it ends, after its databases.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from kernel.types import InboundMessage, ModelCallRecord
from memory.migrate import discover
from memory.open import open_store
from memory.store import ContextQuery, Delivery, LinkPolicy, Store
from tests.fakes.postgres import SERVER, db_name, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)

OWNER = "hilo_rls_owner"
SUPABASE = ("anon", "authenticated", "service_role")
AUTHENTICATOR = "authenticator"
NOW = datetime.now(UTC).replace(microsecond=0)
#: Every table of the migrated schema (so a table a later migration adds is checked too), with its RLS flags.
TABLES_SQL = (
    "SELECT relname, relrowsecurity, relforcerowsecurity FROM pg_class "
    "WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p') ORDER BY relname"
)
#: Privileges RLS does not gate that anon or authenticated still hold on any table or sequence of the schema.
UNGATED_SQL = (
    "SELECT c.relname, r.rolname, p.privilege FROM pg_class c "
    "JOIN (VALUES ('r', 'TRUNCATE'), ('r', 'REFERENCES'), ('r', 'TRIGGER'), "
    "  ('S', 'USAGE'), ('S', 'SELECT'), ('S', 'UPDATE')) p(kind, privilege) ON p.kind = c.relkind "
    "JOIN pg_roles r ON r.rolname IN ('anon', 'authenticated') "
    "WHERE c.relnamespace = 'public'::regnamespace AND CASE c.relkind "
    "  WHEN 'S' THEN has_sequence_privilege(r.oid, c.oid, p.privilege) "
    "  ELSE has_table_privilege(r.oid, c.oid, p.privilege) END "
    "ORDER BY 1, 2, 3"
)
#: The tables a person's turn (and the linking around it) fills: each must hold rows for "anon sees none" to mean
#: anything.
FILLED = {"schema_migrations", "users", "identities", "conversations", "messages", "model_calls", "memories",
          "deliveries", "link_codes", "link_failures", "identity_audit"}


def as_login(url: str, role: str) -> str:
    """The same database's URL for another login role (the fixture server trusts local connections)."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{role}@{rest.split('@', 1)[1]}"


def drop_roles(*names: str) -> None:
    SERVER.drop_created()  # the databases first: they hold the roles' grants and the owner's tables
    for name in names:
        SERVER.query("postgres", f'DROP ROLE IF EXISTS "{name}"')


@pytest.fixture
def owned_db() -> Iterator[str]:
    """A fresh database owned by a plain login role; yields the URL that connects as that owner."""
    SERVER.query("postgres", f'CREATE ROLE "{OWNER}" LOGIN NOSUPERUSER NOBYPASSRLS')
    try:
        url = SERVER.create_database()
        SERVER.query("postgres", f'ALTER DATABASE "{db_name(url)}" OWNER TO "{OWNER}"')
        yield as_login(url, OWNER)
    finally:
        drop_roles(OWNER)


@pytest.fixture
def supabase(owned_db: str) -> Iterator[str]:
    """owned_db with Supabase's roles and default grants, made before hilo migrates (as on a new project)."""
    db = db_name(owned_db)
    try:
        for role in SUPABASE:
            bypass = " BYPASSRLS" if role == "service_role" else ""
            SERVER.query("postgres", f"CREATE ROLE {role} NOLOGIN NOINHERIT{bypass}")
        SERVER.query("postgres", f"CREATE ROLE {AUTHENTICATOR} LOGIN NOINHERIT")
        SERVER.query("postgres", f"GRANT {', '.join(SUPABASE)} TO {AUTHENTICATOR}")
        SERVER.query(db, f"GRANT USAGE ON SCHEMA public TO {', '.join(SUPABASE)}")
        for kind in ("TABLES", "SEQUENCES", "FUNCTIONS"):
            SERVER.query(db, f"ALTER DEFAULT PRIVILEGES FOR ROLE {OWNER} IN SCHEMA public "
                             f"GRANT ALL ON {kind} TO {', '.join(SUPABASE)}")
        yield owned_db
    finally:
        drop_roles(*SUPABASE, AUTHENTICATOR)


@asynccontextmanager
async def connected(url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(url)
    try:
        yield conn
    finally:
        await conn.close()


def call() -> ModelCallRecord:
    return ModelCallRecord(model="m1", provider="fake", tokens_in=10, tokens_out=5, latency_ms=12, outcome="ok")


async def a_persons_turn(store: Store, ext: str = "t1") -> int:
    """Through the real store, as the daemon does it: a Telegram message, its reply with a model call, a
    delivery, a fact, a link code with a wrong guess, an operator link and its audit. Returns the user id."""
    turn = await store.ingest(InboundMessage(surface="telegram", sender="42", external_id=ext,
                                             text="my parrot is called Kiwi", received_at=NOW), token_count=5)
    assert turn is not None
    reply = await store.finish_turn(turn, "Kiwi is a fine name", 4, [call()])
    assert reply is not None
    await store.record_delivery(Delivery(turn.user_id, reply.id, "telegram", "42", "sent", provider_ref=f"m-{ext}"))
    await store.remember(turn.user_id, "has a parrot called Kiwi", 5)
    await store.issue_link_code("telegram", "42", f"hash-{ext}", NOW + timedelta(minutes=10))
    wrong = await store.redeem_link_code("whatsapp", "+34600", "not-a-code", LinkPolicy())
    assert wrong.status == "invalid"
    handle = await store.identity_handle("telegram", "42")
    assert handle is not None
    assert await store.link_identity(handle, "cli", f"ana-{ext}", actor="operator") == turn.user_id
    return turn.user_id


async def row_counts(conn: asyncpg.Connection, tables: list[str], role: str | None = None) -> dict[str, int]:
    """count(*) of each table, as `role` (SET LOCAL ROLE, as PostgREST does) or as the connection's own role."""
    async with conn.transaction():
        if role is not None:
            await conn.execute(f"SET LOCAL ROLE {role}")
        return {t: await conn.fetchval(f'SELECT count(*) FROM "{t}"') for t in tables}


async def writes_as(conn: asyncpg.Connection, role: str, table: str, row: str) -> dict[str, str]:
    """What each write does to `table` as `role`: the command's status, or the error it was refused with.
    `row` is one of the table's own rows (JSON, read as the owner): inserting it again is a well-formed row."""
    columns = [r[0] for r in await conn.fetch(
        "SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped "
        "AND attgenerated = '' ORDER BY attnum", table)]
    listed = ", ".join(f'"{c}"' for c in columns)
    statements = {
        "insert": (f'INSERT INTO "{table}" ({listed}) SELECT {listed} FROM json_populate_record(NULL::"{table}", $1)',
                   (row,)),
        "update": (f'UPDATE "{table}" SET "{columns[0]}" = "{columns[0]}"', ()),
        "delete": (f'DELETE FROM "{table}"', ()),
        "truncate": (f'TRUNCATE "{table}" CASCADE', ()),
    }
    outcome: dict[str, str] = {}
    for name, (sql, args) in statements.items():
        try:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL ROLE {role}")
                outcome[name] = await conn.execute(sql, *args)
        except asyncpg.PostgresError as exc:
            outcome[name] = f"{type(exc).__name__}: {exc}"
    return outcome


async def test_anon_and_authenticated_see_and_change_nothing_service_role_sees_all(supabase: str) -> None:
    store = open_store(supabase)
    await store.open()  # migrates, as the owner
    try:
        user_id = await a_persons_turn(store)
        async with connected(supabase) as owner, connected(as_login(supabase, AUTHENTICATOR)) as api:
            flags = await owner.fetch(TABLES_SQL)
            tables = [r["relname"] for r in flags]
            owned = await row_counts(owner, tables)
            assert {t for t, n in owned.items() if n > 0} >= FILLED, f"the turn left tables empty: {owned}"
            for role in ("anon", "authenticated"):
                seen = await row_counts(api, tables, role)
                assert seen == dict.fromkeys(tables, 0), f"{role} reads rows: {seen}"
            assert await row_counts(api, tables, "service_role") == owned, "service_role (BYPASSRLS) reads every row"

            rows = {t: await owner.fetchval(f'SELECT row_to_json(x)::text FROM "{t}" x LIMIT 1') for t in FILLED}
            for role in ("anon", "authenticated"):
                for t in sorted(FILLED):
                    done = await writes_as(api, role, t, rows[t])
                    assert done == {
                        "insert": f'InsufficientPrivilegeError: new row violates row-level security policy for '
                                  f'table "{t}"',
                        "update": "UPDATE 0",
                        "delete": "DELETE 0",
                        "truncate": f"InsufficientPrivilegeError: permission denied for table {t}",
                    }, f"{role} on {t}"
            assert await row_counts(owner, tables) == owned, "nothing changed"
            # what RLS does not gate: no TRUNCATE, REFERENCES, TRIGGER on any table, nothing on their sequences
            leaks = await owner.fetch(UNGATED_SQL)
            assert [tuple(r) for r in leaks] == [], (
                "privileges RLS does not gate are still granted (a table's migration revokes them as 0011 does)")

            # the migration's SQL once more (Supabase's SQL editor on a migrated database): it changes nothing
            sql = next(m.sql for m in discover("postgres") if m.name == "0011_rls")
            await owner.execute(sql)
            assert [tuple(r) for r in await owner.fetch(TABLES_SQL)] == [tuple(r) for r in flags]

        await daemon_still_works(store, user_id)
    finally:
        await store.close()


async def test_plain_postgres_without_supabase_roles_migrates_and_the_owner_keeps_working(owned_db: str) -> None:
    absent = SERVER.query("postgres", "SELECT rolname FROM pg_roles WHERE rolname = ANY($1::text[])",
                          [*SUPABASE, AUTHENTICATOR])
    assert absent == [], "a plain Postgres has no Supabase roles"
    store = open_store(owned_db)
    assert await store.migrate() == [m.name for m in discover("postgres")]
    await store.open()
    try:
        user_id = await a_persons_turn(store)
        await daemon_still_works(store, user_id)
    finally:
        await store.close()


async def test_every_table_has_row_level_security_not_forced(owned_db: str) -> None:
    """Generic over the migrated schema: a table a later migration adds without RLS fails here. Not FORCEd: the
    daemon is the tables' owner (see migrations/postgres/0011_rls.sql)."""
    store = open_store(owned_db)
    await store.open()
    await store.close()
    async with connected(owned_db) as conn:
        flags = {r["relname"]: (r["relrowsecurity"], r["relforcerowsecurity"]) for r in await conn.fetch(TABLES_SQL)}
    assert set(flags) >= FILLED
    assert {t for t, (on, _forced) in flags.items() if not on} == set(), f"tables without row-level security: {flags}"
    assert {t for t, (_on, forced) in flags.items() if forced} == set(), f"FORCEd tables: {flags}"


async def daemon_still_works(store: Store, user_id: int) -> None:
    """As the owner, with RLS on: a second turn is stored, its context read and its reply stored; forget empties
    the person."""
    turn = await store.ingest(InboundMessage(surface="telegram", sender="42", external_id="t2",
                                             text="what is my parrot called?", received_at=NOW), token_count=5)
    assert turn is not None
    assert turn.user_id == user_id
    rows = await store.load_context(ContextQuery(
        user_id=user_id, surface="telegram", conversation_id=turn.message.conversation_id,
        current_message_id=turn.message.id, at=NOW + timedelta(hours=1), cross_since=NOW - timedelta(days=1),
        search_text="parrot Kiwi"))
    assert [f.content for f in rows.facts] == ["has a parrot called Kiwi"]
    assert [m.content for m in rows.conversation] == ["my parrot is called Kiwi", "Kiwi is a fine name"]
    assert await store.finish_turn(turn, "Kiwi", 1, [call()]) is not None
    handle = await store.identity_handle("telegram", "42")
    assert handle is not None
    assert await store.forget(handle) is True
    assert await store.inspect(handle) is None
    assert await store.model_calls(user_id) == []
