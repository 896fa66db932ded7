"""The model-provider contract and its errors.

ModelError                        a call failed; adapters classify SDK errors into these
 ├── TransientError               worth retrying: `retry_after` seconds when the server said so
 │    ├── RateLimited             429 (and Anthropic's 529 overloaded)
 │    ├── ServerError             5xx
 │    ├── ModelTimeout            no answer in time
 │    └── ConnectionFailed        refused, reset, cut stream
 └── PermanentError               retrying will not help (401, 400, 404 ...): go to the next model
AllModelsFailed                   every model of the chain failed: carries the attempts

Retries live in `bot.models.retry` only; providers never retry (SDK retries are off).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.errors import HiloError
from bot.types import ChatMessage


class ModelError(HiloError):
    """A model call failed. `outcome` is what model_calls records."""

    outcome = "error"

    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class TransientError(ModelError):
    outcome = "transient"


class RateLimited(TransientError):
    outcome = "rate_limited"


class ServerError(TransientError):
    outcome = "server_error"


class ModelTimeout(TransientError):
    outcome = "timeout"


class ConnectionFailed(TransientError):
    outcome = "connection"


class PermanentError(ModelError):
    outcome = "error"


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    tokens_in: int
    tokens_out: int


class ModelProvider(Protocol):
    """One provider (echo, openai, anthropic) serving one or more models."""

    name: str

    async def complete(self, model: str, messages: Sequence[ChatMessage], *, timeout: float) -> Completion:
        """One completion. Raises a ModelError subclass on failure (never retries)."""

    def stream(self, model: str, messages: Sequence[ChatMessage], *, timeout: float) -> AsyncIterator[str | Completion]:
        """Yields text deltas as they arrive, then exactly one final Completion (full text and usage).
        Raises a ModelError subclass on failure, also mid-stream (a cut stream is ConnectionFailed)."""

    async def aclose(self) -> None:
        """Close HTTP clients."""
