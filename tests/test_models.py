"""Model providers, retry policy and fallback chain, through the real openai and anthropic SDKs against the
loopback fake provider (tests/fakes/model_server.py). No test sleeps for real: waits are recorded."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest

from bot.config import ModelSpec, Settings
from bot.models.anthropic_provider import to_anthropic
from bot.models.base import (
    AllModelsFailed,
    Completion,
    ModelTimeout,
    RateLimited,
    Reset,
    ServerError,
    error_for_status,
)
from bot.models.chain import ChainResult, ModelChain
from bot.models.echo import EchoProvider
from bot.models.factory import build_chain
from bot.models.retry import complete_with_retry
from bot.retry import RetryPolicy
from kernel.types import ChatMessage, ModelCallRecord
from tests.fakes import model_server as fake
from tests.fakes.model_server import (
    FakeModelServer,
    cut,
    ok,
    overloaded,
    rate_limited,
    slow,
    status,
)

# The fake provider's fixtures (a conftest may instead list "tests.fakes.model_server" in pytest_plugins).
model_server_session = fake.model_server_session
model_server = fake.model_server

MESSAGES = [
    ChatMessage("system", "You are hilo.", block="system"),
    ChatMessage("system", "What you know about this person:\n- my dog is called Rufo\n- I live in Lisbon",
                block="memory"),
    ChatMessage("system", "Recently on telegram:\n- [telegram 09:12] I bought a bike", block="cross_surface"),
    ChatMessage("user", "hello", block="conversation"),
    ChatMessage("assistant", "hi!", block="conversation"),
    ChatMessage("user", "what is my dog called?", block="new_message"),
]
REPLY = "fake reply to: what is my dog called?"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def policy(sleeps: list[float]) -> RetryPolicy:
    async def record(seconds: float) -> None:
        sleeps.append(seconds)
        await asyncio.sleep(0)

    return RetryPolicy(attempts=3, backoff_base=0.001, backoff_max=0.01, sleep=record)


@pytest.fixture
async def make_chain(model_server: FakeModelServer, policy: RetryPolicy) -> AsyncIterator[Callable[..., ModelChain]]:
    chains: list[ModelChain] = []

    def make(model: str, *fallbacks: str, **options: Any) -> ModelChain:
        base = model_server.base_url
        settings = Settings.from_mapping({
            "HILO_MODEL": model, "HILO_FALLBACK_MODELS": ",".join(fallbacks),
            "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": base + "/v1",
            "ANTHROPIC_API_KEY": "ak-test", "ANTHROPIC_BASE_URL": base,
            "HILO_MODEL_TIMEOUT": str(options.pop("timeout", 5)),
        })
        chain = build_chain(settings, policy=options.pop("policy", policy), **options)
        chains.append(chain)
        return chain

    yield make
    for chain in chains:
        await chain.aclose()


async def collect(chain: ModelChain, messages: Sequence[ChatMessage] = MESSAGES) -> tuple[list[Any], ChainResult]:
    events = [event async for event in chain.stream(messages)]
    assert isinstance(events[-1], ChainResult)
    return events[:-1], events[-1]


def outcomes(calls: Sequence[ModelCallRecord]) -> list[tuple[str, str]]:
    return [(c.model, c.outcome) for c in calls]


# -- providers through the real SDKs --------------------------------------------------------------------------

async def test_openai_complete(make_chain: Callable[..., ModelChain], model_server: FakeModelServer) -> None:
    result = await make_chain("openai:m1").complete(MESSAGES)
    assert result.text == REPLY and result.spec.label == "openai:m1"
    assert result.completion.tokens_in > 0 and result.completion.tokens_out == len(REPLY.split())
    (call,) = result.calls
    assert (call.model, call.provider, call.outcome, call.fallback_from, call.error) == \
        ("openai:m1", "openai", "ok", None, None)
    (request,) = model_server.requests
    assert request.path == "/v1/chat/completions" and not request.stream
    assert [m["role"] for m in request.body["messages"]] == ["system", "system", "system", "user", "assistant", "user"]
    assert request.headers["authorization"] == "Bearer sk-test"


async def test_openai_stream(make_chain: Callable[..., ModelChain], model_server: FakeModelServer) -> None:
    deltas, result = await collect(make_chain("openai:m1"))
    assert len(deltas) >= 3 and all(isinstance(d, str) for d in deltas)
    assert "".join(deltas) == result.text == REPLY
    assert result.completion.tokens_out == len(REPLY.split())  # usage came from the include_usage chunk
    assert model_server.requests[0].body["stream_options"] == {"include_usage": True}


async def test_anthropic_complete(make_chain: Callable[..., ModelChain], model_server: FakeModelServer) -> None:
    result = await make_chain("anthropic:c1", anthropic_max_tokens=77).complete(MESSAGES)
    assert result.text == REPLY and result.calls[0].provider == "anthropic"
    body = model_server.requests[0].body
    assert model_server.requests[0].path == "/v1/messages"
    assert body["max_tokens"] == 77
    assert body["system"].startswith("You are hilo.") and "my dog is called Rufo" in body["system"]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]


async def test_anthropic_stream(make_chain: Callable[..., ModelChain]) -> None:
    deltas, result = await collect(make_chain("anthropic:c1"))
    assert len(deltas) >= 3 and "".join(deltas) == result.text == REPLY
    assert result.completion.tokens_in > 0 and result.completion.tokens_out == len(REPLY.split())


def test_anthropic_messages_merged_and_start_with_user() -> None:
    system, turns = to_anthropic([
        ChatMessage("system", "a"), ChatMessage("assistant", "earlier"), ChatMessage("system", "b"),
        ChatMessage("user", "x"), ChatMessage("user", "y"),
    ])
    assert system == "a\n\nb"
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[-1]["content"] == "x\n\ny"


# -- retries --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model", ["openai:m1", "anthropic:c1"])
async def test_429_retry_after_then_success(
    make_chain: Callable[..., ModelChain], model_server: FakeModelServer, sleeps: list[float], model: str,
) -> None:
    model_server.enqueue(rate_limited(2.5))
    result = await make_chain(model).complete(MESSAGES)
    assert result.text == REPLY
    assert outcomes(result.calls) == [(model, "rate_limited"), (model, "ok")]
    assert result.calls[0].error == "RateLimited status=429 retry_after=2.5"
    assert sleeps == [2.5]  # the wait honoured the header


async def test_retry_after_ms_header(make_chain: Callable[..., ModelChain], model_server: FakeModelServer,
                                     sleeps: list[float]) -> None:
    model_server.enqueue(rate_limited(0.25, ms=True))
    result = await make_chain("openai:m1").complete(MESSAGES)
    assert result.calls[0].error == "RateLimited status=429 retry_after=0.25" and sleeps == [0.25]


@pytest.mark.parametrize("model", ["openai:m1", "anthropic:c1"])
async def test_retry_after_as_an_http_date(make_chain: Callable[..., ModelChain], model_server: FakeModelServer,
                                           sleeps: list[float], model: str) -> None:
    in_20_s = format_datetime(datetime.now(UTC) + timedelta(seconds=20), usegmt=True)
    model_server.enqueue(status(429, {"retry-after": in_20_s}))
    result = await make_chain(model).complete(MESSAGES)
    assert outcomes(result.calls) == [(model, "rate_limited"), (model, "ok")]
    assert len(sleeps) == 1 and 10 < sleeps[0] <= 20, sleeps  # the date's pause (whole seconds), not the backoff


async def test_retry_after_beyond_cap_falls_back_at_once(
    make_chain: Callable[..., ModelChain], model_server: FakeModelServer, sleeps: list[float],
) -> None:
    model_server.script("m1", [rate_limited(120)])
    result = await make_chain("openai:m1", "openai:m2").complete(MESSAGES)
    assert outcomes(result.calls) == [("openai:m1", "rate_limited"), ("openai:m2", "ok")]
    assert sleeps == []


async def test_529_on_anthropic_is_retried(make_chain: Callable[..., ModelChain], model_server: FakeModelServer,
                                           sleeps: list[float]) -> None:
    model_server.enqueue(overloaded())
    result = await make_chain("anthropic:c1").complete(MESSAGES)
    assert outcomes(result.calls) == [("anthropic:c1", "rate_limited"), ("anthropic:c1", "ok")]
    assert result.calls[0].error == "RateLimited status=529"
    assert len(sleeps) == 1 and 0 < sleeps[0] < 0.1  # backoff with jitter: no retry-after given


async def test_primary_503_falls_back(make_chain: Callable[..., ModelChain], model_server: FakeModelServer) -> None:
    model_server.script("m1", default=status(503))
    result = await make_chain("openai:m1", "anthropic:c2").complete(MESSAGES)
    assert result.text == REPLY and result.spec.label == "anthropic:c2"
    assert outcomes(result.calls) == [("openai:m1", "server_error")] * 3 + [("anthropic:c2", "ok")]
    assert [c.fallback_from for c in result.calls] == [None, None, None, "openai:m1"]
    assert all(c.error == "ServerError status=503" for c in result.calls[:3])


async def test_permanent_error_is_not_retried(make_chain: Callable[..., ModelChain],
                                              model_server: FakeModelServer) -> None:
    model_server.script("m1", [status(401)])
    result = await make_chain("openai:m1", "openai:m2").complete(MESSAGES)
    assert outcomes(result.calls) == [("openai:m1", "error"), ("openai:m2", "ok")]
    assert result.calls[0].error == "PermanentError status=401"


async def test_all_models_down(make_chain: Callable[..., ModelChain], model_server: FakeModelServer) -> None:
    model_server.script("m1", default=status(503))
    model_server.script("c2", default=overloaded())
    chain = make_chain("openai:m1", "anthropic:c2")
    with pytest.raises(AllModelsFailed) as info:
        await chain.complete(MESSAGES)
    assert outcomes(info.value.calls) == [("openai:m1", "server_error")] * 3 + [("anthropic:c2", "rate_limited")] * 3
    assert isinstance(info.value.last, RateLimited)
    with pytest.raises(AllModelsFailed) as info:
        [event async for event in chain.stream(MESSAGES)]
    assert len(info.value.calls) == 6
    assert "fake" not in str(info.value)  # no response or request text in errors


async def test_timeout(make_chain: Callable[..., ModelChain], model_server: FakeModelServer) -> None:
    model_server.script("m1", default=slow(2))
    chain = make_chain("openai:m1", timeout=0.2, policy=RetryPolicy(attempts=1))
    with pytest.raises(AllModelsFailed) as info:
        await chain.complete(MESSAGES)
    assert isinstance(info.value.last, ModelTimeout)
    assert outcomes(info.value.calls) == [("openai:m1", "timeout")]
    with pytest.raises(ModelTimeout):
        await chain.providers["openai"].complete("m1", MESSAGES, timeout=0.2)


@pytest.mark.parametrize("model", ["openai:m1", "anthropic:c1"])
async def test_cut_stream_resets_then_answers(make_chain: Callable[..., ModelChain], model_server: FakeModelServer,
                                              model: str) -> None:
    model_server.enqueue(cut(after_chunks=2))
    events, result = await collect(make_chain(model))
    resets = [i for i, e in enumerate(events) if isinstance(e, Reset)]
    assert len(resets) == 1 and resets[0] >= 1  # some text was shown before the cut
    assert "".join(events[resets[0] + 1:]) == result.text == REPLY
    assert outcomes(result.calls) == [(model, "connection"), (model, "ok")]


async def test_stream_fails_over_before_any_text_without_reset(
    make_chain: Callable[..., ModelChain], model_server: FakeModelServer,
) -> None:
    model_server.script("m1", default=status(503))
    events, result = await collect(make_chain("openai:m1", "openai:m2"))
    assert not any(isinstance(e, Reset) for e in events) and "".join(events) == REPLY
    assert result.calls[-1].fallback_from == "openai:m1"


async def test_a_stream_retried_twice_waits_after_attempts_1_and_2_then_falls_back(
    make_chain: Callable[..., ModelChain], model_server: FakeModelServer, sleeps: list[float],
) -> None:
    # the first attempt runs outside tenacity's loop (bot/retry.py RetryPolicy.stream), the rest inside it
    model_server.script("m1", [rate_limited(2.5), cut(after_chunks=2), status(503)])
    events, result = await collect(make_chain("openai:m1", "openai:m2"))
    assert outcomes(result.calls) == [("openai:m1", "rate_limited"), ("openai:m1", "connection"),
                                      ("openai:m1", "server_error"), ("openai:m2", "ok")]
    assert sleeps[0] == 2.5 and len(sleeps) == 2 and 0 < sleeps[1] < 0.1  # none after attempt 3: the policy's last
    (reset,) = [i for i, e in enumerate(events) if isinstance(e, Reset)]  # the cut attempt had shown text
    assert "".join(events[reset + 1:]) == result.text == REPLY


async def test_stream_closed_early_releases_everything(make_chain: Callable[..., ModelChain]) -> None:
    chain = make_chain("anthropic:c1")
    events = chain.stream(MESSAGES)
    assert isinstance(await anext(events), str)
    await events.aclose()  # the person went away: no retry, no failure counted
    assert chain.breakers["anthropic:c1"].failures == 0
    assert (await chain.complete(MESSAGES)).text == REPLY


# -- circuit breaker ------------------------------------------------------------------------------------------

async def test_circuit_breaker_opens_and_half_opens(make_chain: Callable[..., ModelChain],
                                                    model_server: FakeModelServer) -> None:
    clock = Clock()
    chain = make_chain("openai:m1", "openai:m2", policy=RetryPolicy(attempts=1), failure_threshold=2,
                       cooldown=30, clock=clock)
    model_server.script("m1", default=status(503))
    for _ in range(2):
        assert (await chain.complete(MESSAGES)).spec.model == "m2"
    assert chain.breakers["openai:m1"].state == "open"
    sent = len(model_server.requests_for("m1"))
    result = await chain.complete(MESSAGES)
    skipped = result.calls[0]
    assert (skipped.outcome, skipped.latency_ms, skipped.model) == ("circuit_open", 0, "openai:m1")
    assert len(model_server.requests_for("m1")) == sent  # not called while open

    clock.now += 31  # half-open: one trial, which fails and reopens
    assert outcomes((await chain.complete(MESSAGES)).calls)[0] == ("openai:m1", "server_error")
    assert outcomes((await chain.complete(MESSAGES)).calls)[0] == ("openai:m1", "circuit_open")

    clock.now += 31  # half-open again: the trial succeeds and closes the circuit
    model_server.script("m1", default=ok())
    assert (await chain.complete(MESSAGES)).spec.model == "m1"
    assert chain.breakers["openai:m1"].state == "closed"


# -- cancellation ---------------------------------------------------------------------------------------------

class ScriptedProvider:
    """A provider that raises the given errors in order, then answers."""

    name = "openai"

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def complete(self, model: str, messages: Sequence[ChatMessage], *, timeout: float) -> Completion:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return Completion("done", 1, 1)

    async def stream(self, model: str, messages: Sequence[ChatMessage], *,
                     timeout: float) -> AsyncIterator[str | Completion]:
        yield await self.complete(model, messages, timeout=timeout)

    async def aclose(self) -> None:
        return None


async def test_cancelled_error_propagates_and_is_not_retried() -> None:
    provider = ScriptedProvider(asyncio.CancelledError())
    calls: list[ModelCallRecord] = []
    with pytest.raises(asyncio.CancelledError):
        await complete_with_retry(provider, ModelSpec("openai", "m"), MESSAGES, policy=RetryPolicy(), timeout=1,
                                  calls=calls)
    assert provider.calls == 1 and calls == []


async def test_cancel_during_backoff_propagates() -> None:
    started = asyncio.Event()

    async def forever(seconds: float) -> None:
        started.set()
        await asyncio.Event().wait()

    provider = ScriptedProvider(ServerError("down", status=503))
    chain = ModelChain([ModelSpec("openai", "m")], {"openai": provider}, policy=RetryPolicy(sleep=forever))
    task = asyncio.create_task(chain.complete(MESSAGES))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert provider.calls == 1 and chain.breakers["openai:m"].failures == 0


async def test_cancel_during_real_request(make_chain: Callable[..., ModelChain],
                                          model_server: FakeModelServer) -> None:
    model_server.script("m1", default=slow(2))
    task = asyncio.create_task(make_chain("openai:m1").complete(MESSAGES))
    while not model_server.requests:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(model_server.requests) == 1


# -- echo, helpers, lazy imports ------------------------------------------------------------------------------

async def test_echo_lists_recalled_lines() -> None:
    chain = build_chain(Settings.from_mapping({}))
    result = await chain.complete(MESSAGES)
    assert result.text.startswith("[echo: dry run, no model configured] You said: what is my dog called?")
    assert "Context: 6 messages" in result.text
    for line in ("- my dog is called Rufo", "- I live in Lisbon", "- [telegram 09:12] I bought a bike"):
        assert line in result.text.splitlines()
    assert "What you know about this person" not in result.text
    assert result.calls[0].tokens_in > 0 and result.calls[0].outcome == "ok"
    deltas, streamed = await collect(chain)
    assert len(deltas) > 3 and "".join(deltas) == streamed.text == result.text
    assert await EchoProvider().complete("echo", MESSAGES, timeout=1) == result.completion


async def test_echo_takes_the_token_counts_the_assembler_knew() -> None:
    # a stored message's count comes with it (ChatMessage.tokens): the echo counts only what has none
    from kernel.tokens import count
    known = [ChatMessage("system", "be brief", block="system"),
             ChatMessage("user", "hello there", block="conversation", tokens=41)]
    completion = await EchoProvider().complete("echo", known, timeout=1)
    assert completion.tokens_in == count("be brief") + 41
    assert f"Context: 2 messages, {count('be brief') + 41} tokens" in completion.text


def test_status_table() -> None:  # Retry-After parsing: tests/test_retry.py
    assert [type(error_for_status("x", s)).__name__ for s in (429, 529, 500, 503, 400, 401, 404)] == \
        ["RateLimited", "RateLimited", "ServerError", "ServerError", "PermanentError", "PermanentError",
         "PermanentError"]


def test_no_sdk_imported_for_an_echo_chain() -> None:
    code = (
        "import sys, asyncio\n"
        "import bot.models.chain, bot.models.factory, bot.models.echo\n"
        "from bot.config import Settings\n"
        "chain = bot.models.factory.build_chain(Settings.from_mapping({}))\n"
        "asyncio.run(chain.aclose())\n"
        "bad = [m for m in ('openai', 'anthropic') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=root,
                          check=False)
    assert done.returncode == 0, done.stderr
