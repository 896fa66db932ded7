"""OpenAI chat completions (and any OpenAI-compatible server: OpenRouter, Ollama, vLLM) as a ModelProvider.

The `openai` SDK is imported inside the constructor, never at module import: commands that call no model stay
fast. The client never retries (max_retries=0); `bot.models.retry` does. SDK errors are classified into the
`bot.models.base` tree; messages and keys are never logged or put into error messages.

Compatible servers put errors inside a 200 answer: OpenRouter an `error` beside a choice with finish_reason
"error", vLLM `{"error": {"object": "error", ...}}` or a bare `{"object": "error", ...}` (in a stream event or a
body). Each is classified like the HTTP status it carries (`error_in_answer`). A refusal (`message.refusal`,
`delta.refusal`, finish_reason "content_filter"), a cut ("length"), tool calls and an empty answer are answers:
their outcome rides on the Completion.

Tools (a ToolOffer) go as `tools` of type "function" with `tool_choice`; the model's `tool_calls` (streamed as
fragments per index) come back on the Completion; a tool's result goes as a role "tool" message with its
`tool_call_id`.
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
from kernel import tokens
from kernel.errors import ConfigError
from kernel.types import AnswerOutcome, ChatMessage, ToolCall

#: Sent when only a base URL is configured (Ollama, vLLM): the SDK insists on some key.
PLACEHOLDER_KEY = "not-needed"


def to_openai_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """ChatMessages as chat-completions messages: an assistant's tool calls as `tool_calls`, a tool's result as a
    role "tool" message of its call; a compact result (no tool_call_id to pair with) goes in as user-side data."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool" and m.tool_call_id is None:
            out.append({"role": "user", "content": f"[tool result]\n{m.content}"})
        elif m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
        elif m.tool_calls:
            out.append({"role": "assistant", "content": m.content or None, "tool_calls": [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                for c in m.tool_calls]})
        elif m.images:  # a photo's turn: text and image parts (data URLs), as vision models take them
            out.append({"role": m.role, "content": [{"type": "text", "text": m.content}, *(
                {"type": "image_url", "image_url": {"url": f"data:{i.mime};base64,{b64encode(i.data).decode()}"}}
                for i in m.images)]})
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def tool_params(tools: ToolOffer | None) -> dict[str, Any]:
    """The request's `tools` and `tool_choice` for an offer (nothing without one)."""
    if tools is None or not tools.specs:
        return {}
    return {"tools": [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                        "parameters": dict(t.parameters)}} for t in tools.specs],
            "tool_choice": tools.choice}


def new_client(*, api_key: str, base_url: str, timeout: float) -> Any:
    """The one `openai.AsyncOpenAI` setup (chat models and embeddings): SDK retries off (hilo retries), the
    placeholder key when only a base URL is configured."""
    import openai

    return openai.AsyncOpenAI(api_key=api_key or PLACEHOLDER_KEY, base_url=base_url or None, timeout=timeout,
                              max_retries=0)


def classify(label: str, exc: BaseException) -> ModelError:
    """Map an openai (or transport) exception to the ModelError tree."""
    import openai

    if isinstance(exc, ModelError):
        return exc
    if isinstance(exc, openai.APIStatusError):
        return error_for_status(label, exc.status_code, exc.response.headers)
    transport = error_for_transport(label, exc)
    if transport is not None:
        return transport
    if isinstance(exc, openai.APIError) and isinstance(exc.body, dict):  # the SDK saw {"error": ...} in a stream
        return error_in_answer(label, exc.body)
    # Anything else the SDK raises (bad response shape ...) will not get better by asking the same server again.
    return PermanentError(f"{label}: unexpected {type(exc).__name__} from the OpenAI SDK")


class OpenAIProvider:
    """Chat completions through `openai.AsyncOpenAI` (one client for every model of this provider)."""

    name = "openai"

    def __init__(self, *, api_key: str = "", base_url: str = "", timeout: float = 60.0, client: Any = None) -> None:
        if client is None:
            if not (api_key or base_url):
                raise ConfigError("openai models need OPENAI_API_KEY (or OPENAI_BASE_URL for a local "
                                  "OpenAI-compatible server); or set HILO_MODEL=echo to run offline.")
            client = new_client(api_key=api_key, base_url=base_url, timeout=timeout)
        self._client = client

    tool_calling = True

    async def complete(self, model: str, messages: Sequence[ChatMessage], *, timeout: float,
                       tools: ToolOffer | None = None) -> Completion:
        return await self._complete(model, messages, timeout, **tool_params(tools))

    async def complete_json(self, model: str, messages: Sequence[ChatMessage], schema: OutputSchema, *,
                            timeout: float) -> Completion:
        """Structured output (bot/models/structured.py): `response_format` json_schema, strict."""
        return await self._complete(model, messages, timeout, response_format={
            "type": "json_schema",
            "json_schema": {"name": schema.name, "description": schema.description,
                            "schema": dict(schema.schema), "strict": True},
        })

    async def _complete(self, model: str, messages: Sequence[ChatMessage], timeout: float,
                        **extra: Any) -> Completion:
        label = f"openai:{model}"
        try:
            response = await self._client.chat.completions.create(
                model=model, messages=to_openai_messages(messages), timeout=timeout, **extra,
            )
        except Exception as exc:
            raise classify(label, exc) from exc
        _raise_if_error(label, response)
        if not response.choices:
            raise ConnectionFailed(f"{label}: answer without choices")
        choice = response.choices[0]
        _raise_if_error(label, choice)
        message = choice.message
        content, refusal = message.content or "", getattr(message, "refusal", None) or ""
        calls = tuple(ToolCall(c.id, c.function.name, arguments_of(c.function.arguments))
                      for c in getattr(message, "tool_calls", None) or () if c.type == "function")
        outcome = outcome_of(content, refused=bool(refusal) or choice.finish_reason == "content_filter",
                             cut=choice.finish_reason == "length",
                             tool_calls=bool(getattr(message, "tool_calls", None)))
        return _completion(_answer_text(content, refusal, outcome), outcome, response.usage, messages,
                           calls if "tools" in extra else ())

    async def stream(
        self, model: str, messages: Sequence[ChatMessage], *, timeout: float, tools: ToolOffer | None = None,
    ) -> AsyncIterator[str | Completion]:
        label = f"openai:{model}"
        parts: list[str] = []
        refusal: list[str] = []
        usage: Any = None
        finish: str | None = None
        tool_calls = False
        #: the calls' fragments by index: [id, name, argument text]
        pending: dict[int, list[str]] = {}
        offered = tool_params(tools)
        try:
            stream = await self._client.chat.completions.create(
                model=model, messages=to_openai_messages(messages), timeout=timeout,
                stream=True, stream_options={"include_usage": True}, **offered,
            )
            try:
                async for chunk in stream:
                    _raise_if_error(label, chunk)
                    if chunk.usage is not None:
                        usage = chunk.usage
                    for choice in chunk.choices or ():
                        _raise_if_error(label, choice)
                        delta = choice.delta
                        if delta is not None and delta.content:
                            parts.append(delta.content)
                            yield delta.content
                        # the refusal is the answer the person reads: it streams like text
                        if delta is not None and getattr(delta, "refusal", None):
                            refusal.append(delta.refusal)
                            yield delta.refusal
                        tool_calls = tool_calls or bool(delta is not None and delta.tool_calls)
                        for fragment in (delta.tool_calls or ()) if delta is not None else ():
                            call = pending.setdefault(fragment.index, ["", "", ""])
                            call[0] = fragment.id or call[0]
                            if fragment.function is not None:
                                call[1] = fragment.function.name or call[1]
                                call[2] += fragment.function.arguments or ""
                        finish = choice.finish_reason or finish
            finally:
                await stream.close()
        except Exception as exc:
            raise classify(label, exc) from exc
        if finish is None:
            raise ConnectionFailed(f"{label}: stream ended before the answer finished")
        content = "".join(parts)
        outcome = outcome_of(content, refused=bool(refusal) or finish == "content_filter", cut=finish == "length",
                             tool_calls=tool_calls)
        calls = tuple(ToolCall(i, name, arguments_of(raw)) for _, (i, name, raw) in sorted(pending.items())
                      if offered)
        yield _completion(_answer_text(content, "".join(refusal), outcome), outcome, usage, messages, calls)

    async def aclose(self) -> None:
        await self._client.close()


def _raise_if_error(label: str, part: Any) -> None:
    """Raise the ModelError for an error carried inside a 200 answer: a body or chunk that is an error object
    (vLLM's `"object": "error"`, OpenRouter's top-level `error`) or a choice that finished with "error"."""
    error = getattr(part, "error", None)
    if getattr(part, "object", None) == "error":
        raise error_in_answer(label, part.to_dict())
    if error is not None or getattr(part, "finish_reason", None) == "error":
        raise error_in_answer(label, error if isinstance(error, dict) else {})


def _answer_text(content: str, refusal: str, outcome: AnswerOutcome) -> str:
    """The refusal when the model wrote one; no text at all for an answer a content filter stopped (what it had
    written is void); otherwise the content."""
    if outcome == "refused":
        return refusal
    return content


def _completion(text: str, outcome: AnswerOutcome, usage: Any, messages: Sequence[ChatMessage],
                calls: tuple[ToolCall, ...] = ()) -> Completion:
    if usage is None:  # some compatible servers omit usage: count offline
        return Completion(text, sum(tokens.count(m.content) for m in messages), tokens.count(text), outcome,
                          tool_calls=calls)
    # prompt caching is automatic for long prompts (hilo's stable prefix comes first): prompt_tokens counts the
    # cached ones too; compatible servers that do not cache leave prompt_tokens_details out (or null)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or 0
    return Completion(text, usage.prompt_tokens, usage.completion_tokens, outcome, tokens_cached=int(cached),
                      tool_calls=calls)
