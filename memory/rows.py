"""What the store's logic stands on, whatever the dialect: the `Db` it talks to, and row conversion.

The logic (memory/sql_*.py) is written once as coroutines over `Db`, with one SQL text per statement in Postgres'
spelling (`$n` placeholders); each dialect (memory/dialect_sqlite.py, memory/dialect_pg.py) implements `Db`.
Timestamps: parameters go through `db.ts(moment)` (SQLite: fixed-width UTC ISO text, so comparing the text
compares the moments; Postgres: an aware datetime); what comes back is read with `as_dt`, and JSON read-outs
(memory/sql_people.py) render timestamps as SQLite stores them (`to_ts`), so `hilo inspect --json` prints the
same text on both.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from kernel.errors import HiloError
from kernel.types import Memory
from memory.memory_match import memory_terms
from memory.store import ContextQuery, StoredMessage

if TYPE_CHECKING:
    from memory.sql_vectors import VectorQuery
    from memory.windows import WindowCache

#: read: one snapshot, read only; write: one write transaction; lease: the turn lease's short statements (SQLite:
#: a write transaction; Postgres: each statement commits on its own); reads: read statements that bound what they
#: see by time themselves (the turn's context: every row at or before the turn's moment), so they need no snapshot
#: of their own (SQLite: a read transaction, as `read`; Postgres: each statement on its own, no BEGIN and COMMIT,
#: two round trips fewer)
Mode = Literal["read", "write", "lease", "reads"]


class Db(Protocol):
    """One transaction as the logic sees it; a dialect subclasses it (one() and value() are written over all()).
    Every statement counts in the store's `counters["statements"]`: run() returns the rows a statement changed,
    many() is one statement with many parameter rows (counted once), ts() a datetime as the database takes it,
    lock() serializes writers on a key until commit (False when they are serialized anyway), ids() a list of
    ids as a parameter of `= ANY($n::bigint[])` / `<> ALL($n::bigint[])`, lexical() the best messages of
    q.user_id for index terms ((id, BM25 score: higher is better) rows, best first, with load_context's
    exclusions), episodes() the same for episodes, and insert_messages() a bulk insert of rows of INSERT_COLS
    skipping stored (surface, external_id), returning the number inserted. `vectors` says whether the database
    keeps message vectors (memory/vectors.py); put_vectors() keeps (message_id, vector) rows of one embedder and
    dimension, returning how many had a message, and nearest() is vector recall: (message_id, cosine) pairs,
    best first. Every recall candidate's cosine: either cosine_sql() gives the join, the column (over $9) and $9 (the
    query vector) that recall's row read adds (Postgres), or it gives None and cosines() computes them for
    the candidates' ids (SQLite, over the cached matrix)."""

    clock: Callable[[], datetime]
    vectors: bool
    #: a statement costs no round trip (SQLite, in process): a probe that may spare a search is worth asking
    probes: bool
    #: the conversations' windows kept between turns (memory/windows.py): SQLite's read transactions only
    windows: WindowCache | None = None

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
    def ids(self, ids: Sequence[Any]) -> Any: ...
    async def hits(self, q: ContextQuery, terms: list[str], excluded: Any, limit: int,
                   episode_limit: int) -> tuple[list[Any], list[Any]]: ...
    async def insert_messages(self, rows: list[tuple[Any, ...]]) -> int: ...
    async def put_vectors(self, embedder: str, dim: int, rows: list[tuple[int, Sequence[float]]]) -> int: ...
    async def nearest(self, vq: VectorQuery) -> list[tuple[int, float]]: ...
    def cosine_sql(self, vector: Sequence[float], embedder: str) -> tuple[str, str, Any] | None: ...
    async def cosines(self, vq: VectorQuery, ids: Sequence[int]) -> dict[int, float]: ...

    async def tables(self) -> dict[str, list[str]]:
        """The schema's tables (not views, not full-text indexes) and their columns, from the database's own
        catalogue, by name (memory/sql_forget.py and memory/sql_export.py find a person's rows through it)."""
        ...


def columns_by_table(rows: Iterable[Sequence[Any]]) -> dict[str, list[str]]:
    """(table, column) catalogue rows, in order, as {table: [columns]} (Db.tables)."""
    found: dict[str, list[str]] = {}
    for table, column in rows:
        found.setdefault(str(table), []).append(str(column))
    return found


class Rollback(HiloError):
    """Raised inside a transaction to roll it back and hand `value` to the caller."""

    def __init__(self, value: Any = None) -> None:
        super().__init__("rollback")
        self.value = value


#: The columns of a message, in the order `to_message` reads them (alias `m`).
def unanswered_sql(alias: str) -> str:
    """SQL: the message `alias` has neither a reply nor a model call (no turn answered it, and none failed on it):
    the one meaning of "unanswered" for the turn lease, recovery, the redelivery check and the orphan look-up."""
    return (f"NOT EXISTS (SELECT 1 FROM messages r WHERE r.reply_to = {alias}.id) "
            f"AND NOT EXISTS (SELECT 1 FROM model_calls k WHERE k.message_id = {alias}.id)")


MSG_COLS = (
    "m.id, m.conversation_id, m.user_id, m.surface, m.role, m.content, m.token_count, m.external_id, "
    "m.created_at, m.metadata, m.reply_to"
)
#: The columns of a memory, in the order `to_memory` reads them (no alias: one table).
MEMORY_COLS = (
    "id, user_id, kind, key, content, token_count, terms, importance, confidence, source, source_message_ids, "
    "source_external_ids, created_at, updated_at, last_accessed_at, access_count, expires_at, ended_at, superseded_by"
)
#: The columns of a row of `Db.insert_messages`, in order (each dialect's bulk INSERT names them).
INSERT_COLS = ("conversation_id, user_id, surface, role, content, token_count, external_id, created_at, terms, "
               "episode_id")


def aware(moment: datetime) -> datetime:
    """Naive datetimes are taken as UTC."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def renumbered(sql: str, mapping: dict[int, str]) -> str:
    """`sql` with each parameter $n replaced by mapping[n] (another number, or an expression): a statement's SQL
    inside another statement's."""
    return re.sub(r"\$(\d+)", lambda m: mapping[int(m[1])], sql)


def numbered(sql: str) -> tuple[str, tuple[str, ...]]:
    """`sql` with its named parameters (:name) numbered ($1, $2 ... in order of first use), and the names in that
    order: each statement takes the parameters it names and no other (Postgres cannot type one it never sees)."""
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in order:
            order.append(match[1])
        return f"${order.index(match[1]) + 1}"

    return re.sub(r"(?<![:\w]):([a-z_]+)", number, sql), tuple(order)


def to_ts(moment: datetime) -> str:
    """A datetime as fixed-width UTC text ('YYYY-MM-DDTHH:MM:SS.ffffffZ'): SQLite's storage, JSON read-outs."""
    return aware(moment).astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


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


#: StoredMessage is frozen: its dataclass __init__ sets each of its 11 fields through object.__setattr__ (1.2 us a
#: message). `to_message` sets them through the slots' own setters instead (0.64 us), some 350 times a turn on
#: Postgres (every row read anew) and on SQLite for the recalled rows.
_NEW_MESSAGE = object.__new__
(_ID, _CONVERSATION, _USER, _SURFACE, _ROLE, _CONTENT, _TOKENS, _EXTERNAL, _CREATED, _METADATA,
 _REPLY_TO) = (getattr(StoredMessage, f.name).__set__ for f in dataclasses.fields(StoredMessage))


def to_message(row: Sequence[Any]) -> StoredMessage:
    """A row selected with MSG_COLS (in StoredMessage's field order), as StoredMessage(*row) would make it (the
    created_at parsed, the metadata loaded)."""
    m = _NEW_MESSAGE(StoredMessage)
    _ID(m, row[0])
    _CONVERSATION(m, row[1])
    _USER(m, row[2])
    _SURFACE(m, row[3])
    _ROLE(m, row[4])
    _CONTENT(m, row[5])
    _TOKENS(m, row[6])
    _EXTERNAL(m, row[7])
    _CREATED(m, as_dt(row[8]))
    _METADATA(m, load_metadata(row[9]))
    _REPLY_TO(m, row[10])
    return m


def _json_list(value: Any) -> list[Any]:
    items = json.loads(value) if isinstance(value, str) else (value or [])
    return items if isinstance(items, list) else []


def _maybe_dt(value: str | datetime | None) -> datetime | None:
    return None if value is None else as_dt(value)


def to_memory(row: Sequence[Any]) -> Memory:
    """A row selected with MEMORY_COLS. Rows stored without terms (migrations 0016 and 0018, until
    memory/reindex.py has stored their stems) get theirs here."""
    return Memory(
        id=row[0], user_id=row[1], kind=row[2], key=row[3], content=row[4], token_count=row[5],
        terms=tuple(row[6].split()) or memory_terms(row[4]), importance=float(row[7]), confidence=float(row[8]),
        source=row[9], source_message_ids=tuple(int(i) for i in _json_list(row[10])),
        source_external_ids=tuple(str(e) for e in _json_list(row[11])), created_at=as_dt(row[12]),
        updated_at=as_dt(row[13]), last_accessed_at=_maybe_dt(row[14]), access_count=row[15],
        expires_at=_maybe_dt(row[16]), ended_at=_maybe_dt(row[17]), superseded_by=row[18],
    )
