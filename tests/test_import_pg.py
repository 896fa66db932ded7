"""Postgres writes an import batch's people, conversations and episodes set-based (memory/pg_import.py), one
statement per kind: the rows must be those the statement-by-statement writes make (sql_import.ONE_BY_ONE, SQLite's
path), their search columns included, batch after batch: runs that go on in the next batch's episode, episodes
that fill up, a line given twice (the insert skips it: the touched episodes are recounted from their messages) and
a batch imported again. And an import stopped after a batch, then run again, stores what one run stores."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memory import importer, sql_import
from memory.dialect_pg import PostgresStore
from memory.episodes import MAX_MESSAGES
from memory.store import ImportRow
from tests.fakes.postgres import SERVER, db_name, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)

T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
_SORTED, _WORDS = "SELECT array_agg(w ORDER BY w)", "unnest(string_to_array(nullif({}, ''), ' ')) w"
WORDS = ("hiking trains", "tomates y caminatas", "the station at noon", "mañana temprano", "budget meeting")


def _rows() -> list[ImportRow]:
    rows, at = [], T0
    for i in range(400):
        at += timedelta(hours=2) if i % 170 == 169 else timedelta(minutes=3)  # now and then a new episode
        user, surface, ref = ("p1", "whatsapp", None) if i % 5 == 0 else ("p0", "telegram", None)
        if i % 5 == 3:
            surface, ref = "web", (None, "trip", "work")[(i // 5) % 3]
        rows.append(ImportRow(user, surface, ("user", "assistant")[i % 2], f"{WORDS[i % 5]} #{i}", at, 4 + i % 7,
                              f"x{i}" if i % 4 else None, ref))
    rows[5:5] = [rows[41]]  # a line given twice, in one batch: the second is skipped by the insert
    return rows


def _external(rows: list[ImportRow]) -> list[ImportRow]:
    """Every row with an external_id (importer.py derives one for a line without)."""
    return [r if r.external_id else ImportRow(r.user, r.surface, r.role, r.content, r.created_at, r.token_count,
                                              f"line:{k}", r.conversation) for k, r in enumerate(rows)]


async def _import(writes: sql_import.ImportWrites) -> list[list[Any]]:
    url = SERVER.create_database()
    store = PostgresStore(url)
    store.import_writes = writes
    await store.open()
    rows = _external(_rows())
    try:
        for k in range(0, len(rows), 70):  # batches that end inside runs
            await store.import_rows(rows[k:k + 70])
        again = await store.import_rows(rows[100:180])
        assert again.inserted == 0 and again.skipped == 80
    finally:
        await store.close()
    return _dump(url)


def _dump(url: str) -> list[list[Any]]:
    """What the database holds, by natural keys (ids aside), and the episodes that disagree with their messages."""
    db = db_name(url)
    conv = ("(SELECT u.handle || ' ' || c.surface || ' ' || coalesce(c.external_ref, '-') FROM conversations c "
            "JOIN users u ON u.id = c.user_id WHERE c.id = {}.conversation_id)")
    return [
        SERVER.query(db, "SELECT handle, created_at FROM users ORDER BY 1"),
        SERVER.query(db, "SELECT u.handle, c.surface, c.singleton, c.title, c.external_ref, c.created_at, "
                         "c.updated_at FROM conversations c JOIN users u ON u.id = c.user_id ORDER BY 1, 2, 5"),
        # an episode recounted from its messages (the batch with the line given twice) lists their terms in the
        # order the database reads them: compared sorted, and the tsvector without positions
        SERVER.query(db, f"SELECT {conv.format('e')}, e.surface, e.started_at, e.ended_at, e.message_count, "
                         f"e.token_count, ({_SORTED.format('e.terms')} FROM {_WORDS.format('e.terms')}), "
                         "strip(e.search)::text FROM episodes e ORDER BY 1, 3"),
        SERVER.query(db, f"SELECT m.external_id, {conv.format('m')}, m.role, m.content, m.token_count, m.created_at, "
                         "m.terms, m.search::text, e.started_at FROM messages m JOIN episodes e ON e.id = m.episode_id "
                         "ORDER BY 1"),
        # every episode holds what its messages say (the line given twice counted once), its terms in any order
        SERVER.query(db, "SELECT e.id FROM episodes e LEFT JOIN (SELECT episode_id, count(*) AS n, "
                         "sum(token_count) AS tokens, min(created_at) AS first, max(created_at) AS last "
                         "FROM messages GROUP BY episode_id) m ON m.episode_id = e.id "
                         "WHERE m.n IS DISTINCT FROM e.message_count OR m.tokens IS DISTINCT FROM e.token_count "
                         "OR m.first <> e.started_at OR m.last <> e.ended_at "
                         f"OR ({_SORTED.format('x.terms')} FROM messages x, {_WORDS.format('x.terms')} "
                         f"WHERE x.episode_id = e.id) IS DISTINCT FROM ({_SORTED.format('e.terms')} "
                         f"FROM {_WORDS.format('e.terms')})"),
    ]


async def test_set_based_writes_store_the_rows_of_the_one_by_one_writes() -> None:
    bulk = await _import(PostgresStore.import_writes)
    each = await _import(sql_import.ONE_BY_ONE)
    users, conversations, episodes, messages, wrong = bulk
    assert len(users) == 2 and len(conversations) == 5 and len(messages) == len(_rows()) - 1
    assert max(n for *_, n, _, _, _ in episodes) == MAX_MESSAGES and len(episodes) > 8
    assert all("'_u" in m[7] for m in messages) and all("'_u" in e[7] for e in episodes)
    assert wrong == []
    for name, got, want in zip(("users", "conversations", "episodes", "messages"), bulk, each, strict=False):
        assert got == want, name


class Stopped(Exception):
    """The import stopped after its first batch (as by Ctrl-C between two transactions)."""


async def _import_file(path: Path, url: str, stop_after_first: bool = False) -> None:
    def stop(lines: int, total: int) -> None:
        raise Stopped

    store = PostgresStore(url)
    await store.open()
    try:
        await importer.import_file(store, path, stop if stop_after_first else None)
    finally:
        await store.close()


async def test_an_import_stopped_after_a_batch_then_run_again_stores_what_one_run_stores(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importer, "BATCH", 60)  # seven batches
    path = tmp_path / "history.jsonl"
    with path.open("w") as fh:
        for r in _rows():
            line = {"user": r.user, "surface": r.surface, "role": r.role, "content": r.content,
                    "created_at": r.created_at.isoformat(), "external_id": r.external_id,
                    "conversation": r.conversation}
            fh.write(json.dumps({k: v for k, v in line.items() if v is not None}) + "\n")
    once = SERVER.create_database()
    await _import_file(path, once)
    resumed = SERVER.create_database()
    with pytest.raises(Stopped):
        await _import_file(path, resumed, stop_after_first=True)
    # the first batch whole (its line given twice stored once), nothing of the second
    assert SERVER.query(db_name(resumed), "SELECT count(*) FROM messages")[0][0] == 59
    await _import_file(path, resumed)
    assert _dump(resumed) == _dump(once)
    assert len(_dump(once)[3]) == len(_rows()) - 1 and _dump(once)[4] == []
