"""The outbox (issue 12 item 3): its store on both backends (queue, per-recipient order, leases, retries,
forget, recovery's look-up), and the sender (bot/outbox.py) against the fake Telegram and Twilio APIs through
the real transports: order, retries with Retry-After, permanent failures, a redelivery that sends a stored reply
without a model call."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from telegram import Bot

from bot.config import Settings
from bot.job_list import recovery
from bot.jobs import JobContext
from bot.models.factory import build_chain
from bot.notices import Notices
from bot.outbox import Outbox, with_route
from bot.pipeline import Pipeline
from bot.tasks import TaskSet
from kernel import catalog
from kernel.types import InboundMessage, Outgoing
from surfaces.telegram import api_urls
from surfaces.telegram_outbound import TelegramTransport
from surfaces.whatsapp_send import WINDOW_CLOSED_EXPLANATION, TwilioSender, TwilioTransport
from tests.backends import TestClock
from tests.fakes import telegram_api as fake_telegram
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.model_behaviours import held, ok
from tests.fakes.model_server import FakeModelServer, status
from tests.waiting import wait_until

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api
twilio_api_session = fake_twilio.twilio_api_session
twilio_api = fake_twilio.twilio_api


def inbound(ext: str, text: str = "hello", sender: str = "42", **kw: Any) -> InboundMessage:
    """A Telegram message whose reply goes to `sender`'s chat."""
    return with_route(InboundMessage(surface="telegram", sender=sender, external_id=ext, text=text, **kw), sender)


async def turn_of(store: Any, ext: str, sender: str = "42") -> Any:
    turn = await store.ingest(inbound(ext, sender=sender, received_at=store.clock()), 1)
    assert turn is not None
    return turn


# -- the store (both backends) ----------------------------------------------------------------------------------

async def test_parts_are_claimed_one_recipient_head_at_a_time_in_order(store: Any) -> None:
    a, b = await turn_of(store, "1:1"), await turn_of(store, "2:1", sender="2")
    first = await store.enqueue(a.user_id, None, Outgoing("telegram", "42", ("a1", "a2")))
    second = await store.enqueue(a.user_id, None, Outgoing("telegram", "42", ("a3",)))
    other = await store.enqueue(b.user_id, None, Outgoing("telegram", "2", ("b1",)))
    claimed = await store.claim_outbox("telegram", "p1", 60)
    assert [(c.id, c.text, c.attempts) for c in claimed] == [(first[0], "a1", 1), (other[0], "b1", 1)]
    assert await store.claim_outbox("telegram", "p2", 60) == []  # heads are leased; a2 waits for a1
    assert await store.claim_outbox("whatsapp", "p2", 60) == []
    assert await store.settle_outbox(first[0], "p1", "sent", provider_ref="m1")
    [nxt] = await store.claim_outbox("telegram", "p2", 60)
    assert (nxt.id, nxt.part, nxt.parts) == (first[1], 2, 2)
    assert await store.settle_outbox(nxt.id, "p2", "failed", error="Forbidden: blocked")
    [last] = await store.claim_outbox("telegram", "p2", 60)  # after a final failure the next part goes on
    assert last.id == second[0]
    assert await store.outbox_undelivered("telegram", "42") == 1


async def test_a_lapsed_lease_is_taken_over_and_the_old_sender_cannot_settle(store: Any, clock: TestClock) -> None:
    t = await turn_of(store, "1:1")
    [part] = await store.enqueue(t.user_id, None, Outgoing("telegram", "42", ("hi",)))
    assert [c.id for c in await store.claim_outbox("telegram", "dead", 5)] == [part]
    assert await store.claim_outbox("telegram", "alive", 5) == []
    clock.advance(6)  # the first sender's process died mid-send: its lease lapsed
    [again] = await store.claim_outbox("telegram", "alive", 5)
    assert (again.id, again.attempts) == (part, 2)
    assert not await store.settle_outbox(part, "dead", "sent", provider_ref="x")
    assert await store.settle_outbox(part, "alive", "sent", provider_ref="m9")
    [row] = (await store.inspect("telegram:42"))["deliveries"]
    assert (row["status"], row["provider_ref"], row["attempts"]) == ("sent", "m9", 2)


async def test_a_retry_waits_for_its_due_time(store: Any, clock: TestClock) -> None:
    t = await turn_of(store, "1:1")
    [part] = await store.enqueue(t.user_id, None, Outgoing("telegram", "42", ("hi",)))
    await store.claim_outbox("telegram", "p", 60)
    assert await store.settle_outbox(part, "p", "pending", error="429", retry_at=clock() + _seconds(30))
    assert await store.claim_outbox("telegram", "p", 60) == []
    due = await store.outbox_next_due("telegram")
    assert due is not None and 29 < (due - clock()).total_seconds() <= 30
    clock.advance(31)
    assert [c.attempts for c in await store.claim_outbox("telegram", "p", 60)] == [2]


async def test_the_backlog_counts_every_undelivered_part_and_dates_the_oldest(store: Any, clock: TestClock) -> None:
    assert await store.outbox_backlog() == (0, None)
    a, b = await turn_of(store, "1:1"), await turn_of(store, "2:1", sender="2")
    first = await store.enqueue(a.user_id, None, Outgoing("telegram", "42", ("a1", "a2")))
    queued_at = clock()
    clock.advance(10)
    await store.enqueue(b.user_id, None, Outgoing("whatsapp", "+2", ("b1",)))
    count, oldest = await store.outbox_backlog()
    assert count == 3 and oldest is not None and abs((oldest - queued_at).total_seconds()) < 1
    await store.claim_outbox("telegram", "p", 60)  # being sent is not delivered yet
    assert (await store.outbox_backlog())[0] == 3
    assert await store.settle_outbox(first[0], "p", "sent", provider_ref="m1")
    [nxt] = await store.claim_outbox("telegram", "p", 60)
    assert await store.settle_outbox(nxt.id, "p", "failed", error="Forbidden: blocked")  # final: not backlog
    count, oldest = await store.outbox_backlog()
    assert count == 1 and oldest is not None and (oldest - queued_at).total_seconds() >= 9


async def test_finish_turn_queues_the_reply_parts_in_its_transaction_and_forget_removes_them(store: Any) -> None:
    t = await turn_of(store, "1:1")
    reply = await store.finish_turn(t, "the answer", 2, [], outgoing=Outgoing("telegram", "42", ("the", "answer"),
                                                                                 reply_to="1"))
    assert reply is not None
    rows = await store.outbox_pending(t.user_id)
    assert [(r["part"], r["parts"], r["status"]) for r in rows] == [(1, 2, "pending"), (2, 2, "pending")]
    claimed = await store.claim_outbox("telegram", "p", 60)
    assert [(c.message_id, c.reply_to) for c in claimed] == [(reply.id, "1")]
    assert await store.forget("telegram:42")
    assert await store.outbox_pending(t.user_id) == []
    assert await store.claim_outbox("telegram", "p", 60) == []


async def test_unanswered_messages_between_grace_and_window_without_a_live_turn(store: Any, clock: TestClock) -> None:
    old = await turn_of(store, "1:1")
    clock.advance(3600)
    t = await turn_of(store, "2:1", sender="2")
    answered = await turn_of(store, "3:1", sender="3")
    await store.finish_turn(answered, "done", 1, [])
    # the new one is within the grace period
    assert [u.message.id for u in await store.unanswered(30, 7200)] == [old.message.id]
    clock.advance(60)
    assert [u.message.id for u in await store.unanswered(30, 7200)] == [old.message.id, t.message.id]
    assert [u.message.id for u in await store.unanswered(30, 3000)] == [t.message.id]  # the old one is too old
    async with store.turn_lock(t.conversation_id, t.message.id):  # its turn runs: not recovery's
        assert [u.message.id for u in await store.unanswered(30, 3000)] == []
    found = (await store.unanswered(30, 3000))[0]
    assert found.resumed and found.handle == "telegram:2" and found.message.content == "hello"
    imported = await store.ingest(InboundMessage(surface="telegram", sender="9", external_id="9:1", text="old",
                                                 received_at=clock() - _seconds(120)), 1)
    assert imported is not None  # a message that names no reply route (imported, the web's) is not recovery's
    assert imported.message.id not in [u.message.id for u in await store.unanswered(30, 3000)]


def _seconds(n: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=n)


# -- the sender, against the fakes --------------------------------------------------------------------------------

@pytest.fixture
async def sending(store: Any, bot_api: fake_telegram.FakeBotApi, twilio_api: fake_twilio.FakeTwilioApi,
                  ) -> AsyncIterator[Outbox]:
    """An Outbox on `store` with the real Telegram and Twilio transports to the fakes, its loop running."""
    api, files = api_urls(bot_api.base_url)
    settings = Settings.from_mapping({
        "HILO_PUBLIC_URL": "https://bot.example.com", "TWILIO_ACCOUNT_SID": twilio_api.account_sid,
        "TWILIO_AUTH_TOKEN": twilio_api.auth_token, "TWILIO_WHATSAPP_NUMBER": "whatsapp:+14155238886",
        "TWILIO_API_BASE_URL": twilio_api.base_url})
    sender = TwilioSender(settings)
    await sender.start()
    tasks = TaskSet()
    async with Bot(fake_telegram.TOKEN, base_url=api, base_file_url=files) as bot:
        outbox = Outbox(store)
        outbox.register(TelegramTransport(bot))
        outbox.register(TwilioTransport(sender))
        outbox.start(tasks)
        yield outbox
        await outbox.stop(timeout=5)
        await tasks.drain(timeout=5)
    await sender.aclose()


async def deliveries(store: Any, handle: str) -> list[tuple[Any, ...]]:
    return [(d["part"], d["status"], d["provider_ref"], d["error"], d["attempts"])
            for d in (await store.inspect(handle))["deliveries"]]


async def test_telegram_parts_go_out_in_order_a_429_waits_its_retry_after_a_403_fails(
    store: Any, clock: TestClock, sending: Outbox, bot_api: fake_telegram.FakeBotApi,
) -> None:
    t = await turn_of(store, "42:1")
    other = await turn_of(store, "7:1", sender="7")
    bot_api.fail("sendMessage", 429, retry_after=30)
    await sending.enqueue("telegram", "42", "one", user_id=t.user_id)
    await sending.enqueue("telegram", "42", "two", user_id=t.user_id)
    await sending.enqueue("telegram", "7", "elsewhere", user_id=other.user_id)
    await bot_api.wait_sent(1)
    assert [s.text for s in bot_api.sent] == ["elsewhere"]  # 42's "one" waits 30 s, and "two" after it
    [row, waiting] = await store.outbox_pending(t.user_id)
    assert (row["status"], row["attempts"], waiting["attempts"]) == ("pending", 1, 0)
    clock.advance(31)
    sending.wake()
    await bot_api.wait_sent(3)
    assert [s.text for s in bot_api.sent_to(42)] == ["one", "two"]
    bot_api.fail("sendMessage", 403)
    await sending.enqueue("telegram", "42", "blocked", user_id=t.user_id)
    await sending.enqueue("telegram", "42", "after", user_id=t.user_id)
    await bot_api.wait_sent(4)
    await wait_until(lambda: _none(store, "42"), "every part settled")
    rows = await deliveries(store, "telegram:42")
    sent = bot_api.sent_to(42)
    assert rows == [(1, "sent", str(sent[0].message_id), None, 2), (1, "sent", str(sent[1].message_id), None, 1),
                    (1, "failed", None, "Forbidden: Forbidden: bot was blocked by the user", 1),
                    (1, "sent", str(sent[2].message_id), None, 1)]
    assert [s.text for s in sent] == ["one", "two", "after"]


async def test_the_sender_outlives_an_error_its_claim_did_not_expect(
    store: Any, sending: Outbox, bot_api: fake_telegram.FakeBotApi, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A claim that raises what no StoreError is (a driver's surprise, a bug) costs that round, never the
    process's one sender: on a CI run asyncpg's InternalClientError ended it, and nothing was sent again."""
    claim, raised = store.claim_outbox, []

    async def once_broken(*args: Any, **kwargs: Any) -> Any:
        if not raised:
            raised.append(True)
            raise RuntimeError("not a StoreError")
        return await claim(*args, **kwargs)

    monkeypatch.setattr(store, "claim_outbox", once_broken)
    t = await turn_of(store, "42:1")
    await sending.enqueue("telegram", "42", "still sent", user_id=t.user_id)
    await bot_api.wait_sent(1)
    assert raised == [True] and [s.text for s in bot_api.sent] == ["still sent"]


async def _none(store: Any, recipient: str, surface: str = "telegram") -> bool:
    return await store.outbox_undelivered(surface, recipient) == 0


async def test_twilio_retry_after_then_sent_63016_explained_and_a_too_long_pause_fails(
    store: Any, clock: TestClock, sending: Outbox, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    t = await turn_of(store, "SM1", sender="+34600111222")
    twilio_api.enqueue(fake_twilio.rate_limited(20), fake_twilio.created(), fake_twilio.window_closed(),
                       fake_twilio.rate_limited(3600))
    await sending.enqueue("whatsapp", "+34600111222", "hola", user_id=t.user_id)
    await wait_until(lambda: len(twilio_api.requests) == 1, "the first attempt")
    await wait_until(lambda: _attempted(store, t.user_id), "the 429 recorded")
    [row] = await store.outbox_pending(t.user_id)
    assert (row["status"], row["attempts"]) == ("pending", 1)
    clock.advance(21)  # Retry-After 20 s
    sending.wake()
    await twilio_api.wait_for(1)
    await sending.enqueue("whatsapp", "+34600111222", "fuera de ventana", user_id=t.user_id)
    await sending.enqueue("whatsapp", "+34600111222", "espera mucho", user_id=t.user_id)
    await wait_until(lambda: _none(store, "+34600111222", "whatsapp"), "every part settled")
    rows = await deliveries(store, "telegram:+34600111222")
    assert rows[0] == (1, "sent", twilio_api.sent[0].sid, None, 2)
    assert rows[1][1] == "failed" and rows[1][3] == f"63016: {WINDOW_CLOSED_EXPLANATION}"
    assert rows[2][1] == "failed" and "Retry-After 3600 s is too long" in rows[2][3]
    assert twilio_api.sent[0].to == "whatsapp:+34600111222" and twilio_api.sent[0].body == "hola"


async def _attempted(store: Any, user_id: int) -> bool:
    rows = await store.outbox_pending(user_id)
    return bool(rows) and rows[0]["status"] == "pending" and rows[0]["attempts"] == 1


async def test_a_redelivery_of_a_message_whose_reply_is_stored_sends_it_without_a_model_call(
    store: Any, bot_api: fake_telegram.FakeBotApi,
) -> None:
    settings = Settings()
    pipeline = Pipeline(settings, store, build_chain(settings))
    api, files = api_urls(bot_api.base_url)
    calls = 0
    real = pipeline.chain.complete

    async def counted(messages: Any) -> Any:
        nonlocal calls
        calls += 1
        return await real(messages)

    pipeline.chain.complete = counted  # type: ignore[method-assign]
    tasks = TaskSet()
    async with Bot(fake_telegram.TOKEN, base_url=api, base_file_url=files) as bot:
        pipeline.outbox.register(TelegramTransport(bot))  # registered, not started: a crash before the send
        msg = inbound("42:5", "what now")
        out = await pipeline.handle(msg)
        assert out.status == "ok" and out.metadata["queued"] and calls == 1
        assert bot_api.sent == []  # stored and queued, never sent
        restarted = Pipeline(settings, store, pipeline.chain)
        restarted.outbox.register(TelegramTransport(bot))
        restarted.outbox.start(tasks)
        again = await restarted.handle(msg)  # the platform redelivers the message
        [sent] = await bot_api.wait_sent(1)
        await restarted.outbox.stop(timeout=5)
        await tasks.drain(timeout=5)
    assert again.status == "duplicate" and calls == 1
    assert sent.text == out.text and sent.chat_id == 42


async def test_the_recover_job_answers_a_stored_message_once_and_queues_its_reply(store: Any, clock: TestClock,
                                                                                   ) -> None:
    settings = Settings(recovery_grace=30, recovery_window=3600)
    pipeline = Pipeline(settings, store, build_chain(settings))
    pipeline.outbox.register(_Silent())
    stored = await store.ingest(inbound("42:8", "are you there", received_at=clock()), 3)
    assert stored is not None  # the process died before the turn: nothing is redelivered
    recover = recovery(settings, store, pipeline)
    ctx = JobContext("recover", "run-1")
    assert not await recover(ctx)  # within the grace period: its turn may still be coming
    clock.advance(31)
    assert await recover(ctx)
    assert not await recover(ctx)  # answered: never twice
    data = await store.inspect("telegram:42")
    [conversation] = data["conversations"]
    reply = conversation["messages"][1]
    assert (reply["role"], reply["reply_to"]) == ("assistant", stored.message.id)
    assert [(p["recipient"], p["status"]) for p in await store.outbox_pending(stored.user_id)] == [("42", "pending")]


async def test_recovery_apologizes_in_the_language_the_message_came_with(store: Any, clock: TestClock,
                                                                          model_server: FakeModelServer) -> None:
    model_server.script("m1", default=status(503))
    settings = Settings.from_mapping({"HILO_MODEL": "openai:m1", "HILO_MODEL_ATTEMPTS": "1",
                                      "OPENAI_BASE_URL": model_server.base_url + "/v1", "OPENAI_API_KEY": "sk-test",
                                      "HILO_RECOVERY_GRACE": "30"})
    pipeline = Pipeline(settings, store, build_chain(settings))
    pipeline.outbox.register(_Silent())
    stored = await store.ingest(inbound("42:9", "hola", received_at=clock(), language="es"), 1)
    assert stored is not None
    clock.advance(31)
    try:
        assert await recovery(settings, store, pipeline)(JobContext("recover", "run-1"))
    finally:
        await pipeline.chain.aclose()
    [part] = await store.outbox_pending(stored.user_id)
    assert part["text"] == catalog.t("model_unavailable", "es")  # not the default language's


async def test_recovery_answers_conversations_side_by_side_so_one_slow_turn_holds_up_no_other(
    store: Any, clock: TestClock, model_server: FakeModelServer,
) -> None:
    """Two people's messages left unanswered; the model takes its time over the first recovered turn: the other
    person's is answered meanwhile, within the same run (a run answered them one after the other, so under load
    a run of 50 took 42 s and messages left by a killed process waited that long: their conversations' later
    messages went out first, tests/test_scale_serve.py)."""
    gate = threading.Event()
    model_server.script("m1", [held(gate)], default=ok())
    settings = Settings.from_mapping({"HILO_MODEL": "openai:m1", "OPENAI_BASE_URL": model_server.base_url + "/v1",
                                      "OPENAI_API_KEY": "sk-test", "HILO_RECOVERY_GRACE": "30"})
    pipeline = Pipeline(settings, store, build_chain(settings))
    pipeline.outbox.register(_Silent())
    people = ("42", "7")
    for who in people:
        assert await store.ingest(inbound(f"{who}:1", "still there?", sender=who, received_at=clock()), 1)
    clock.advance(31)
    run = asyncio.ensure_future(recovery(settings, store, pipeline)(JobContext("recover", "run-1")))

    async def replies() -> int:
        conversations = [(await store.inspect(f"telegram:{who}"))["conversations"][0] for who in people]
        return sum(len(c["messages"]) - 1 for c in conversations)

    try:
        await wait_until(lambda: len(model_server.requests) == 2, "both people's turns at the model")
        await wait_until(replies, "the other person answered while the first turn is held")
        assert await replies() == 1
        gate.set()
        assert await run
        assert await replies() == 2
    finally:
        gate.set()
        await asyncio.gather(run, return_exceptions=True)
        await pipeline.chain.aclose()


class _Silent:
    """A transport that is registered (so replies are queued) and never asked to send here."""

    name = "telegram"
    max_part_chars = 4096

    async def send(self, recipient: str, text: str, reply_to: str | None) -> str:
        raise AssertionError("not started: nothing is sent")


async def test_two_senders_on_one_database_send_each_part_once_in_order(backend: Any) -> None:
    one, two = backend.make(), backend.make()
    await one.open()
    await two.open()
    try:
        for r in range(8):
            t = await turn_of(one, f"{r}:1", sender=str(r))
            await one.enqueue(t.user_id, None, Outgoing("telegram", str(r), ("p1", "p2", "p3")))
        sent: list[tuple[str, str]] = []

        async def sender(store: Any, owner: str) -> None:
            while True:
                items = await store.claim_outbox("telegram", owner, 60, limit=3)
                if not items:
                    if await _all_settled(store):
                        return
                    continue
                for item in items:
                    sent.append((item.recipient, item.text))
                    assert await store.settle_outbox(item.id, owner, "sent", provider_ref=f"{owner}-{item.id}")

        await asyncio.gather(sender(one, "a"), sender(two, "b"))
    finally:
        await one.close()
        await two.close()
    assert sorted(sent) == sorted((str(r), p) for r in range(8) for p in ("p1", "p2", "p3"))  # each once
    for r in range(8):
        assert [p for who, p in sent if who == str(r)] == ["p1", "p2", "p3"]  # in order per recipient


async def test_a_send_slower_than_its_lease_keeps_the_lease_and_goes_out_once(
    backend: Any, bot_api: fake_telegram.FakeBotApi,
) -> None:
    """Telegram takes three leases' time to answer (a slow provider, a loaded machine): the sender renews its
    lease while the send is in flight, so the other process's sender, claiming all along, never takes the part
    over and sends it a second time (it did: two sends of one part)."""
    lease = 1.0
    one, two = backend.make(), backend.make()
    await one.open()
    await two.open()
    gate = threading.Event()
    bot_api.hold(gate)
    tasks = TaskSet()
    api, files = api_urls(bot_api.base_url)
    try:
        async with Bot(fake_telegram.TOKEN, base_url=api, base_file_url=files) as bot:
            senders = [Outbox(store, lease=lease) for store in (one, two)]
            for outbox in senders:
                outbox.register(TelegramTransport(bot))
                outbox.start(tasks)
            t = await turn_of(one, "42:1")
            await senders[0].enqueue("telegram", "42", "slow", user_id=t.user_id)
            await wait_until(lambda: bot_api.held == 1, "the part's send in flight")
            began = time.monotonic()

            def three_leases_on() -> bool:
                for outbox in senders:  # both claim again and again meanwhile
                    outbox.wake()
                return time.monotonic() - began > 3 * lease

            await wait_until(three_leases_on, "three leases' time with the send in flight")
            assert bot_api.held == 1, "the other sender took the part over and sent it too"
            gate.set()
            await bot_api.wait_sent(1)
            await wait_until(lambda: _none(one, "42"), "the part settled")
            for outbox in senders:
                await outbox.stop(timeout=5)
            await tasks.drain(timeout=5)
    finally:
        await one.close()
        await two.close()
    assert [s.text for s in bot_api.sent] == ["slow"]


async def _all_settled(store: Any) -> bool:
    return all([await store.outbox_undelivered("telegram", str(r)) == 0 for r in range(8)])


async def test_a_notice_is_stored_with_its_parts_queued(store: Any) -> None:
    owner = await turn_of(store, "42:1")
    outbox = Outbox(store)
    outbox.register(_Silent())
    notice = await Notices(store, outbox).send(owner.user_id, "telegram", "42", "someone joined your account")
    claimed = await store.claim_outbox("telegram", "p", 60)
    assert [(c.message_id, c.recipient, c.text) for c in claimed] == [(notice.id, "42", "someone joined your account")]
    await Notices(store, outbox).send(owner.user_id, "web", "x", "a note")  # no transport: only stored
    assert len(await store.outbox_pending(owner.user_id)) == 1
