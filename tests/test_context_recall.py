"""The pool fed by a real store (both backends): the pipeline asks for enough recalled messages to fill the budget,
and `hilo context --json`'s items carry the pool's scores (issue 11 item 2)."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.config import Settings
from bot.pipeline import Pipeline
from kernel.tokens import count
from memory import retrieval, sql_recall
from memory.rows import as_dt
from memory.store import ImportRow

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
RELEVANT = 45  # under the store's "common term" cut (a term in at most 50 messages is always searched)


def rows() -> list[ImportRow]:
    out = []
    for i in range(RELEVANT):  # one web session every two days, each its own episode
        text = f"Day {i}: took the kayak out on the river again, session {i} went well."
        out.append(ImportRow("kim", "web", "user", text, T0 + timedelta(days=2 * i), count(text), f"k{i}",
                             f"trip-{i}"))
    return out


async def test_a_new_conversation_fills_its_budget_with_recalled_memory(store: Any) -> None:
    await store.import_rows(rows())
    uid = await store.user_id("kim")
    at = T0 + timedelta(days=100)
    wide = Pipeline(Settings(context_budget=4000), store, chain=None)  # type: ignore[arg-type]
    ctx = await wide.assemble_context(user_id=uid, surface="web", conversation_id=None, current_message_id=None,
                                      text="How was the kayak?", at=at)
    recalled = [i for i in ctx.items if i.kind == "recalled_message"]
    assert len(recalled) == RELEVANT, f"{len(recalled)} recalled at 4,000 tokens: the store was asked for too few"
    assert {i.external_id for i in recalled} == {f"k{i}" for i in range(RELEVANT)}
    data = ctx.to_json()
    scored = [i for i in data["items"] if i["kind"] == "recalled_message"]
    assert all(0 < i["scores"]["pool"] <= 1 and i["external_id"] for i in scored)
    assert json.loads(json.dumps(data)) == data
    memory = next(m.content for m in ctx.messages if m.block == "memory").splitlines()
    assert sum(line.startswith("[2026-") for line in memory) == RELEVANT  # one header per episode, dated

    tight = Pipeline(Settings(context_budget=1000), store, chain=None)  # type: ignore[arg-type]
    ctx = await tight.assemble_context(user_id=uid, surface="web", conversation_id=None,
                                       current_message_id=None, text="How was the kayak?", at=at)
    line = max(i.tokens for i in ctx.items if i.kind == "recalled_message")
    assert 1000 - ctx.tokens["total"] < 2 * line + 20, ctx.tokens  # one more line and its episode header


async def test_a_wide_budget_takes_more_than_64_recalled_messages(store: Any) -> None:
    # 80 short messages match (40 name the kayak, 40 the canoe: each term under the common-term cut), four per
    # session; at 4,000 tokens they all fit, so the store is asked for them all, not for 64
    out = []
    for i in range(80):
        text = f"the {'kayak' if i % 2 else 'canoe'} trip {i} was fine"
        at = T0 + timedelta(days=i // 4, minutes=10 * (i % 4))
        out.append(ImportRow("kim", "web", "user", text, at, count(text), f"w{i}", f"day-{i // 4}"))
    await store.import_rows(out)
    uid = await store.user_id("kim")
    wide = Pipeline(Settings(context_budget=4000), store, chain=None)  # type: ignore[arg-type]
    ctx = await wide.assemble_context(user_id=uid, surface="web", conversation_id=None, current_message_id=None,
                                      text="kayak or canoe?", at=T0 + timedelta(days=60))
    recalled = [i for i in ctx.items if i.kind == "recalled_message"]
    assert len(recalled) == 80, f"{len(recalled)} recalled at 4,000 tokens ({ctx.tokens['total']} spent)"


async def test_a_rare_word_is_found_among_20000_messages_of_common_ones(store: Any) -> None:
    # issue 14: a term's postings are bounded (its newest) when it is common; a rare term brings all of its
    # messages, however old, and the best of them is recalled (memory/sqlite_terms.py, memory/pg_terms.py)
    common = "the office coffee machine was broken again this morning"
    out = [ImportRow("kim", "web", "user", "my passport photo was taken at the office today",
                     T0, count("x"), "rare", "old")]
    out += [ImportRow("kim", "web", "user", f"{common} ({i})", T0 + timedelta(hours=2 * (i + 1)), 12, f"c{i}",
                      f"day-{i // 12}") for i in range(20_000)]
    await store.import_rows(out)
    uid = await store.user_id("kim")
    pipe = Pipeline(Settings(context_budget=2000), store, chain=None)  # type: ignore[arg-type]
    at = T0 + timedelta(days=2000)
    ctx = await pipe.assemble_context(user_id=uid, surface="web", conversation_id=None, current_message_id=None,
                                      text="Where was my passport photo taken? The office?", at=at)
    recalled = [i.external_id for i in ctx.items if i.kind == "recalled_message"]
    assert recalled and recalled[0] == "rare", recalled[:5]
    # a question of common words only still recalls (their newest postings)
    ctx = await pipe.assemble_context(user_id=uid, surface="web", conversation_id=None, current_message_id=None,
                                      text="Was the coffee machine broken?", at=at)
    assert sum(i.kind == "recalled_message" for i in ctx.items) > 10


async def test_the_recalled_rows_score_as_if_every_row_knew_both_neighbours(store: Any) -> None:
    """sql_recall.ROWS seeks only the hits' neighbours and `candidates` tells every other row which hit lies next
    to it: the scores are those of candidates that each know both of their neighbours (sought here row by row),
    with hits side by side, at a conversation's ends, next to an excluded message, and episodes' members."""
    out = []
    for c in range(3):  # three conversations; a gap of two hours after every fourth message starts an episode
        for i in range(12):
            text = f"conversation {c} line {i} about the kayak" if i % 3 else f"conversation {c} line {i}"
            at = T0 + timedelta(days=c, hours=2 * (i // 4), minutes=i % 4)
            out.append(ImportRow("kim", "web", "user", text, at, count(text), f"c{c}-{i}", f"conv-{c}"))
    await store.import_rows(out)
    uid = await store.user_id("kim")
    every = await store._tx("reads", lambda db: db.all(
        f"SELECT m.id, m.episode_id, {sql_recall.PREV.format(x='m')}, {sql_recall.NEXT.format(x='m')} "
        "FROM messages m WHERE m.user_id = $1 ORDER BY m.id", uid))
    ids = [int(r[0]) for r in every]
    neighbours = {int(r[0]): (r[2], r[3]) for r in every}
    episodes = sorted({int(r[1]) for r in every})
    cases = [  # (hits, excluded, episodes whose members come)
        ([ids[0], ids[1], ids[2], ids[11], ids[12], ids[23], ids[35]], [], []),  # side by side, at the ends
        (ids[::5], [ids[6], ids[16]], episodes[1:3]),  # a hit's neighbour left out; members
        (ids[3:9] + ids[20:22], ids[9:12], episodes[-2:]),
        ([], [], episodes[:2]),  # members alone
    ]
    rng = random.Random(5)
    checked = 0
    for hit_ids, excluded, members in cases:
        rows = await store._tx("reads", lambda db, h=hit_ids, x=excluded, e=members: db.all(
            sql_recall.ROWS, db.ids(h), uid, db.ts(T0 + timedelta(days=30)), db.ids(x), None, None, db.ids(e), 40,
            db.ids([])))
        assert {int(r[0]) for r in rows} >= set(hit_ids) - set(excluded), "every hit not left out is a row"
        bm25 = {i: rng.uniform(0.5, 5.0) for i in hit_ids}
        found = {e: rng.uniform(0.5, 5.0) for e in members}
        known = [retrieval.Candidate(int(r[0]), as_dt(r[8]), bm25.get(int(r[0]), 0.0), r[11],
                                     *neighbours[int(r[0])]) for r in rows]
        fast = sql_recall.candidates(rows, bm25)
        assert retrieval.score(fast, found, "the kayak") == retrieval.score(known, found, "the kayak")
        # the case the hits tell: a row that is no hit, next to one
        checked += sum(1 for c in fast if c.message_id not in bm25 and (c.prev_id in bm25 or c.next_id in bm25))
    assert checked >= 10
