"""One turn end to end on every backend (the `backend` and `store` fixtures of conftest.py: SQLite and Postgres),
with the real model chain (echo, or the real SDKs against the fake provider): dedup, resume after a crash,
serialization of one conversation's turns, failure paths.

Turns across processes (two pipelines, two stores, one database; also behind pgbouncer) are in test_turn_lease.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from bot.config import Settings
from bot.models.factory import build_chain
from bot.pipeline import Pipeline
from bot.retry import RetryPolicy
from kernel import catalog
from kernel.errors import InputError, NotFound
from kernel.types import InboundMessage, Ingested
from tests.backends import Backend, TestClock
from tests.fakes import recorded_shapes as rec
from tests.fakes.model_server import FakeModelServer, in_stream, ok, replay, slow, status
from tests.waiting import no_sleep


def msg(surface: str, sender: str, ext: str, text: str, **kw: Any) -> InboundMessage:
    return InboundMessage(surface=surface, sender=sender, external_id=ext, text=text, **kw)


def echo_pipeline(store: Any, **settings: Any) -> Pipeline:
    s = Settings(**settings)
    return Pipeline(s, store, build_chain(s))


@pytest.fixture
async def fake_pipeline(model_server: FakeModelServer) -> AsyncIterator[Any]:
    """Builds pipelines whose chain talks to the fake provider through the real SDKs; closes them after."""
    chains: list[Any] = []

    def build(store: Any, server: FakeModelServer, env: dict[str, str]) -> Pipeline:
        s = Settings.from_mapping({"OPENAI_BASE_URL": server.base_url + "/v1", "ANTHROPIC_API_KEY": "x",
                                   "ANTHROPIC_BASE_URL": server.base_url, **env})
        chain = build_chain(s, policy=RetryPolicy(attempts=2, sleep=no_sleep), timeout=5)
        chains.append(chain)
        return Pipeline(s, store, chain)

    yield build
    for chain in chains:
        await chain.aclose()


async def test_one_turn_stores_message_reply_and_usage(store: Any) -> None:
    p = echo_pipeline(store)
    out = await p.handle(msg("telegram", "42", "u1", "hello there"))
    assert out.status == "ok" and "hello there" in out.text
    data = await store.inspect("telegram:42")
    [conv] = data["conversations"]
    assert [(m["role"], m["content"]) for m in conv["messages"]] == [("user", "hello there"), ("assistant", out.text)]
    assert conv["messages"][1]["reply_to"] == conv["messages"][0]["id"]
    [call] = data["model_calls"]
    assert call["model"] == "echo" and call["outcome"] == "ok" and call["tokens_in"] > 0


async def test_redelivery_is_dropped_also_after_restart(store: Any, backend: Backend) -> None:
    p = echo_pipeline(store)
    assert (await p.handle(msg("whatsapp", "+34600", "SM1", "hola"))).status == "ok"
    assert (await p.handle(msg("whatsapp", "+34600", "SM1", "hola"))).status == "duplicate"
    await store.close()
    st2 = backend.make()  # a new process: only the database remembers
    await st2.open()
    try:
        out = await echo_pipeline(st2).handle(msg("whatsapp", "+34600", "SM1", "hola"))
        assert out.status == "duplicate"
        data = await st2.inspect("whatsapp:+34600")
        assert len(data["conversations"][0]["messages"]) == 2
        assert len(data["model_calls"]) == 1
    finally:
        await st2.close()


async def test_history_survives_a_restart(store: Any, backend: Backend) -> None:
    await echo_pipeline(store).handle(msg("telegram", "7", "a", "my cat is called Mishi"))
    await store.close()
    st2 = backend.make()
    await st2.open()
    try:
        user_id = await st2.user_id("telegram:7")
        ctx = await echo_pipeline(st2).assemble_context(
            user_id=user_id, surface="telegram", conversation_id=await st2.find_conversation(user_id, "telegram"),
            current_message_id=None, text="what is my cat called?")
        assert any("Mishi" in m.content for m in ctx.messages if m.block == "conversation")
    finally:
        await st2.close()


async def test_first_contact_creates_a_user_and_one_singleton_conversation(store: Any) -> None:
    p = echo_pipeline(store)
    a = await p.handle(msg("telegram", "42", "1", "one"))
    b = await p.handle(msg("telegram", "42", "2", "two"))
    c = await p.handle(msg("telegram", "43", "3", "other person"))
    assert a.user_id == b.user_id != c.user_id
    assert a.conversation_id == b.conversation_id != c.conversation_id


async def test_web_has_many_conversations_each_owned(store: Any) -> None:
    p = echo_pipeline(store)
    first = await p.handle(msg("web", "v1", "v1:1", "first"))
    same = await p.handle(msg("web", "v1", "v1:2", "again", conversation_ref=str(first.conversation_id)))
    new = await p.handle(msg("web", "v1", "v1:3", "fresh start"))
    assert same.conversation_id == first.conversation_id != new.conversation_id
    with pytest.raises(NotFound):
        await p.handle(msg("web", "v2", "v2:1", "let me in", conversation_ref=str(first.conversation_id)))
    other = await store.inspect("web:v2")
    assert other is None or all(not c["messages"] for c in other["conversations"])


@pytest.mark.parametrize("text", ["", "   ", "x" * 4097])
async def test_refused_input_stores_nothing(store: Any, text: str) -> None:
    with pytest.raises(InputError) as info:
        await echo_pipeline(store).handle(msg("telegram", "42", "e1", text))
    assert info.value.key in ("empty_message", "message_too_long")
    assert await store.inspect("telegram:42") is None


async def test_people_never_see_each_other(store: Any) -> None:
    p = echo_pipeline(store)
    await p.handle(msg("telegram", "alice", "a1", "my secret password is tangerine"))
    out = await p.handle(msg("telegram", "bob", "b1", "what is the secret password tangerine?"))
    assert "my secret password" not in out.text
    bob = await store.user_id("telegram:bob")
    ctx = await p.assemble_context(user_id=bob, surface="whatsapp", conversation_id=None,
                                   current_message_id=None, text="password tangerine")
    assert not any("my secret password" in m.content for m in ctx.messages)


async def test_cross_surface_message_reaches_the_model(store: Any) -> None:
    p = echo_pipeline(store)
    await p.handle(msg("telegram", "alice", "t1", "I live in Valencia", handle="alice"))
    out = await p.handle(msg("whatsapp", "alice", "w1", "where do I live?", handle="alice"))
    assert "I live in Valencia" in out.text  # echo shows what it recalled


async def test_a_turn_reads_its_context_with_its_message(store: Any, backend: Backend) -> None:
    p = echo_pipeline(store)
    await p.handle(msg("telegram", "carla", "t1", "my cat is called Miso", handle="carla"))
    await p.handle(msg("whatsapp", "carla", "w1", "the vet is on Friday", handle="carla"))
    before = dict(store.counters)
    out = await p.handle(msg("telegram", "carla", "t2", "what is my cat called?", handle="carla"))
    assert "my cat is called Miso" in out.text and "the vet is on Friday" in out.text  # conversation, other surface
    # SQLite: ingest and the context's read in one hop and one transaction, the reply in another; Postgres: one
    # round trip each
    trips = store.counters["round_trips"] - before["round_trips"]
    assert trips == (2 if backend.name == "sqlite" else 3)
    assert store.counters["transactions"] - before["transactions"] == (2 if backend.name == "sqlite" else 3)


async def test_a_turn_whose_text_is_heard_first_reads_its_context_for_what_was_heard(store: Any) -> None:
    p = echo_pipeline(store)
    ten_days_ago = store.clock() - timedelta(days=10)  # no longer a recent message of another surface: recall's
    await store.ingest(msg("whatsapp", "dora", "w1", "my trip to Zanzibar is booked", handle="dora",
                           received_at=ten_days_ago), 6)
    placeholder = msg("telegram", "dora", "t1", "[voice note]", handle="dora")
    taken = await p.take(placeholder)  # its context is read with it: for the placeholder's words

    async def heard(m: InboundMessage, turn: Ingested) -> tuple[InboundMessage, Ingested]:
        text = "when is my Zanzibar trip?"
        await store.rewrite_message(turn.user_id, turn.message.id, text, 5)
        return replace(m, text=text), replace(turn, message=replace(turn.message, content=text, token_count=5))

    out = await p.run(placeholder, taken, prepare=heard)
    assert "my trip to Zanzibar is booked" in out.text  # recalled for what was heard


async def test_turns_of_one_conversation_never_interleave(
    store: Any, model_server: FakeModelServer, fake_pipeline: Any
) -> None:
    p = fake_pipeline(store, model_server, {"HILO_MODEL": "openai:m1"})
    model_server.enqueue(slow(0.5))  # the first turn's model is slow
    first = asyncio.create_task(p.handle(msg("telegram", "9", "s1", "first question")))
    await model_server.wait_requests(1)  # the first turn is at the model
    second = asyncio.create_task(p.handle(msg("telegram", "9", "s2", "second question")))
    out1, out2 = await asyncio.gather(first, second)
    assert out1.text == "fake reply to: first question"
    # the second turn started after the first had its answer: the model saw question 1 AND its reply
    second_request = model_server.requests_for("m1")[-1].body["messages"]
    contents = [m["content"] for m in second_request]
    assert "first question" in contents and "fake reply to: first question" in contents
    assert contents[-1] == "second question"
    data = await store.inspect("telegram:9")
    roles = [(m["role"], m["content"]) for m in data["conversations"][0]["messages"]]
    assert roles == [("user", "first question"), ("user", "second question"),
                     ("assistant", out1.text), ("assistant", out2.text)] or roles == [
        ("user", "first question"), ("assistant", out1.text), ("user", "second question"), ("assistant", out2.text)]


async def test_primary_down_fallback_answers_and_both_are_recorded(
    store: Any, model_server: FakeModelServer, fake_pipeline: Any
) -> None:
    model_server.script("primary", default=status(503))
    p = fake_pipeline(store, model_server,
                      {"HILO_MODEL": "openai:primary", "HILO_FALLBACK_MODELS": "anthropic:backup"})
    out = await p.handle(msg("telegram", "5", "f1", "are you there?"))
    assert out.status == "ok" and out.text == "fake reply to: are you there?"
    calls = (await store.inspect("telegram:5"))["model_calls"]
    assert [(c["model"], c["outcome"]) for c in calls] == [
        ("openai:primary", "server_error"), ("openai:primary", "server_error"), ("anthropic:backup", "ok")]
    assert calls[-1]["fallback_from"] == "openai:primary"


async def test_all_models_down_gives_a_clear_reply_and_keeps_the_message(
    store: Any, model_server: FakeModelServer, fake_pipeline: Any
) -> None:
    model_server.script("primary", default=status(503))
    model_server.script("backup", default=status(500))
    p = fake_pipeline(store, model_server,
                      {"HILO_MODEL": "openai:primary", "HILO_FALLBACK_MODELS": "openai:backup"})
    out = await p.handle(msg("telegram", "5", "d1", "hola", language="es"))
    assert out.status == "failed" and "vuelve a intentarlo" in out.text
    data = await store.inspect("telegram:5")
    assert [m["content"] for m in data["conversations"][0]["messages"]] == ["hola"]
    assert len(data["model_calls"]) == 4 and all(c["outcome"] == "server_error" for c in data["model_calls"])


async def test_rate_limited_then_success(store: Any, model_server: FakeModelServer, fake_pipeline: Any) -> None:
    from tests.fakes.model_server import rate_limited

    model_server.enqueue(rate_limited(0.01))
    p = fake_pipeline(store, model_server, {"HILO_MODEL": "openai:m1"})
    out = await p.handle(msg("telegram", "5", "r1", "hi"))
    assert out.status == "ok"
    calls = (await store.inspect("telegram:5"))["model_calls"]
    assert [c["outcome"] for c in calls] == ["rate_limited", "ok"]


async def test_in_a_group_the_persons_private_memory_stays_out(store: Any) -> None:
    p = echo_pipeline(store)
    await p.handle(msg("telegram", "55", "p1", "my bank pin is 4321 tangerine"))
    await p.handle(msg("whatsapp", "55", "w1", "tangerine pin note", handle="telegram:55"))
    out = await p.handle(msg("telegram", "55", "g1", "what is my pin tangerine?", conversation_ref="group:-1",
                             metadata={"audience": "group"}))
    assert "4321" not in out.text and "pin note" not in out.text
    private = await p.handle(msg("telegram", "55", "p2", "what is my pin tangerine?"))
    assert "pin note" in private.text  # the same question in private recalls across surfaces


async def test_a_database_failure_after_the_model_still_delivers_the_answer(store: Any, backend: Backend) -> None:
    p = echo_pipeline(store)
    backend.fail_replies("disk full")  # every reply insert fails, as a full disk or a lost connection would
    out = await p.handle(msg("telegram", "8", "x1", "are you there?"))
    assert out.status == "ok" and "are you there?" in out.text and out.reply_id is None
    data = await store.inspect("telegram:8")
    assert [m["content"] for m in data["conversations"][0]["messages"]] == ["are you there?"]


async def test_commands_are_answered_without_a_turn_on_every_surface(store: Any) -> None:
    from kernel import catalog

    p = echo_pipeline(store)
    await p.handle(msg("whatsapp", "+34600", "w1", "hola"))
    code_reply = await p.handle(msg("whatsapp", "+34600", "w2", "/link", language="es"))
    assert code_reply.status == "command" and "/link" in code_reply.text
    code = code_reply.text.split("/link ")[1].split(" ")[0].rstrip(".,")
    prompt = await p.handle(msg("web", "visitor", "v1", f"/link {code}"))
    assert prompt.status == "command" and prompt.text.endswith(f"/link {code} yes")
    done = await p.handle(msg("web", "visitor", "v2", f"/link {code} yes"))
    assert done.status == "command" and done.text == catalog.t("link_done", "en")
    assert await store.identity_user("web", "visitor") == await store.identity_user("whatsapp", "+34600")
    data = await store.inspect("whatsapp:+34600")
    assert data["conversations"][0]["messages"][0]["content"] == "hola"
    assert not any("/link" in m["content"] for c in data["conversations"] for m in c["messages"])
    assert len(data["model_calls"]) == 1  # only "hola" reached a model
    unknown = await p.handle(msg("web", "visitor", "v2", "/etc/hosts is a file"))
    assert unknown.status == "ok"  # not a command hilo knows: an ordinary message


async def test_a_turn_that_died_before_the_model_is_answered_on_redelivery(store: Any, backend: Backend) -> None:
    # the first process stored the message and died before calling any model
    from datetime import UTC, datetime, timedelta

    await store.ingest(msg("telegram", "3", "crash-1", "did you get this?"), 5)
    old = msg("telegram", "3", "old-1", "an old message", received_at=datetime.now(UTC) - timedelta(days=2))
    await store.ingest(old, 3)
    await store.close()
    st2 = backend.make()
    await st2.open()
    try:
        p = echo_pipeline(st2)
        resumed = await p.handle(msg("telegram", "3", "crash-1", "did you get this?"))
        assert resumed.status == "ok" and "did you get this?" in resumed.text
        assert (await p.handle(msg("telegram", "3", "crash-1", "did you get this?"))).status == "duplicate"
        assert (await p.handle(old)).status == "duplicate"  # too old to resume: only dropped
        data = await st2.inspect("telegram:3")
        contents = [m["content"] for m in data["conversations"][0]["messages"]]
        assert contents.count("did you get this?") == 1 and len(data["model_calls"]) == 1
    finally:
        await st2.close()


async def test_a_redelivery_during_the_turn_is_a_duplicate(store: Any, model_server: FakeModelServer,
                                                          fake_pipeline: Any) -> None:
    p = fake_pipeline(store, model_server, {"HILO_MODEL": "openai:m1"})
    model_server.enqueue(slow(0.4))
    first = asyncio.create_task(p.handle(msg("telegram", "4", "d-1", "slow one")))
    await model_server.wait_requests(1)  # the turn is at the model
    again = await p.handle(msg("telegram", "4", "d-1", "slow one"))
    assert again.status == "duplicate"
    assert (await first).status == "ok"
    assert len(model_server.requests_for("m1")) == 1


# -- answers without text, and cut answers (the SDKs' own recordings replayed by the fake provider) --------------

CUT_NOTE = "\n\n{model_cut_note}"

ANSWERS_WITHOUT_TEXT = [
    # model, behaviour, streamed, language, what the person reads (catalogue keys in braces), outcome
    ("openai:m1", replay(body=rec.OPENAI_REFUSAL_JSON), False, "en", rec.OPENAI_REFUSAL_TEXT, "refused"),
    ("openai:m1", replay(stream=rec.OPENAI_REFUSAL_STREAM), True, "en", rec.OPENAI_REFUSAL_STREAM_TEXT, "refused"),
    ("anthropic:c1", replay(stream=rec.ANTHROPIC_REFUSAL_STREAM), True, "es", "{model_refused}", "refused"),
    # a content filter stopped it after some text: what was shown is void
    ("openai:m1", replay(stream=rec.OPENAI_CONTENT_FILTER_STREAM), True, "en", "{model_refused}", "refused"),
    ("openai:m1", replay(body=rec.OPENAI_CONTENT_FILTER_JSON), False, "es", "{model_refused}", "refused"),
    ("anthropic:c1", replay(stream=rec.ANTHROPIC_REFUSAL_STREAM), False, "en", "{model_refused}", "refused"),
    ("openai:m1", replay(body=rec.OPENAI_TOOL_CALLS_JSON), False, "es", "{model_no_answer}", "tool_calls"),
    ("openai:m1", replay(stream=rec.OPENAI_TOOL_CALLS_STREAM), True, "en", "{model_no_answer}", "tool_calls"),
    ("anthropic:c1", replay(body=rec.ANTHROPIC_TOOL_ONLY_JSON), False, "en", "{model_no_answer}", "tool_calls"),
    ("anthropic:c1", ok(""), True, "en", "{model_no_answer}", "empty"),
    ("openai:m1", ok(""), False, "en", "{model_no_answer}", "empty"),
    ("openai:m1", replay(body=rec.OPENAI_LENGTH_JSON), False, "en", rec.OPENAI_LENGTH_TEXT + CUT_NOTE, "cut"),
    ("openai:m1", replay(stream=rec.OPENAI_LENGTH_STREAM), True, "es", rec.OPENAI_LENGTH_TEXT + CUT_NOTE, "cut"),
    ("anthropic:c1", replay(stream=rec.ANTHROPIC_MAX_TOKENS_STREAM), True, "en",
     rec.ANTHROPIC_MAX_TOKENS_TEXT + CUT_NOTE, "cut"),
]


@pytest.mark.parametrize(("model", "behaviour", "streamed", "lang", "expected", "outcome"), ANSWERS_WITHOUT_TEXT)
async def test_an_answer_without_text_is_never_delivered_as_nothing(
    store: Any, model_server: FakeModelServer, fake_pipeline: Any,
    model: str, behaviour: Any, streamed: bool, lang: str, expected: str, outcome: str,
) -> None:
    model_server.enqueue(behaviour)
    p = fake_pipeline(store, model_server, {"HILO_MODEL": model})
    shown: list[str] = []

    async def on_delta(text: str, reset: bool) -> None:
        if reset:
            shown.clear()
        shown.append(text)

    out = await p.handle(msg("telegram", "77", "a1", "hello?", language=lang),
                         on_delta=on_delta if streamed else None)
    want = expected
    for key in ("model_refused", "model_no_answer", "model_cut_note"):
        want = want.replace("{" + key + "}", catalog.t(key, lang))
    assert (out.status, out.text) == ("ok", want)
    if streamed:
        assert "".join(shown) == want  # what the person watched arrive is what they got
    data = await store.inspect("telegram:77")
    assert [(m["role"], m["content"]) for m in data["conversations"][0]["messages"]] == [
        ("user", "hello?"), ("assistant", want)]
    assert [c["outcome"] for c in data["model_calls"]] == [outcome]


async def test_a_refusal_after_some_streamed_text_resets_what_was_shown(
    store: Any, model_server: FakeModelServer, fake_pipeline: Any,
) -> None:
    # Anthropic's stream classifiers can stop an answer already under way: the recorded refusal, with the text of
    # the recorded tool_use stream's first block before it (both anthropic-sdk-python fixtures)
    head = rec.ANTHROPIC_TOOL_USE_STREAM.split("event: content_block_stop")[0]
    tail = "event: content_block_stop" + rec.ANTHROPIC_REFUSAL_STREAM.split("event: content_block_stop")[1]
    model_server.enqueue(replay(stream=head + tail))
    p = fake_pipeline(store, model_server, {"HILO_MODEL": "anthropic:c1"})
    events: list[tuple[str, bool]] = []

    async def on_delta(text: str, reset: bool) -> None:
        events.append((text, reset))

    out = await p.handle(msg("web", "v1", "r1", "hello?"), on_delta=on_delta)
    assert out.text == catalog.t("model_refused", "en")
    assert events[-2:] == [("", True), (out.text, False)]
    assert "".join(t for t, _ in events[:-2]) == rec.ANTHROPIC_TOOL_USE_TEXT


@pytest.mark.parametrize(("first", "streamed"), [
    (in_stream(rec.OPENROUTER_MIDSTREAM_ERROR), True),
    (replay(body=rec.openrouter_error_body(502, "Your chosen model is down")), False),
])
async def test_an_error_inside_a_200_answer_is_retried_and_the_person_gets_the_answer(
    store: Any, model_server: FakeModelServer, fake_pipeline: Any, first: Any, streamed: bool,
) -> None:
    # one model, no fallback: before, this was one attempt and then "try again shortly"
    model_server.enqueue(first)
    p = fake_pipeline(store, model_server, {"HILO_MODEL": "openai:m1"})
    shown: list[str] = []

    async def on_delta(text: str, reset: bool) -> None:
        if reset:
            shown.clear()
        shown.append(text)

    out = await p.handle(msg("telegram", "78", "e1", "are you there?"), on_delta=on_delta if streamed else None)
    assert (out.status, out.text) == ("ok", "fake reply to: are you there?")
    if streamed:
        assert "".join(shown) == out.text
    calls = (await store.inspect("telegram:78"))["model_calls"]
    assert [(c["model"], c["outcome"]) for c in calls] == [("openai:m1", "server_error"), ("openai:m1", "ok")]


async def test_a_crashed_turn_is_resumed_only_within_the_resume_window(store: Any, clock: TestClock) -> None:
    window = 3600  # seconds: a turn that never ran is resumed if its message was "stored within the last hour"
    await store.ingest(msg("telegram", "3", "late-1", "did you get this?"), 5)  # the process died here
    await store.ingest(msg("telegram", "3", "soon-1", "and this?"), 3)
    clock.advance(window - 60)
    p = echo_pipeline(store)
    resumed = await p.handle(msg("telegram", "3", "soon-1", "and this?"))
    assert resumed.status == "ok" and "and this?" in resumed.text
    clock.advance(120)  # an hour and a minute after it arrived: too late to answer, only dropped
    assert (await p.handle(msg("telegram", "3", "late-1", "did you get this?"))).status == "duplicate"
    data = await store.inspect("telegram:3")
    assert [m["content"] for m in data["conversations"][0]["messages"]] == [
        "did you get this?", "and this?", resumed.text]


# -- what Postgres refuses (NUL in text and jsonb) is dropped, the message kept: on every backend ----------------

async def test_nul_inside_text_is_stored_without_it_and_answered(store: Any) -> None:
    """Postgres refuses NUL in text columns: the message is kept, without its NULs, instead of being lost."""
    out = await echo_pipeline(store).handle(
        InboundMessage(surface="whatsapp", sender="+34600", external_id="SMnul", text="hi\x00there"))
    assert out.status == "ok" and "hithere" in out.text
    data = await store.inspect("whatsapp:+34600")
    assert [m["content"] for c in data["conversations"] for m in c["messages"] if m["role"] == "user"] == [
        "hithere"]


async def test_nul_in_metadata_is_dropped_too(store: Any) -> None:
    """A NUL in a WhatsApp profile name would lose the message on Postgres the same way (jsonb): the metadata an
    InboundMessage carries loses its NULs as well, at any depth."""
    m = InboundMessage(surface="whatsapp", sender="+34601", external_id="SMid", text="hello",
                       metadata={"profile_name": "Ana\x00", "media": [{"type": "image/\x00png"}], "n": 1})
    assert m.metadata == {"profile_name": "Ana", "media": [{"type": "image/png"}], "n": 1}
    out = await echo_pipeline(store).handle(m)
    assert out.status == "ok"
    data = await store.inspect("whatsapp:+34601")
    [user_message] = [m for c in data["conversations"] for m in c["messages"] if m["role"] == "user"]
    assert user_message["metadata"]["profile_name"] == "Ana"


async def test_a_turn_counts_a_use_of_the_memories_its_context_carried(store: Any) -> None:
    p = echo_pipeline(store)
    assert (await p.handle(msg("telegram", "42", "u1", "/remember my parrot is called Kiwi"))).status == "command"
    uid = await store.identity_user("telegram", "42")
    [kiwi] = await store.memories(uid)
    assert kiwi.access_count == 0
    out = await p.handle(msg("telegram", "42", "u2", "how is Kiwi?"))
    assert out.status == "ok" and "my parrot is called Kiwi" in out.text  # echo shows the context it got
    [used] = await store.memories(uid)
    assert used.access_count == 1 and used.last_accessed_at is not None
    assert (await p.handle(msg("telegram", "42", "u3", "/forget kiwi"))).status == "command"
    assert await store.memories(uid) == []
    ctx = await p.assemble_context(user_id=uid, surface="telegram", conversation_id=None, current_message_id=None,
                                   text="how is Kiwi?")
    assert [i for i in ctx.items if i.kind == "fact"] == [] and ctx.memory_ids() == []
