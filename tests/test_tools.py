"""Tools (issue 15 item 5) through one turn end to end, on every backend, with the real openai and anthropic SDKs
against the fake provider answering tool calls in the providers' recorded shapes (tests/fakes/tool_answers.py):
the call and its result stored as messages of the turn, the fact stored, the result sent back in each wire
format, the next turns' contexts (assembled from the database) carrying them in full and then compact; the
loop's bound; a failing tool as an error result; a tool that never sees another person's data."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from bot.config import Settings
from bot.pipeline import Pipeline
from bot.tools import builtin
from bot.tools.loop import ToolLoop
from bot.tools.registry import Registry, Tool, ToolContext
from kernel.errors import ConfigError
from kernel.types import ChatMessage, InboundMessage, ToolCall, ToolSpec
from tests.fakes.daemon import running_daemon
from tests.fakes.loopback import serving
from tests.fakes.model_server import FakeModelServer, RecordedRequest, calls_tool, ok
from tests.test_web_api import stream

MODELS = ["openai:m1", "anthropic:c1"]


def msg(ext: str, text: str, sender: str = "42", **kw: Any) -> InboundMessage:
    return InboundMessage(surface="telegram", sender=sender, external_id=ext, text=text, **kw)


@pytest.fixture
def tool_pipeline(job_chain: Any) -> Any:
    """Builds pipelines (HILO_* `env`, every built-in tool on) whose chain talks to the fake provider through the
    real SDKs (conftest's job_chain: one attempt, closed after the test)."""

    def build(store: Any, model: str, env: Mapping[str, str] | None = None) -> Pipeline:
        settings, chain = job_chain({"HILO_MODEL": model, "HILO_TOOLS": "all", **(env or {})})
        return Pipeline(settings, store, chain)

    return build


async def turn(p: Pipeline, m: InboundMessage, streamed: bool) -> str:
    """One turn's reply; streamed, what the sink showed must be that reply."""
    if not streamed:
        return (await p.handle(m)).text
    shown: list[str] = []

    async def sink(delta: str, reset: bool) -> None:
        if reset:
            shown.clear()
        shown.append(delta)

    out = await p.handle(m, on_delta=sink)
    assert "".join(shown) == out.text
    return out.text


def tool_results(request: RecordedRequest) -> list[dict[str, Any]]:
    """The tool results a request sends, each as {"id", "content", "error"}, in either wire format."""
    found: list[dict[str, Any]] = []
    for m in request.body["messages"]:
        if m.get("role") == "tool":  # OpenAI
            found.append({"id": m["tool_call_id"], "content": m["content"], "error": None})
        for block in m["content"] if isinstance(m.get("content"), list) else ():  # Anthropic
            if block.get("type") == "tool_result":
                found.append({"id": block["tool_use_id"], "content": block["content"],
                              "error": block.get("is_error")})
    return found


def tool_calls(request: RecordedRequest) -> list[tuple[str, str, dict[str, Any]]]:
    """The assistant tool calls a request sends back, as (id, name, arguments), in either wire format."""
    found = []
    for m in request.body["messages"]:
        for c in m.get("tool_calls") or ():  # OpenAI
            found.append((c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])))
        for block in m["content"] if isinstance(m.get("content"), list) else ():  # Anthropic
            if block.get("type") == "tool_use":
                found.append((block["id"], block["name"], block["input"]))
    return found


def offered(request: RecordedRequest) -> tuple[list[str], Any]:
    """(the tools' names a request offers, its tool_choice), in either wire format."""
    tools = request.body.get("tools") or []
    names = [t["function"]["name"] if "function" in t else t["name"] for t in tools]
    return names, request.body.get("tool_choice")


def text_of(request: RecordedRequest) -> str:
    return json.dumps(request.body["messages"], ensure_ascii=False)


async def messages_of(store: Any, handle: str = "telegram:42") -> list[dict[str, Any]]:
    data = await store.inspect(handle)
    [conversation] = data["conversations"]
    return list(conversation["messages"])


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("model", MODELS)
async def test_a_model_remembers_through_a_tool_and_knows_it_three_turns_later(
    store: Any, model_server: FakeModelServer, tool_pipeline: Any, model: str, streamed: bool,
) -> None:
    p = tool_pipeline(store, model)
    model_server.enqueue(calls_tool("remember", {"fact": "has a dog called Rufo"}), ok("Noted: Rufo."))
    assert await turn(p, msg("u1", "my dog is called Rufo"), streamed) == "Noted: Rufo."

    # the fact is stored, as /remember would store it
    user_id = await store.user_id("telegram:42")
    [memory] = await store.memories(user_id)
    assert memory.content == "has a dog called Rufo"
    # the call and its result are messages of the turn, between the person's message and the reply
    stored = await messages_of(store)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    call_row, result_row = stored[1], stored[2]
    [call] = call_row["metadata"]["tool_calls"]
    assert (call["name"], call["arguments"]) == ("remember", {"fact": "has a dog called Rufo"})
    assert result_row["content"] == f"stored as {memory.short_id}"
    assert result_row["metadata"]["tool_call_id"] == call["id"]
    assert all(m["reply_to"] == stored[0]["id"] for m in stored[1:])
    # the model was offered the tools, then got the result paired with its call, in its own wire format
    first, second = model_server.requests[:2]
    assert offered(first) == (list(builtin.BUILTIN), "auto" if model.startswith("openai") else {"type": "auto"})
    assert [r["id"] for r in tool_results(second)] == [call["id"]]
    assert tool_results(second)[0]["content"] == f"stored as {memory.short_id}"

    # the next turn's context, assembled from the database, has the call and its result in full
    model_server.enqueue(ok("Rufo is a good name."))
    await turn(p, msg("u2", "what was I saying?"), streamed)
    next_turn = model_server.requests[-1]
    assert [(c[0], c[1]) for c in tool_calls(next_turn)] == [(call["id"], "remember")]
    assert [r["content"] for r in tool_results(next_turn)] == [f"stored as {memory.short_id}"]

    # three turns later the exchange is an older one: its tool use is kept compact, as data
    model_server.enqueue(ok("Sure."), ok("Sure."))
    await turn(p, msg("u3", "tell me something"), streamed)
    await turn(p, msg("u4", "and what did you store for me?"), streamed)
    later = model_server.requests[-1]
    assert tool_calls(later) == [] and tool_results(later) == []
    assert f'remember({{\\"fact\\": \\"has a dog called Rufo\\"}}) -> stored as {memory.short_id}' in text_of(later)


async def test_the_loop_stops_a_model_that_calls_tools_forever(
    store: Any, model_server: FakeModelServer, tool_pipeline: Any,
) -> None:
    p = tool_pipeline(store, "openai:m1", {"HILO_TOOL_STEPS": "3"})
    model_server.script("m1", default=calls_tool("now", {}))
    out = await p.handle(msg("u1", "what time is it?"))
    # three rounds of calls, then one last call that may not call tools: the model answers in text
    assert [offered(r)[1] for r in model_server.requests] == ["auto", "auto", "auto", "none"]
    assert out.status == "ok" and out.text == "fake reply to: what time is it?"
    stored = await messages_of(store)
    assert [m["role"] for m in stored] == ["user", *["assistant", "tool"] * 3, "assistant"]
    assert stored[-1]["content"] == out.text
    data = await store.inspect("telegram:42")
    assert len(data["model_calls"]) == 4


async def test_the_cost_bound_stops_the_loop(store: Any, model_server: FakeModelServer, tool_pipeline: Any) -> None:
    # at 1,000 USD per million tokens, the first call's few tokens cost more than the bound: the second call may
    # not call tools
    p = tool_pipeline(store, "openai:m1", {"HILO_PRICES": '{"openai:m1": {"in": 1000, "out": 1000}}',
                                           "HILO_TOOL_COST_USD": "0.000001"})
    model_server.script("m1", default=calls_tool("now", {}))
    out = await p.handle(msg("u1", "what time is it?"))
    assert [offered(r)[1] for r in model_server.requests] == ["auto", "none"]
    assert out.status == "ok"


@pytest.mark.parametrize("model", MODELS)
async def test_a_failing_tool_is_an_error_result_the_model_reads(
    store: Any, model_server: FakeModelServer, tool_pipeline: Any, model: str,
) -> None:
    async def explode(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
        raise RuntimeError("boom with a secret inside")

    p = tool_pipeline(store, model)
    p.tools = Registry([Tool(ToolSpec("explode", "fails", {"type": "object", "properties": {}}), explode),
                        builtin.BUILTIN["remember"]])
    model_server.enqueue(calls_tool("explode", {}), calls_tool("remember", {"text": "no such argument"}),
                         calls_tool("nothing_by_this_name", {}), ok("Sorry, that did not work."))
    out = await p.handle(msg("u1", "do it"))
    assert (out.status, out.text) == ("ok", "Sorry, that did not work.")
    results = tool_results(model_server.requests[-1])
    assert [r["content"] for r in results] == [
        "error: the tool failed (RuntimeError)", "error: missing argument(s): fact",
        "error: there is no tool named 'nothing_by_this_name'"]
    if model.startswith("anthropic"):
        assert [r["error"] for r in results] == [True, True, True]
    stored = [m for m in await messages_of(store) if m["role"] == "tool"]
    assert [m["metadata"]["tool_error"] for m in stored] == [True, True, True]
    assert "secret" not in json.dumps(stored)
    assert await store.memories(await store.user_id("telegram:42")) == []


async def test_a_tool_reads_only_the_turns_person(
    store: Any, model_server: FakeModelServer, tool_pipeline: Any,
) -> None:
    other = await store.user_id("someone-else", create=True)
    await store.remember(other, "the other person's secret plan", 5)
    p = tool_pipeline(store, "anthropic:c1")
    model_server.enqueue(calls_tool("search_memory", {"query": "secret plan"}),
                         calls_tool("search_memory", {"query": "secret plan", "user_id": other}), ok("Nothing."))
    await p.handle(msg("u1", "what is the secret plan?"))
    assert [r["content"] for r in tool_results(model_server.requests[-1])] == [
        "nothing found", "error: unknown argument(s): user_id"]


async def test_only_the_time_is_offered_where_others_read_the_answer(
    store: Any, model_server: FakeModelServer, tool_pipeline: Any,
) -> None:
    p = tool_pipeline(store, "openai:m1")
    await p.handle(msg("g1", "hello all", conversation_ref="group:-100", metadata={"audience": "group"}))
    assert offered(model_server.requests[-1]) == (["now"], "auto")


async def test_the_time_now_is_in_the_persons_time_zone_or_utc(store: Any) -> None:
    moment = datetime(2026, 7, 1, 12, 30, tzinfo=UTC)
    madrid = await builtin.now(ToolContext(1, store, moment, timezone="Europe/Madrid"), {})
    unknown = await builtin.now(ToolContext(1, store, moment, timezone="Not/AZone"), {})
    assert madrid == "2026-07-01 14:30 (Wednesday), time zone Europe/Madrid (UTC+02:00)"
    assert unknown == "2026-07-01 12:30 (Wednesday), time zone UTC (UTC+00:00)"


async def test_the_time_bound_stops_the_loop(store: Any, model_server: FakeModelServer, job_chain: Any) -> None:
    clock = [0.0]

    async def slow_tool(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
        clock[0] += 20.0  # each call takes 20 of the loop's 30 seconds (on the loop's own clock)
        return "done"

    _, chain = job_chain({"HILO_MODEL": "openai:m1"})
    registry = Registry([Tool(ToolSpec("slow", "takes its time", {"type": "object", "properties": {}}), slow_tool)])
    loop = ToolLoop(chain, registry, steps=10, seconds=30.0, clock=lambda: clock[0])
    model_server.script("m1", default=calls_tool("slow", {}))
    offer = registry.offer(private=True)
    ran = await loop.run([ChatMessage("user", "go")], offer, ToolContext(1, store, datetime.now(UTC)))
    # 0 s: call, tool (20 s); 20 s: call, tool (40 s); 40 s: past the bound, the last call may not call tools
    assert [offered(r)[1] for r in model_server.requests] == ["auto", "auto", "none"]
    assert ran.steps == 2 and ran.completion is not None and ran.completion.text == "fake reply to: go"
    assert [m.role for m in ran.messages] == ["assistant", "tool", "assistant", "tool"]


async def test_arguments_are_checked_against_the_whole_schema(store: Any) -> None:
    """The operator's schema is checked in full (jsonschema): ranges, nested objects, patterns, not only the
    top-level names and types; the model reads which rule its arguments broke."""
    ran: list[Mapping[str, Any]] = []

    async def forecast(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
        ran.append(arguments)
        return "sunny"

    schema = {"type": "object", "additionalProperties": False, "required": ["place"], "properties": {
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "place": {"type": "object", "required": ["city"], "properties": {
            "city": {"type": "string"}, "country": {"type": "string", "pattern": "^[A-Z]{2}$"}}}}}
    registry = Registry([Tool(ToolSpec("forecast", "the weather", schema), forecast)])
    ctx = ToolContext(1, store, datetime.now(UTC))
    said = [(await registry.call(ToolCall(f"c{i}", "forecast", args), ctx)).content for i, args in enumerate([
        {"place": {"city": "Valencia", "country": "ES"}, "days": 3},
        {"place": {"city": "Valencia"}, "days": 90},
        {"place": {"country": "ES"}},
        {"place": {"city": "Valencia", "country": "Spain"}},
        {"days": 2},
        {"place": {"city": "Valencia"}, "user_id": 7},
    ])]
    assert said == [
        "sunny",
        "error: argument days: 90 is greater than the maximum of 14",
        "error: argument place: 'city' is a required property",
        "error: argument place.country: 'Spain' does not match '^[A-Z]{2}$'",
        "error: missing argument(s): place",
        "error: unknown argument(s): user_id",
    ]
    assert ran == [{"place": {"city": "Valencia", "country": "ES"}, "days": 3}]


async def test_a_tool_past_its_time_limit_is_an_error_result(store: Any) -> None:
    never = asyncio.Event()

    async def stuck(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
        await never.wait()
        return "unreachable"

    registry = Registry([Tool(ToolSpec("stuck", "never ends", {"type": "object", "properties": {}}), stuck)],
                        timeout=0.05)
    result = await registry.call(ToolCall("c1", "stuck", {}), ToolContext(1, store, datetime.now(UTC)))
    assert (result.error, result.content) == (True, "error: the tool took too long and was stopped")


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
async def test_the_web_widget_s_time_zone_is_the_one_the_time_tool_uses(
    tmp_path: Path, model_server: FakeModelServer, streamed: bool,
) -> None:
    settings = Settings.from_mapping({
        "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "HILO_SECRET_KEY": "test-secret",
        "HILO_MODEL": "anthropic:c1", "HILO_MODEL_ATTEMPTS": "1", "ANTHROPIC_API_KEY": "x",
        "ANTHROPIC_BASE_URL": model_server.base_url, "HILO_TOOLS": "now"})
    model_server.enqueue(calls_tool("now", {}, text="Let me look."), ok("It is afternoon in Madrid."))
    body = {"text": "what time is it?", "timezone": "Europe/Madrid"}
    async with running_daemon(settings) as client:
        if streamed:
            sent = await stream(client, body)
            conversation = next(p["conversation_id"] for kind, p in sent if kind == "meta")
            events = [(kind, p.get("text")) for kind, p in sent if kind in ("delta", "reset")]
            cut = events.index(("reset", None))  # the text before the call was shown, then withdrawn
            assert events[:cut] == [("delta", "Let me look.")]
            reply = "".join(text for _, text in events[cut + 1:] if text)
        else:
            answer = (await client.post("/api/messages", json=body)).json()
            conversation, reply = answer["conversation_id"], answer["reply"]
        bad = await client.post("/api/messages", json={"text": "and now?", "timezone": "Mars/Olympus"})
        shown = (await client.get(f"/api/conversations/{conversation}/messages")).json()
    assert reply == "It is afternoon in Madrid."
    # the person's history is what they and hilo said: the call and its result stay the model's
    assert [(m["role"], m["content"]) for m in shown["messages"]] == [
        ("user", "what time is it?"), ("assistant", "It is afternoon in Madrid.")]
    [result] = tool_results(model_server.requests[1])
    assert "time zone Europe/Madrid" in result["content"]
    assert bad.status_code == 200  # an unknown zone is dropped, never a refused message


async def test_an_operator_http_tool_is_called_with_its_secret_and_its_result_kept(
    store: Any, model_server: FakeModelServer, job_chain: Any,
) -> None:
    received: list[tuple[dict[str, str], Any]] = []

    async def weather(request: Request) -> Response:
        received.append((dict(request.headers), json.loads(await request.body())))
        if len(received) == 1:
            return PlainTextResponse("Sunny, 24 C")
        return PlainTextResponse("internal details", status_code=500)

    tools = [{"name": "weather", "description": "The weather in a city", "url": "", "secret_header": "X-Tool-Secret",
              "secret_env": "WEATHER_TOOL_SECRET",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
    async with serving(Starlette(routes=[Route("/weather", weather, methods=["POST"])])) as base_url:
        tools[0]["url"] = base_url + "/weather"
        settings, chain = job_chain({"HILO_MODEL": "openai:m1", "HILO_HTTP_TOOLS": json.dumps(tools),
                                     "WEATHER_TOOL_SECRET": "s3cret-value"})
        assert "s3cret-value" not in repr(settings.http_tools)
        p = Pipeline(settings, store, chain)
        model_server.enqueue(calls_tool("weather", {"city": "Valencia"}), ok("Sunny in Valencia."),
                             ok("Yes."), calls_tool("weather", {"city": "Oslo"}), ok("I could not check."))
        await p.handle(msg("u1", "weather in Valencia?"))
        await p.handle(msg("u2", "thanks, is that today?"))
        await p.handle(msg("u3", "and Oslo?"))
    [(headers, body), (_, second)] = received
    assert headers["x-tool-secret"] == "s3cret-value"
    assert body == {"tool": "weather", "arguments": {"city": "Valencia"}}  # nothing about the person but this
    assert second == {"tool": "weather", "arguments": {"city": "Oslo"}}
    # the next turn's context (from the database) has the call and its result
    next_turn = model_server.requests[2]
    assert [c[1:] for c in tool_calls(next_turn)] == [("weather", {"city": "Valencia"})]
    assert [r["content"] for r in tool_results(next_turn)] == ["Sunny, 24 C"]
    assert tool_results(model_server.requests[-1])[-1]["content"] == "error: the tool's service answered HTTP 500"


@pytest.mark.parametrize(("entry", "says"), [
    ({"name": "has space", "url": "https://x.example"}, "name must be"),
    ({"name": "now", "url": "https://x.example"}, "used twice or by a built-in"),
    ({"name": "w", "url": "ftp://x.example"}, "url must be"),
    ({"name": "w", "url": "https://x.example", "secret_header": "X-Key"}, "secret_header needs secret_env"),
    ({"name": "w", "url": "https://x.example", "parameters": {"type": "array"}}, "JSON schema of type object"),
    ({"name": "w", "url": "https://x.example",
      "parameters": {"type": "object", "properties": {"days": {"type": "integr"}}}}, "not a valid JSON schema"),
    ({"name": "w", "url": "https://x.example", "parameters": {"type": "object", "required": "city"}},
     "not a valid JSON schema"),
])
def test_a_wrong_http_tool_is_refused_at_start(entry: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        Settings.from_mapping({"HILO_HTTP_TOOLS": json.dumps([entry])})


def test_http_tools_come_from_a_toml_file_as_from_json(tmp_path: Path) -> None:
    path = tmp_path / "tools.toml"
    path.write_text('[[tools]]\nname = "weather"\ndescription = "The weather in a city."\n'
                    'url = "https://tools.example.com/weather"\n'
                    '[tools.parameters]\ntype = "object"\nrequired = ["city"]\n'
                    '[tools.parameters.properties.city]\ntype = "string"\n')
    [spec] = Settings.from_mapping({"HILO_HTTP_TOOLS": str(path)}).http_tools
    assert (spec.name, spec.url) == ("weather", "https://tools.example.com/weather")
    assert spec.parameters["required"] == ["city"]
    with pytest.raises(ConfigError, match=r"HILO_HTTP_TOOLS.*no such file"):
        Settings.from_mapping({"HILO_HTTP_TOOLS": str(tmp_path / "missing.json")})
