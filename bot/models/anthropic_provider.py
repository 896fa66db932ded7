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
"max_tokens" / "model_context_window_exceeded" a cut, "tool_use" a stop for a tool hilo does not offer; an
`event: error` inside the 200 stream (or a 200 body that is an error) is classified like its HTTP status.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from bot.models.base import (
    Completion,
    ConnectionFailed,
    ModelError,
    PermanentError,
    error_for_status,
    error_for_transport,
    error_in_answer,
    outcome_of,
)
from bot.models.structured import OutputSchema
from kernel.errors import ConfigError
from kernel.types import AnswerOutcome, ChatMessage

DEFAULT_MAX_TOKENS = 1024
#: Stands in for a missing first user turn (the API refuses a conversation that starts with the assistant).
_OPENING = "(earlier conversation)"
_CUT = frozenset({"max_tokens", "model_context_window_exceeded"})


def to_anthropic(messages: Sequence[ChatMessage]) -> tuple[str | list[dict[str, Any]], list[dict[str, str]]]:
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
    turns: list[dict[str, str]] = []
    for m in messages:
        if m.role == "system":
            continue
        role = "assistant" if m.role == "assistant" else "user"
        content = f"[tool result]\n{m.content}" if m.role == "tool" else m.content
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += "\n\n" + content
        else:
            turns.append({"role": role, "content": content})
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": _OPENING})
    return system, turns


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

    def _params(self, model: str, messages: Sequence[ChatMessage], timeout: float) -> dict[str, Any]:
        system, turns = to_anthropic(messages)
        params: dict[str, Any] = {"model": model, "max_tokens": self.max_tokens, "messages": turns,
                                  "timeout": timeout}
        if system:
            params["system"] = system
        return params

    async def complete(self, model: str, messages: Sequence[ChatMessage], *, timeout: float) -> Completion:
        response = await self._message(f"anthropic:{model}", self._params(model, messages, timeout))
        text = "".join(getattr(block, "text", "") for block in response.content if block.type == "text")
        outcome = _outcome(text, response.stop_reason)
        return _completion(text if outcome != "refused" else "", response.usage, response.usage.output_tokens,
                           outcome)

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
        self, model: str, messages: Sequence[ChatMessage], *, timeout: float,
    ) -> AsyncIterator[str | Completion]:
        label = f"anthropic:{model}"
        parts: list[str] = []
        usage_in: Any = None
        tokens_out = 0
        stopped = False
        stop_reason: str | None = None
        try:
            stream = await self._client.messages.create(**self._params(model, messages, timeout), stream=True)
            try:
                async for event in stream:
                    if event.type == "message_start":
                        usage_in = event.message.usage
                        tokens_out = event.message.usage.output_tokens or 0
                    elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                        parts.append(event.delta.text)
                        yield event.delta.text
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
        yield _completion(text if outcome != "refused" else "", usage_in, tokens_out, outcome)

    async def aclose(self) -> None:
        await self._client.close()


def _completion(text: str, usage: Any, tokens_out: int, outcome: AnswerOutcome) -> Completion:
    """The Completion of an answer whose input usage is `usage` (a Message's, or message_start's when streamed):
    every input token (after the cache breakpoint, read from the cache, written to it) and the cache reads."""
    if usage is None:
        return Completion(text, 0, tokens_out, outcome)
    read = getattr(usage, "cache_read_input_tokens", None) or 0
    written = getattr(usage, "cache_creation_input_tokens", None) or 0
    return Completion(text, (usage.input_tokens or 0) + read + written, tokens_out, outcome, tokens_cached=read)


def _outcome(text: str, stop_reason: str | None) -> AnswerOutcome:
    return outcome_of(text, refused=stop_reason == "refusal", cut=stop_reason in _CUT,
                      tool_calls=stop_reason == "tool_use")
