"""What the store's logic stands on, whatever the dialect: the `Db` it talks to, and row conversion.

The logic (memory/sql_*.py) is written once as coroutines over `Db`, with one SQL text per statement in Postgres'
spelling (`$n` placeholders); each dialect (memory/dialect_sqlite.py, memory/dialect_pg.py) implements `Db`.
Timestamps: parameters go through `db.ts(moment)` (SQLite: fixed-width UTC ISO text, so comparing the text
compares the moments; Postgres: an aware datetime); what comes back is read with `as_dt`, and JSON read-outs
(memory/sql_people.py) render timestamps as SQLite stores them (`to_ts`), so `hilo inspect --json` prints the
same text on both.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from kernel.errors import HiloError
from memory.store import ContextQuery, Fact, StoredMessage

if TYPE_CHECKING:
    from memory.sql_vectors import VectorQuery

#: read: one snapshot, read only; write: one write transaction; lease: the turn lease's short statements (SQLite:
#: a write transaction; Postgres: each statement commits on its own)
Mode = Literal["read", "write", "lease"]


class Db(Protocol):
    """One transaction as the logic sees it; a dialect subclasses it (one() and value() are written over all()).
    Every statement counts in the store's `counters["statements"]`: run() returns the rows a statement changed,
    many() is one statement with many parameter rows (counted once), ts() a datetime as the database takes it,
    lock() serializes writers on a key until commit (False when they are serialized anyway), recall() is
    lexical recall of q.search_text (MSG_COLS rows, best first), and insert_messages() a bulk insert of
    rows of INSERT_COLS skipping stored (surface, external_id), returning the number inserted. `vectors` says
    whether the database keeps message vectors (memory/vectors.py); put_vectors() keeps (message_id, vector) rows
    of one embedder and dimension, returning how many had a message, and nearest() is vector recall:
    (MSG_COLS row, cosine) pairs, best first."""

    clock: Callable[[], datetime]
    vectors: bool

    async def all(self, sql: str, *args: Any) -> list[Any]: ...

    async def one(self, sql: str, *args: Any) -> Any:
        rows = await self.all(sql, *args)
        return rows[0] if rows else None

    async def value(self, sql: str, *args: Any) -> Any:
        rows = await self.all(sql, *args)
        return rows[0][0] if rows else None

    async def run(self, sql: str, *args: Any) -> int: ...
    async def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...
    def ts(self, moment: datetime) -> Any: ...
    async def lock(self, key: str | int) -> bool: ...
    async def recall(self, q: ContextQuery, excluded: list[int]) -> list[Any]: ...
    async def insert_messages(self, rows: list[tuple[Any, ...]]) -> int: ...
    async def put_vectors(self, embedder: str, dim: int, rows: list[tuple[int, Sequence[float]]]) -> int: ...
    async def nearest(self, vq: VectorQuery) -> list[tuple[Any, float]]: ...


class Rollback(HiloError):
    """Raised inside a transaction to roll it back and hand `value` to the caller."""

    def __init__(self, value: Any = None) -> None:
        super().__init__("rollback")
        self.value = value


#: The columns of a message, in the order `to_message` reads them (alias `m`).
MSG_COLS = (
    "m.id, m.conversation_id, m.user_id, m.surface, m.role, m.content, m.token_count, m.external_id, "
    "m.created_at, m.metadata, m.reply_to"
)
FACT_COLS = "id, user_id, content, token_count, created_at"
#: The columns of a row of `Db.insert_messages`, in order (each dialect's bulk INSERT names them).
INSERT_COLS = "conversation_id, user_id, surface, role, content, token_count, external_id, created_at"


def aware(moment: datetime) -> datetime:
    """Naive datetimes are taken as UTC."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def to_ts(moment: datetime) -> str:
    """A datetime as fixed-width UTC text ('YYYY-MM-DDTHH:MM:SS.ffffffZ'): SQLite's storage, JSON read-outs."""
    return aware(moment).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def as_dt(value: str | datetime) -> datetime:
    """A timestamp column as an aware datetime (SQLite hands back text, Postgres a datetime)."""
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def dump_metadata(metadata: dict[str, Any] | None) -> str:
    # default=str: a stray datetime or Path in platform extras must not lose the person's message.
    return json.dumps(metadata or {}, ensure_ascii=False, default=str, separators=(",", ":"))


def load_metadata(text: str | None) -> dict[str, Any]:
    if not text or text == "{}":
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {"value": value}


def to_message(row: Sequence[Any]) -> StoredMessage:
    """A row selected with MSG_COLS."""
    return StoredMessage(
        id=row[0], conversation_id=row[1], user_id=row[2], surface=row[3], role=row[4], content=row[5],
        token_count=row[6], external_id=row[7], created_at=as_dt(row[8]), metadata=load_metadata(row[9]),
        reply_to=row[10],
    )


def to_fact(row: Sequence[Any]) -> Fact:
    """A row selected with FACT_COLS."""
    return Fact(id=row[0], user_id=row[1], content=row[2], token_count=row[3], created_at=as_dt(row[4]))
