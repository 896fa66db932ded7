"""Anthropic's messages API as a ModelProvider.

System messages (the prompt and the context blocks) are concatenated into the `system` parameter; consecutive
messages of the same role are merged, and the conversation starts with a user turn, as the API requires. Prompt
caching: when the context marks where its stable prefix ends (`ChatMessage.cache_break`: the system prompt and the
person's facts), `system` is two text blocks and the first carries `cache_control` (ephemeral): the next turns
read that prefix from Anthropic's cache (a prefix shorter than the model's minimum, 1,024 or 2,048 tokens, is
simply not cached). Usage: `input_tokens` is only what came after the last breakpoint; hilo records every input
token (plus cache reads and writes) and, of them, the cache reads.
The `anthropic` SDK is imported inside the constructor, never at module import. The client never retries
(max_retries=0); `bot.models.retry` does. Messages and keys are never logged or put into error messages.

stop_reason "refusal" is a refusal (the text written before it is void: Anthropic's classifiers stopped it),
"max_tokens" / "model_context_window_exceeded" a cut, "tool_use" a stop to call tools; an
`event: error` inside the 200 stream (or a 200 body that is an error) is classified like its HTTP status.
Tools (a ToolOffer) go as `tools` with `input_schema` and `tool_choice`; the model's `tool_use` blocks (streamed
as `input_json_delta` fragments) come back as the Completion's calls; an assistant's calls go back as `tool_use`
blocks and their results as `tool_result` blocks of the next user turn.
"""

from __future__ import annotations

import json
from base64 import b64encode
from collections.abc import AsyncIterator, Sequence
from typing import Any

from bot.models.base import (
    Completion,
    ConnectionFailed,
    ModelError,
    PermanentError,
    ToolOffer,
    error_for_status,
    error_for_transport,
    error_in_answer,
    outcome_of,
)
from bot.models.structured import OutputSchema
from bot.models.tool_json import arguments_of
from kernel.errors import ConfigError
from kernel.types import AnswerOutcome, ChatMessage, ToolCall

DEFAULT_MAX_TOKENS = 1024
#: Stands in for a missing first user turn (the API refuses a conversation that starts with the assistant).
_OPENING = "(earlier conversation)"
_CUT = frozenset({"max_tokens", "model_context_window_exceeded"})


def _content(m: ChatMessage) -> str | list[dict[str, Any]]:
    """A message's content: text, or blocks for tool use (`tool_use` of an assistant, `tool_result` of a call)."""
    if m.role == "tool" and m.tool_call_id is not None:
        return [{"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content,
                 **({"is_error": True} if m.tool_error else {})}]
    if m.role == "tool":  # a compact result of an older exchange: data
        return f"[tool result]\n{m.content}"
    if m.tool_calls:
        text = [{"type": "text", "text": m.content}] if m.content.strip() else []
        return text + [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in m.tool_calls]
    if m.images:  # a photo's turn: image blocks (base64), then the text, as Anthropic suggests
        return [*({"type": "image", "source": {"type": "base64", "media_type": i.mime,
                                               "data": b64encode(i.data).decode()}} for i in m.images),
                {"type": "text", "text": m.content}]
    return m.content


def _blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def to_anthropic(messages: Sequence[ChatMessage]) -> tuple[str | list[dict[str, Any]], list[dict[str, Any]]]:
    """(system, messages) for the messages API: `system` as text, or as two text blocks, the first (up to the
    message marked `cache_break`) cached."""
    system_messages = [m for m in messages if m.role == "system"]
    marks = [i for i, m in enumerate(system_messages) if m.cache_break]
    system: str | list[dict[str, Any]] = "\n\n".join(m.content for m in system_messages)
    if marks:
        cut = marks[-1] + 1
        stable = "\n\n".join(m.content for m in system_messages[:cut])
        rest = "\n\n".join(m.content for m in system_messages[cut:])
        system = [{"type": "text", "text": stable, "cache_control": {"type": "ephemeral"}},
                  *([{"type": "text", "text": rest}] if rest else [])]
    turns: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            continue
        role = "assistant" if m.role == "assistant" else "user"
        content = _content(m)
        if turns and turns[-1]["role"] == role:
            before = turns[-1]["content"]
            if isinstance(before, str) and isinstance(content, str):
                turns[-1]["content"] = before + "\n\n" + content
            else:
                turns[-1]["content"] = _blocks(before) + _blocks(content)
        else:
            turns.append({"role": role, "content": content})
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": _OPENING})
    return system, turns


def tool_params(tools: ToolOffer | None) -> dict[str, Any]:
    """The request's `tools` and `tool_choice` for an offer (nothing without one)."""
    if tools is None or not tools.specs:
        return {}
    return {"tools": [{"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
                      for t in tools.specs],
            "tool_choice": {"type": tools.choice}}


def calls_in(content: Sequence[Any]) -> tuple[ToolCall, ...]:
    """The tool_use blocks of an answer as calls."""
    return tuple(ToolCall(b.id, b.name, dict(b.input) if isinstance(b.input, dict) else {})
                 for b in content if b.type == "tool_use")


def classify(label: str, exc: BaseException) -> ModelError:
    """Map an anthropic (or transport) exception to the ModelError tree."""
    import anthropic

    if isinstance(exc, ModelError):
        return exc
    if isinstance(exc, anthropic.APIStatusError):
        if exc.status_code < 400:  # an error event inside a streamed 200 response
            return error_in_answer(label, exc.body, exc.response.headers)
        return error_for_status(label, exc.status_code, exc.response.headers)
    transport = error_for_transport(label, exc)
    if transport is not None:
        return transport
    return PermanentError(f"{label}: unexpected {type(exc).__name__} from the Anthropic SDK")


class AnthropicProvider:
    """Messages through `anthropic.AsyncAnthropic` (one client for every model of this provider)."""

    name = "anthropic"

    def __init__(
        self, *, api_key: str = "", base_url: str = "", timeout: float = 60.0,
        max_tokens: int = DEFAULT_MAX_TOKENS, client: Any = None,
    ) -> None:
        if client is None:
            if not api_key:
                raise ConfigError("anthropic models need ANTHROPIC_API_KEY; or set HILO_MODEL=echo to run offline.")
            import anthropic

            client = anthropic.AsyncAnthropic(
                api_key=api_key, base_url=base_url or None, timeout=timeout, max_retries=0,
            )
        self._client = client
        self.max_tokens = max_tokens

    tool_calling = True

    def _params(self, model: str, messages: Sequence[ChatMessage], timeout: float,
                tools: ToolOffer | None = None) -> dict[str, Any]:
        system, turns = to_anthropic(messages)
        params: dict[str, Any] = {"model": model, "max_tokens": self.max_tokens, "messages": turns,
                                  "timeout": timeout, **tool_params(tools)}
        if system:
            params["system"] = system
        return params

    async def complete(self, model: str, messages: Sequence[ChatMessage], *, timeout: float,
                       tools: ToolOffer | None = None) -> Completion:
        response = await self._message(f"anthropic:{model}", self._params(model, messages, timeout, tools))
        text = "".join(getattr(block, "text", "") for block in response.content if block.type == "text")
        outcome = _outcome(text, response.stop_reason)
        return _completion(text if outcome != "refused" else "", response.usage, response.usage.output_tokens,
                           outcome, calls_in(response.content) if tools else ())

    async def _message(self, label: str, params: dict[str, Any]) -> Any:
        """One plain (not streamed) Message, checked: errors classified, an answer without content refused."""
        try:
            response = await self._client.messages.create(**params)
        except Exception as exc:
            raise classify(label, exc) from exc
        if getattr(response, "type", None) == "error":  # a 200 body that is an error object
            raise error_in_answer(label, response.to_dict())
        if response.content is None or response.usage is None:
            raise ConnectionFailed(f"{label}: answer without content")
        return response

    async def complete_json(self, model: str, messages: Sequence[ChatMessage], schema: OutputSchema, *,
                            timeout: float) -> Completion:
        """Structured output (bot/models/structured.py): one tool whose input is the answer, forced by
        `tool_choice`; the text is that input as JSON ("empty" when the model wrote no tool call)."""
        label = f"anthropic:{model}"
        params = self._params(model, messages, timeout)
        params["tools"] = [{"name": schema.name, "description": schema.description,
                            "input_schema": dict(schema.schema)}]
        params["tool_choice"] = {"type": "tool", "name": schema.name}
        response = await self._message(label, params)
        inputs = [block.input for block in response.content
                  if block.type == "tool_use" and getattr(block, "name", None) == schema.name]
        text = json.dumps(inputs[0], ensure_ascii=False) if inputs else ""
        stop = None if response.stop_reason == "tool_use" else response.stop_reason  # the answer we asked for
        outcome = _outcome(text, stop)
        return _completion(text if outcome != "refused" else "", response.usage, response.usage.output_tokens,
                           outcome)

    async def stream(
        self, model: str, messages: Sequence[ChatMessage], *, timeout: float, tools: ToolOffer | None = None,
    ) -> AsyncIterator[str | Completion]:
        label = f"anthropic:{model}"
        parts: list[str] = []
        usage_in: Any = None
        tokens_out = 0
        stopped = False
        stop_reason: str | None = None
        #: tool_use blocks by index: [id, name, input JSON text]
        pending: dict[int, list[str]] = {}
        try:
            stream = await self._client.messages.create(**self._params(model, messages, timeout, tools),
                                                        stream=True)
            try:
                async for event in stream:
                    if event.type == "message_start":
                        usage_in = event.message.usage
                        tokens_out = event.message.usage.output_tokens or 0
                    elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                        parts.append(event.delta.text)
                        yield event.delta.text
                    elif event.type == "content_block_start" and event.content_block.type == "tool_use":
                        pending[event.index] = [event.content_block.id, event.content_block.name, ""]
                    elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                        if event.index in pending:
                            pending[event.index][2] += event.delta.partial_json
                    elif event.type == "message_delta":
                        tokens_out = event.usage.output_tokens or tokens_out
                        stop_reason = event.delta.stop_reason or stop_reason
                    elif event.type == "message_stop":
                        stopped = True
            finally:
                await stream.close()
        except Exception as exc:
            raise classify(label, exc) from exc
        if not stopped:
            raise ConnectionFailed(f"{label}: stream ended before message_stop")
        text = "".join(parts)
        outcome = _outcome(text, stop_reason)
        calls = tuple(ToolCall(i, name, arguments_of(raw)) for _, (i, name, raw) in sorted(pending.items())
                      if tools)
        yield _completion(text if outcome != "refused" else "", usage_in, tokens_out, outcome, calls)

    async def aclose(self) -> None:
        await self._client.close()


def _completion(text: str, usage: Any, tokens_out: int, outcome: AnswerOutcome,
                calls: tuple[ToolCall, ...] = ()) -> Completion:
    """The Completion of an answer whose input usage is `usage` (a Message's, or message_start's when streamed):
    every input token (after the cache breakpoint, read from the cache, written to it) and the cache reads; `calls`:
    the tools it asked for."""
    if usage is None:
        return Completion(text, 0, tokens_out, outcome, tool_calls=calls)
    read = getattr(usage, "cache_read_input_tokens", None) or 0
    written = getattr(usage, "cache_creation_input_tokens", None) or 0
    return Completion(text, (usage.input_tokens or 0) + read + written, tokens_out, outcome, tokens_cached=read,
                      tool_calls=calls)


def _outcome(text: str, stop_reason: str | None) -> AnswerOutcome:
    return outcome_of(text, refused=stop_reason == "refusal", cut=stop_reason in _CUT,
                      tool_calls=stop_reason == "tool_use")
