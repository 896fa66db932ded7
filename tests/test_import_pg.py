"""Postgres writes an import batch's people, conversations and episodes set-based (memory/pg_import.py), one
statement per kind: the rows must be those the statement-by-statement writes make (sql_import.ONE_BY_ONE, SQLite's
path), their search columns included, batch after batch: runs that go on in the next batch's episode, episodes
that fill up, a line given twice (the insert skips it: the touched episodes are recounted from their messages) and
a batch imported again. And an import stopped after a batch, then run again, stores what one run stores."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memory import importer, sql_import
from memory.dialect_pg import PostgresStore
from memory.episodes import MAX_MESSAGES
from memory.store import ImportResult, ImportRow
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
    """What the database holds, by natural keys (ids aside: the owner token of a search column, '_u<id>', names the
    person's handle), and the episodes that disagree with their messages."""
    db = db_name(url)
    handles = {f"'_u{uid}'": f"'_u{handle}'" for uid, handle in SERVER.query(db, "SELECT id, handle FROM users")}

    def owners(rows: list[Any]) -> list[list[Any]]:
        return [[re.sub(r"'_u\d+'", lambda m: handles[m[0]], v) if isinstance(v, str) else v for v in row]
                for row in rows]

    conv = ("(SELECT u.handle || ' ' || c.surface || ' ' || coalesce(c.external_ref, '-') FROM conversations c "
            "JOIN users u ON u.id = c.user_id WHERE c.id = {}.conversation_id)")
    return [owners(rows) for rows in (
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
    )]


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


def _write(path: Path, rows: list[ImportRow]) -> Path:
    with path.open("w") as fh:
        for r in rows:
            line = {"user": r.user, "surface": r.surface, "role": r.role, "content": r.content,
                    "created_at": r.created_at.isoformat(), "external_id": r.external_id,
                    "conversation": r.conversation}
            fh.write(json.dumps({k: v for k, v in line.items() if v is not None}) + "\n")
    return path


async def test_an_import_stopped_after_a_batch_then_run_again_stores_what_one_run_stores(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importer, "BATCH", 60)  # seven batches
    path = _write(tmp_path / "history.jsonl", _rows())
    assert {importer.lane_of(r.user, 2) for r in _rows()} == {1}, "one lane: the batches in the file's order"
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


class HeldLanes(PostgresStore):
    """A Postgres store whose first import batch waits until a batch of another lane is stored beside it: an
    importer that stored the lanes one after another would never let it go."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.in_flight = self.most = 0
        self.second = asyncio.Event()

    async def import_rows(self, rows: Sequence[ImportRow]) -> ImportResult:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        if self.most < 2:
            await asyncio.wait_for(self.second.wait(), 20)
        self.second.set()
        try:
            return await super().import_rows(rows)
        finally:
            self.in_flight -= 1


async def test_two_lanes_store_each_persons_lines_as_one_lane_does(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Postgres stores two people's batches at once (Store.import_lanes), each person's lines in one lane in the
    file's order: the database holds what one lane stores, episodes that go on across batches included; an
    import stopped after its first batch, then run again, too."""
    monkeypatch.setattr(importer, "BATCH", 60)
    # two people, one line each in turn (by the line's number: the line given twice stays one person's): each
    # lane fills a batch in the same stretch of the file
    rows = [replace(r, user=("ana", "bo")[int(r.content.rsplit("#", 1)[1]) % 2]) for r in _rows()]
    assert sorted({importer.lane_of(r.user, 2) for r in rows}) == [0, 1]
    path = _write(tmp_path / "history.jsonl", rows)
    lanes = SERVER.create_database()
    store = HeldLanes(lanes)
    await store.open()
    try:
        assert store.import_lanes == 2
        got = await importer.import_file(store, path)
        assert store.most == 2 and (got.inserted, got.skipped) == (len(rows) - 1, 1)  # the line given twice
    finally:
        await store.close()
    monkeypatch.setattr(PostgresStore, "import_lanes", property(lambda self: 1))
    one = SERVER.create_database()
    await _import_file(path, one)
    assert _dump(lanes) == _dump(one) and _dump(one)[4] == []
    monkeypatch.undo()
    monkeypatch.setattr(importer, "BATCH", 60)
    resumed = SERVER.create_database()
    with pytest.raises(Stopped):
        await _import_file(path, resumed, stop_after_first=True)
    stored = SERVER.query(db_name(resumed), "SELECT count(*) FROM messages")[0][0]
    assert 0 < stored < len(rows) - 1
    await _import_file(path, resumed)
    assert _dump(resumed) == _dump(one)


async def test_a_bad_line_stops_both_lanes_with_every_line_before_it_stored(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importer, "BATCH", 60)
    rows = [replace(r, user=("ana", "bo")[int(r.content.rsplit("#", 1)[1]) % 2]) for r in _rows()][:250]
    path = _write(tmp_path / "history.jsonl", rows)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:200], '{"user": "ana", "surface": "telegram"}', *lines[200:]]) + "\n")
    url = SERVER.create_database()
    store = PostgresStore(url)
    await store.open()
    try:
        with pytest.raises(importer.ImportStopped, match="line 201") as stopped:
            await importer.import_file(store, path)
    finally:
        await store.close()
    before = {(r.user, r.content) for r in rows[:200]}  # the line given twice: one of the 200
    assert (stopped.value.result.inserted, stopped.value.result.skipped) == (199, 1) and len(before) == 199
    stored = SERVER.query(db_name(url), "SELECT u.handle, m.content FROM messages m JOIN users u ON u.id = m.user_id")
    assert {tuple(r) for r in stored} == before and {importer.lane_of(u, 2) for u in ("ana", "bo")} == {0, 1}
