"""Costs and caps in the store, on every backend (the `store` fixture: SQLite and Postgres): the cost of each model
call is kept with it (a turn's through finish_turn, priced by the real chain against the fake provider; a background
job's through record_model_calls); reservations are all-or-nothing, settle to the real cost, and many taken at once
never pass a cap; the alert marks let one alert per kind through per interval."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from bot.config import Settings
from bot.extract import SCHEMA
from bot.extract_job import complete_recorded
from bot.models.base import CapReached
from bot.models.factory import build_chain
from bot.pipeline import Pipeline
from bot.retry import RetryPolicy
from bot.spend import Meter
from kernel import catalog
from kernel.types import ChatMessage, InboundMessage, ModelCallRecord
from memory.sql_spend import Window
from memory.store import Store
from tests.backends import Backend, TestClock
from tests.fakes.model_server import FakeModelServer, ok, status
from tests.waiting import no_sleep

PRICES = '{"m1": {"in": 2.0, "out": 8.0}, "m2": {"in": 1.0, "out": 4.0}}'


def pipeline(store: Store, server: FakeModelServer, **env: str) -> Pipeline:
    settings = Settings.from_mapping({"HILO_MODEL": "openai:m1", "HILO_FALLBACK_MODELS": "openai:m2",
                                      "OPENAI_API_KEY": "x", "OPENAI_BASE_URL": server.base_url + "/v1",
                                      "HILO_PRICES": PRICES, **env})
    return Pipeline(settings, store, build_chain(settings, policy=RetryPolicy(attempts=1, sleep=no_sleep), timeout=5))


def msg(ext: str, text: str) -> InboundMessage:
    return InboundMessage(surface="telegram", sender="42", external_id=ext, text=text)


async def test_each_model_call_keeps_its_cost(store: Store, backend: Backend, model_server: FakeModelServer) -> None:
    model_server.script("m1", [status(503)])  # the primary fails: the fallback answers
    p = pipeline(store, model_server)
    try:
        out = await p.handle(msg("u1", "what does it cost"))
    finally:
        await p.chain.aclose()
    assert out.status == "ok"
    rows = backend.select("SELECT model, outcome, tokens_in, tokens_out, cost_usd FROM model_calls ORDER BY id")
    assert [(r[0], r[1]) for r in rows] == [("openai:m1", "server_error"), ("openai:m2", "ok")]
    failed, answered = rows
    assert failed[4] == 0.0
    assert answered[2] > 0 and answered[3] > 0
    assert answered[4] == pytest.approx((answered[2] * 1.0 + answered[3] * 4.0) / 1_000_000)
    [_, call] = await store.model_calls(out.user_id or 0)
    assert call["cost_usd"] == pytest.approx(answered[4])  # `hilo inspect --json` shows it too


async def test_background_calls_keep_their_cost(store: Store, backend: Backend) -> None:
    uid = await store.user_id("ana", create=True)
    assert uid is not None
    record = ModelCallRecord("openai:m1", "openai", 100, 20, 5, "ok", cost_usd=0.00036)
    await store.record_model_calls(uid, "extract", [record])
    assert backend.select("SELECT purpose, cost_usd FROM model_calls") == [("extract", pytest.approx(0.00036))]


async def test_a_reservation_is_all_or_nothing_and_settles_to_the_real_cost(store: Store, backend: Backend) -> None:
    uid = await store.user_id("ana", create=True)
    person, everyone = Window("day", uid, "2026-12-01", 1.0), Window("day", None, "2026-12-01", 0.5)
    assert await store.reserve_spend([person, everyone], 0.4) is None
    refused = await store.reserve_spend([person, everyone], 0.2)  # fits the person's cap, not everyone's
    assert refused is not None and refused.window == everyone and refused.spent_usd == pytest.approx(0.4)
    assert await store.spent(person) == pytest.approx(0.4)  # the person's window kept nothing of the refusal
    await store.settle_spend([person, everyone], 0.05 - 0.4)  # the call cost 0.05
    assert await store.spent(person) == pytest.approx(0.05)
    assert await store.spent(everyone) == pytest.approx(0.05)
    assert await store.reserve_spend([everyone], 0.6) is not None  # bigger than the cap itself
    rows = backend.select("SELECT scope, user_id, window_start FROM spend_counters ORDER BY user_id")
    assert sorted(rows, key=repr) == sorted([("day", uid, "2026-12-01"), ("day", None, "2026-12-01")], key=repr)


async def test_reservations_taken_at_once_never_pass_the_cap(store: Store) -> None:
    everyone = Window("month", None, "2026-12-01", 1.0)
    results = await asyncio.gather(*(store.reserve_spend([everyone], 0.1) for _ in range(25)))
    assert sum(r is None for r in results) == 10
    assert await store.spent(everyone) == pytest.approx(1.0)


async def test_one_alert_per_kind_per_interval(store: Store, clock: TestClock) -> None:
    interval = timedelta(seconds=300)
    assert await store.take_alert("cap_reached", interval) is True
    assert await store.take_alert("cap_reached", interval) is False
    assert await store.take_alert("fallback_answered", interval) is True  # per kind
    clock.advance(301)
    assert await store.take_alert("cap_reached", interval) is True


async def test_a_person_over_their_cap_is_refused_with_the_catalogue_and_their_message_kept(
    store: Store, backend: Backend, model_server: FakeModelServer,
) -> None:
    # m1 costs 2 USD per million input tokens and 8 per million output: a call's worst case is its prompt plus
    # 4,096 output tokens (OpenAI sets no bound), about 0.033 USD; a cap of 0.05 lets one call through at a time
    p = pipeline(store, model_server, HILO_CAP_PERSON_DAILY_USD="0.05")
    model_server.script("m1", [ok(" ".join(["word"] * 3000))])  # the first answer spends most of the cap
    outs: list[Any] = []
    try:
        for i in range(3):
            outs.append(await p.handle(msg(f"u{i}", f"question {i}")))
    finally:
        await p.chain.aclose()
    assert [o.status for o in outs] == ["ok", "failed", "failed"]
    assert outs[1].text == catalog.t("cap_reached_day", "en")
    assert len(model_server.requests) == 1  # no call was made for the refused turns
    rows = backend.select("SELECT role, content FROM messages ORDER BY id")
    assert [r for r in rows if r[0] == "user"] == [("user", "question 0"), ("user", "question 1"),
                                                     ("user", "question 2")]
    outcomes = backend.select("SELECT outcome, cost_usd, error FROM model_calls ORDER BY id")
    assert [o[0] for o in outcomes] == ["ok", "cap_reached", "cap_reached"]
    assert outcomes[1][1:] == (0.0, "OverCap scope=person_daily")
    [spent] = backend.select("SELECT spent_usd FROM spend_counters")
    assert spent[0] == pytest.approx(outcomes[0][1])  # what is counted is what the answered call cost
    assert spent[0] <= 0.05


async def test_linking_two_people_adds_their_spend_together(store: Store) -> None:
    ana = await store.user_id("ana", create=True)
    tg = await store.identity_user("telegram", "42", create=True)
    assert ana is not None and tg is not None and ana != tg
    day = "2026-12-01"
    assert await store.reserve_spend([Window("day", ana, day, 5.0)], 1.5) is None
    assert await store.reserve_spend([Window("day", tg, day, 5.0), Window("month", tg, "2026-12-01", 9.0)], 2.0) is None
    assert await store.link_identity("ana", "telegram", "42", "operator") == ana
    assert await store.spent(Window("day", ana, day, 5.0)) == pytest.approx(3.5)  # no fresh cap by linking
    assert await store.spent(Window("month", ana, "2026-12-01", 9.0)) == pytest.approx(2.0)
    assert await store.spent(Window("day", tg, day, 5.0)) == 0.0


async def test_a_streamed_turn_over_the_cap_makes_no_call(store: Store, model_server: FakeModelServer) -> None:
    p = pipeline(store, model_server, HILO_CAP_PERSON_MONTHLY_USD="0.01")  # below one call's worst case
    shown: list[tuple[str, bool]] = []

    async def sink(delta: str, reset: bool) -> None:
        shown.append((delta, reset))

    try:
        out = await p.handle(msg("s1", "stream this"), on_delta=sink)
    finally:
        await p.chain.aclose()
    assert (out.status, out.text) == ("failed", catalog.t("cap_reached_month", "en"))
    assert model_server.requests == [] and shown == []
    [call] = await store.model_calls(out.user_id or 0)
    assert (call["outcome"], call["error"], call["fallback_from"]) == ("cap_reached", "OverCap scope=person_monthly",
                                                                        None)


async def test_a_background_job_counts_against_the_persons_cap(store: Store, job_chain: Any) -> None:
    settings, chain = job_chain({"HILO_MODEL": "openai:m1", "HILO_PRICES": PRICES, "HILO_CAP_PERSON_DAILY_USD": "0.01"})
    chain.meter = Meter(settings=settings, store=store)
    uid = await store.user_id("ana", create=True)
    with pytest.raises(CapReached) as refused:
        await complete_recorded(store, chain, uid, "extract", [ChatMessage("user", "remember this")], SCHEMA)
    assert refused.value.scope == "person_daily"
    [call] = await store.model_calls(uid or 0)
    assert (call["purpose"], call["outcome"]) == ("extract", "cap_reached")


async def test_the_cleanup_purges_windows_long_past(store: Store, clock: TestClock) -> None:
    today = clock().strftime("%Y-%m-%d")
    old = (clock() - timedelta(days=70)).strftime("%Y-%m-%d")
    assert await store.reserve_spend([Window("day", None, old, 1.0), Window("day", None, today, 1.0)], 0.1) is None
    assert await store.purge_spend(timedelta(days=62)) == 1
    assert await store.spent(Window("day", None, today, 1.0)) == pytest.approx(0.1)
    assert await store.spent(Window("day", None, old, 1.0)) == 0.0
