"""OpenAI chat completions (and any OpenAI-compatible server: OpenRouter, Ollama, vLLM) as a ModelProvider.

The `openai` SDK is imported inside the constructor, never at module import: commands that call no model stay
fast. The client never retries (max_retries=0); `bot.models.retry` does. SDK errors are classified into the
`bot.models.base` tree; messages and keys are never logged or put into error messages.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from bot import tokens
from bot.errors import ConfigError
from bot.models.base import (
    Completion,
    ConnectionFailed,
    ModelError,
    PermanentError,
    error_for_status,
    error_for_transport,
)
from bot.types import ChatMessage

#: Sent when only a base URL is configured (Ollama, vLLM): the SDK insists on some key.
PLACEHOLDER_KEY = "not-needed"


def to_openai_messages(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    """ChatMessages as chat-completions messages. A stored tool result has no tool_call_id to pair with, so it
    goes in as user-side data."""
    out: list[dict[str, str]] = []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "user", "content": f"[tool result]\n{m.content}"})
        else:
            out.append({"role": m.role, "content": m.content})
    return out


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
            import openai

            client = openai.AsyncOpenAI(
                api_key=api_key or PLACEHOLDER_KEY, base_url=base_url or None, timeout=timeout, max_retries=0,
            )
        self._client = client

    async def complete(self, model: str, messages: Sequence[ChatMessage], *, timeout: float) -> Completion:
        label = f"openai:{model}"
        try:
            response = await self._client.chat.completions.create(
                model=model, messages=to_openai_messages(messages), timeout=timeout,
            )
        except Exception as exc:
            raise classify(label, exc) from exc
        if not response.choices:
            raise ConnectionFailed(f"{label}: answer without choices")
        text = response.choices[0].message.content or ""
        usage = response.usage
        if usage is None:  # some compatible servers omit usage: count offline
            return Completion(text, sum(tokens.count(m.content) for m in messages), tokens.count(text))
        return Completion(text, usage.prompt_tokens, usage.completion_tokens)

    async def stream(
        self, model: str, messages: Sequence[ChatMessage], *, timeout: float,
    ) -> AsyncIterator[str | Completion]:
        label = f"openai:{model}"
        parts: list[str] = []
        usage: Any = None
        finished = False
        try:
            stream = await self._client.chat.completions.create(
                model=model, messages=to_openai_messages(messages), timeout=timeout,
                stream=True, stream_options={"include_usage": True},
            )
            try:
                async for chunk in stream:
                    if chunk.usage is not None:
                        usage = chunk.usage
                    for choice in chunk.choices:
                        if choice.delta is not None and choice.delta.content:
                            parts.append(choice.delta.content)
                            yield choice.delta.content
                        if choice.finish_reason:
                            finished = True
            finally:
                await stream.close()
        except Exception as exc:
            raise classify(label, exc) from exc
        if not finished:
            raise ConnectionFailed(f"{label}: stream ended before the answer finished")
        text = "".join(parts)
        if usage is None:
            yield Completion(text, sum(tokens.count(m.content) for m in messages), tokens.count(text))
        else:
            yield Completion(text, usage.prompt_tokens, usage.completion_tokens)

    async def aclose(self) -> None:
        await self._client.close()
