"""A whole turn's round trips to Postgres on the wire (issue 14: at most 8), counted by a loopback proxy
(bench/wire.py) in front of the embedded server, and in front of pgbouncer in transaction mode.

A count, not a time: ingest, the turn lease (take, answered check, release), load_context and finish_turn, as
the pipeline runs them, with the real store. Steady state: statements prepared by earlier turns, as in a daemon.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from bench.wire import counting_proxy
from bot.config import Settings
from bot.embedders.openai_compat import OpenAIEmbedder
from bot.embedding import embed_pending
from bot.pipeline import Pipeline
from kernel.types import InboundMessage, Outgoing
from memory.open import open_store
from surfaces.web_guard import RateLimiter
from tests.fakes.model_server import FakeModelServer
from tests.fakes.pgbouncer import BOUNCER, pgbouncer_session  # noqa: F401  (autouse fixture)
from tests.fakes.postgres import SERVER, db_name, postgres_databases, postgres_session  # noqa: F401

#: issue 14's goal: database round trips per turn on Postgres, on the wire
MAX_ROUND_TRIPS = 8
#: What a turn costs today (measured 2026-12-04): postgres ingest 1 (one statement that also takes the lease:
#: memory/pg_turn.py), load_context 1 (one statement: memory/pg_context.py, recall's term statistics inside it:
#: migrations/postgres/0032), finish_turn 1 (its statement releases the lease: no release of its own) = 3;
#: pgbouncer twice that, 6 (statement_cache_size=0:
#: asyncpg parses and describes each statement in a round trip of its own, then binds and executes it). A ceiling,
#: so that a change that adds a round trip is seen; lower it with every change that removes one.
TODAY = {"postgres": 3, "pgbouncer": 6}
#: With an embedder and the person's vectors stored: load_context is two statements (the read ahead while the
#: question is embedded, then the vector's part: memory/pg_context.py read_ahead, finish), 4; pgbouncer 8.
TODAY_WITH_VECTORS = {"postgres": 4, "pgbouncer": 8}
#: A web message's three rate-limit hits (surfaces/web_guard.py: the IP's requests and messages, the visitor's)
#: are one statement more before the ingest's (memory/sql_limits.py hit_all): 4; pgbouncer 8.
TODAY_WEB = {"postgres": 4, "pgbouncer": 8}
WEB_LIMITS = [RateLimiter(name, 1000, lambda: None).entry(key)
              for name, key in (("ip", "127.0.0.1"), ("ip-messages", "127.0.0.1"), ("visitor", "visitor-ana"))]


async def one_turn(store: object, pipeline: Pipeline, k: int, wire: object, steps: dict[str, int],
                   limits: list[tuple[str, int, int]] | None = None) -> None:
    def mark(name: str, before: int) -> int:
        now = wire.round_trips  # type: ignore[attr-defined]
        steps[name] = steps.get(name, 0) + now - before
        return now

    msg = InboundMessage(surface="telegram", sender="ana", external_id=f"w{k}", text=f"my parrot Kiwi said {k}",
                         handle="ana")
    t = wire.round_trips  # type: ignore[attr-defined]
    turn = await store.ingest(msg, 5, limits=limits or ())  # type: ignore[attr-defined]
    assert turn is not None
    t = mark("ingest", t)
    lease = store.turn_lock(turn.conversation_id, turn.message.id)  # type: ignore[attr-defined]
    answered = await lease.__aenter__()
    assert not answered
    t = mark("lease take + answered", t)
    ctx = await pipeline.context_for(turn)
    assert ctx.tokens["total"] > 0
    t = mark("load_context", t)
    stored = await store.finish_turn(turn, f"reply {k}", 2, [],  # type: ignore[attr-defined]
                                     outgoing=Outgoing(surface="telegram", recipient="ana", parts=(f"reply {k}",)))
    assert stored is not None
    t = mark("finish_turn", t)
    await lease.__aexit__(None, None, None)
    mark("lease release", t)


async def measure(pooled: bool, embedder: OpenAIEmbedder | None = None,
                  limits: list[tuple[str, int, int]] | None = None) -> tuple[float, dict[str, float]]:
    """(round trips of a whole turn on the wire, per step), a mean over 5 turns after 6 that warm up; with
    `embedder`, the warm-up's messages have vectors of it and each turn's question is embedded; with `limits`,
    each message's rate-limit hits are counted with it (Store.ingest's `limits`, as the web's are)."""
    url = SERVER.create_database()
    if pooled:
        BOUNCER.url(url)  # started on first use
        target: str | tuple[str, int] = ("127.0.0.1", BOUNCER.port)
    else:
        target = SERVER.uri(db_name(url))
    async with counting_proxy(target) as (proxy_url, wire):
        proxied = proxy_url.rsplit("/", 1)[0] + "/" + db_name(url) + ("?statement_cache_size=0" if pooled else "")
        assert urlsplit(proxied).hostname == "127.0.0.1"
        store = open_store(proxied)
        await store.open()
        try:
            pipeline = Pipeline(Settings(), store, chain=None, embedder=embedder)  # type: ignore[arg-type]
            for k in range(6):  # first contact; statements prepared (cached when the cache is on)
                await one_turn(store, pipeline, k, wire, {}, limits)
                if embedder is not None:
                    assert await embed_pending(store, embedder)
            steps: dict[str, int] = {}
            turns = 5
            for k in range(6, 6 + turns):
                await one_turn(store, pipeline, k, wire, steps, limits)
        finally:
            await store.close()
    per_step = {name: n / turns for name, n in steps.items()}
    print(f"\nround trips per turn ({'pgbouncer' if pooled else 'postgres'}): {per_step}")
    return sum(per_step.values()), per_step


@pytest.mark.parametrize("kind", ["postgres", "pgbouncer"])
async def test_a_whole_turn_costs_no_more_round_trips_than_today(kind: str) -> None:
    total, per_step = await measure(kind == "pgbouncer")
    assert total <= TODAY[kind], f"a whole turn took {total} round trips on the wire: {per_step}"


@pytest.mark.parametrize("kind", ["postgres", "pgbouncer"])
async def test_a_whole_turn_costs_at_most_8_round_trips_on_the_wire(kind: str) -> None:
    total, per_step = await measure(kind == "pgbouncer")
    assert total <= MAX_ROUND_TRIPS, f"a whole turn took {total} round trips on the wire: {per_step}"


@pytest.mark.parametrize("kind", ["postgres", "pgbouncer"])
async def test_a_turn_with_vectors_costs_no_more_than_today_and_at_most_8(kind: str,
                                                                          model_server: FakeModelServer) -> None:
    embedder = OpenAIEmbedder(model="embed-fake", api_key="sk-test", base_url=f"{model_server.base_url}/v1",
                              timeout=5)
    try:
        total, per_step = await measure(kind == "pgbouncer", embedder)
    finally:
        await embedder.aclose()
    statements = 2  # the read ahead and the vector's part; through pgbouncer, each parsed in a round trip first
    assert per_step["load_context"] == statements * (2 if kind == "pgbouncer" else 1), per_step
    assert total <= TODAY_WITH_VECTORS[kind] <= MAX_ROUND_TRIPS, f"a turn with vectors took {total}: {per_step}"


@pytest.mark.parametrize("kind", ["postgres", "pgbouncer"])
async def test_a_web_turn_with_its_rate_limits_costs_at_most_8_round_trips(kind: str) -> None:
    total, per_step = await measure(kind == "pgbouncer", limits=WEB_LIMITS)
    statements = 2  # the hits' one statement and the message's
    assert per_step["ingest"] == statements * (2 if kind == "pgbouncer" else 1), per_step
    assert total <= TODAY_WEB[kind] <= MAX_ROUND_TRIPS, f"a web turn took {total} round trips on the wire: {per_step}"
