"""Answers without text, cut answers and errors inside a 200 answer, through the real openai and anthropic SDKs
against the fake provider replaying the providers' own recordings (tests/fakes/recorded_shapes.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bot import answers
from bot.models.base import Completion, Reset
from bot.models.chain import ModelChain
from kernel import catalog
from tests.fakes import recorded_shapes as rec
from tests.fakes.model_server import Behaviour, FakeModelServer, cut_event, in_stream, ok, replay
from tests.test_models import (  # noqa: F401  (fixtures)
    MESSAGES,
    REPLY,
    collect,
    make_chain,
    outcomes,
    policy,
    sleeps,
)


async def answer(chain: ModelChain, stream: bool) -> tuple[str, list[str], list[Any]]:
    """(text, the outcome recorded for each call, events) of one chain answer, streamed or not; for a stream, the
    text shown (after the last Reset) must be the answer's text."""
    if not stream:
        result = await chain.complete(MESSAGES)
        return result.text, [c.outcome for c in result.calls], []
    events, result = await collect(chain)
    resets = [i for i, e in enumerate(events) if isinstance(e, Reset)]
    shown = "".join(e for e in events[(resets[-1] + 1 if resets else 0):] if isinstance(e, str))
    assert shown == result.text, "what was streamed is what the answer says"
    return result.text, [c.outcome for c in result.calls], events


# -- item 7: refusals, tool calls only, empty completions -------------------------------------------------------

ANSWERS = [
    # model, behaviour, streamed, text, outcome
    ("openai:m1", replay(body=rec.OPENAI_REFUSAL_JSON), False, rec.OPENAI_REFUSAL_TEXT, "refused"),
    ("openai:m1", replay(stream=rec.OPENAI_REFUSAL_STREAM), True, rec.OPENAI_REFUSAL_STREAM_TEXT, "refused"),
    ("openai:m1", replay(body=rec.OPENAI_CONTENT_FILTER_JSON), False, "", "refused"),
    ("openai:m1", replay(body=rec.OPENAI_TOOL_CALLS_JSON), False, "", "tool_calls"),
    ("openai:m1", replay(stream=rec.OPENAI_TOOL_CALLS_STREAM), True, "", "tool_calls"),
    ("openai:m1", ok(""), False, "", "empty"),
    ("openai:m1", ok(""), True, "", "empty"),
    # Anthropic's refusal carries no text of its own (what was written before it is void)
    ("anthropic:c1", replay(stream=rec.ANTHROPIC_REFUSAL_STREAM), True, "", "refused"),
    ("anthropic:c1", replay(stream=rec.ANTHROPIC_REFUSAL_STREAM), False, "", "refused"),
    ("anthropic:c1", replay(body=rec.ANTHROPIC_TOOL_ONLY_JSON), False, "", "tool_calls"),
    ("anthropic:c1", replay(stream=rec.ANTHROPIC_TOOL_USE_STREAM), True, rec.ANTHROPIC_TOOL_USE_TEXT, "tool_calls"),
    ("anthropic:c1", ok(""), False, "", "empty"),
    ("anthropic:c1", ok(""), True, "", "empty"),
    # -- item 8: cut by the token limit
    ("openai:m1", replay(body=rec.OPENAI_LENGTH_JSON), False, rec.OPENAI_LENGTH_TEXT, "cut"),
    ("openai:m1", replay(stream=rec.OPENAI_LENGTH_STREAM), True, rec.OPENAI_LENGTH_TEXT, "cut"),
    ("anthropic:c1", replay(stream=rec.ANTHROPIC_MAX_TOKENS_STREAM), True, rec.ANTHROPIC_MAX_TOKENS_TEXT, "cut"),
    ("anthropic:c1", replay(stream=rec.ANTHROPIC_MAX_TOKENS_STREAM), False, rec.ANTHROPIC_MAX_TOKENS_TEXT, "cut"),
]


@pytest.mark.parametrize(("model", "behaviour", "streamed", "text", "outcome"), ANSWERS)
async def test_the_real_outcome_of_an_answer_is_recorded(
    make_chain: Callable[..., ModelChain], model_server: FakeModelServer,  # noqa: F811
    model: str, behaviour: Behaviour, streamed: bool, text: str, outcome: str,
) -> None:
    model_server.enqueue(behaviour)
    chain = make_chain(model)
    got_text, got_outcomes, _ = await answer(chain, streamed)
    assert (got_text, got_outcomes) == (text, [outcome])  # answered: never retried
    assert [r.stream for r in model_server.requests] == [streamed]
    assert chain.breakers[model].failures == 0  # the model works; its answer is what it is


async def test_a_call_record_carries_the_outcome(make_chain: Callable[..., ModelChain],  # noqa: F811
                                                 model_server: FakeModelServer) -> None:
    model_server.enqueue(replay(body=rec.OPENAI_REFUSAL_JSON))
    result = await make_chain("openai:m1").complete(MESSAGES)
    assert outcomes(result.calls) == [("openai:m1", "refused")]
    assert (result.calls[0].tokens_in, result.calls[0].tokens_out) == (79, 12)  # the recorded usage


# -- item 9: errors inside a 200 answer are classified like their HTTP equivalents ----------------------------

IN_BAND = [
    # model, first behaviour, streamed, outcome of the first attempt
    ("openai:m1", in_stream(rec.OPENROUTER_MIDSTREAM_ERROR), True, "server_error"),
    ("openai:m1", in_stream(rec.vllm_stream_error("CUDA out of memory")), True, "server_error"),
    ("openai:m1", in_stream(f"data: {rec.vllm_bare_error('engine dead')}\n\n"), True, "server_error"),
    ("openai:m1", in_stream(rec.vllm_stream_error("slow down", "RateLimitError", 429)), True, "rate_limited"),
    ("openai:m1", cut_event(), True, "connection"),
    ("anthropic:c1", in_stream(rec.ANTHROPIC_OVERLOADED_EVENT), True, "rate_limited"),
    ("anthropic:c1", cut_event(), True, "connection"),
    ("openai:m1", replay(body=rec.openrouter_error_body(502, "Your chosen model is down")), False, "server_error"),
    ("openai:m1", replay(body=rec.openrouter_error_body(429, "You are being rate limited")), False, "rate_limited"),
    ("openai:m1", replay(body=rec.vllm_bare_error("engine dead")), False, "server_error"),
    ("anthropic:c1", replay(body=rec.ANTHROPIC_OVERLOADED_BODY), False, "rate_limited"),
]


@pytest.mark.parametrize(("model", "first", "streamed", "outcome"), IN_BAND)
async def test_a_transient_error_inside_a_200_answer_is_retried_on_the_same_model(
    make_chain: Callable[..., ModelChain], model_server: FakeModelServer,  # noqa: F811
    model: str, first: Behaviour, streamed: bool, outcome: str,
) -> None:
    model_server.enqueue(first)  # then a normal answer
    text, got, events = await answer(make_chain(model), streamed)  # one model: no fallback to hide behind
    assert (text, got) == (REPLY, [outcome, "ok"])
    if streamed:
        assert sum(isinstance(e, Reset) for e in events) == 1  # the text shown before the error is void
    assert [(r.model, r.stream) for r in model_server.requests] == [(model.split(":")[1], streamed)] * 2


async def test_in_band_error_records_its_class_and_status(make_chain: Callable[..., ModelChain],  # noqa: F811
                                                          model_server: FakeModelServer) -> None:
    model_server.enqueue(in_stream(rec.OPENROUTER_MIDSTREAM_ERROR))
    _, result = await collect(make_chain("openai:m1"))
    assert outcomes(result.calls) == [("openai:m1", "server_error"), ("openai:m1", "ok")]
    assert result.calls[0].error == "ServerError status=500"
    assert "Provider disconnected" not in (result.calls[0].error or "")  # never the provider's text


@pytest.mark.parametrize(("first", "streamed"), [
    (in_stream(rec.vllm_stream_error("prompt too long", "BadRequestError", 400)), True),
    (replay(body=rec.openrouter_error_body(400, "Bad Request")), False),
    (replay(body=rec.vllm_bare_error("no such model", "NotFoundError", 404)), False),
])
async def test_a_permanent_error_inside_a_200_answer_goes_to_the_next_model(
    make_chain: Callable[..., ModelChain], model_server: FakeModelServer,  # noqa: F811
    first: Behaviour, streamed: bool,
) -> None:
    model_server.script("m1", [first])
    text, got, _ = await answer(make_chain("openai:m1", "openai:m2"), streamed)
    assert (text, got) == (REPLY, ["error", "ok"])
    assert [r.model for r in model_server.requests] == ["m1", "m2"]  # not retried on m1


def test_the_reply_for_each_outcome() -> None:
    note = catalog.t("model_cut_note", "es")
    assert answers.reply_text(Completion("", 1, 0, "cut"), "es") == note  # cut before any text: the note alone
    assert answers.reply_text(Completion("Half a sente ", 1, 9, "cut"), "es") == "Half a sente\n\n" + note
    assert answers.reply_text(Completion(" \n", 1, 1, "empty"), "en") == catalog.t("model_no_answer", "en")
    assert answers.reply_text(Completion("No.", 1, 1, "refused"), "en") == "No."
    assert answers.reply_text(Completion("", 1, 1, "refused"), "es") == catalog.t("model_refused", "es")
    assert answers.reply_text(Completion("Let me look.", 1, 1, "tool_calls"), "en") == "Let me look."
