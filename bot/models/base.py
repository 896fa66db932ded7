"""The model-provider contract and its errors.

ModelError                        a call failed; adapters classify SDK errors into these
 ├── TransientError               worth retrying: `retry_after` seconds when the server said so
 │    ├── RateLimited             429 (and Anthropic's 529 overloaded)
 │    ├── ServerError             5xx
 │    ├── ModelTimeout            no answer in time
 │    └── ConnectionFailed        refused, reset, cut stream
 └── PermanentError               retrying will not help (401, 400, 404 ...): go to the next model
AllModelsFailed                   every model of the chain failed: `calls` carries every attempt

Adapters map HTTP statuses with `error_for_status` (one table for every provider) and transport failures with
`error_for_transport`. A streaming consumer sees `Reset()` when output already shown must be discarded.

Retries live in `bot.models.retry` only; providers never retry (SDK retries are off).
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.errors import HiloError
from bot.types import ChatMessage, ModelCallRecord


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


class AllModelsFailed(ModelError):
    """Every model of the chain failed (or was skipped by its circuit breaker). `calls` holds every attempt."""

    outcome = "failed"

    def __init__(self, calls: Sequence[ModelCallRecord], last: ModelError | None = None) -> None:
        tried = ", ".join(dict.fromkeys(c.model for c in calls)) or "none"
        super().__init__(f"every model failed ({tried}); see the model_calls rows",
                         status=last.status if last else None)
        self.calls = list(calls)
        self.last = last


@dataclass(frozen=True, slots=True)
class Reset:
    """Stream marker: the text deltas yielded so far are void (the model failed mid-answer); a new answer follows."""


def retry_after_from_headers(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the server asked us to wait: `retry-after-ms`, else `retry-after` (seconds or an HTTP date)."""
    if not headers:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_for_status(label: str, status: int, headers: Mapping[str, str] | None = None) -> ModelError:
    """The error for an HTTP status: 429/529 RateLimited, other 5xx ServerError, other 4xx PermanentError.
    The message names the model and the status only: never the request or response text."""
    retry_after = retry_after_from_headers(headers)
    if status == 429:
        return RateLimited(f"{label}: rate limited (HTTP 429)", status=status, retry_after=retry_after)
    if status == 529:
        return RateLimited(f"{label}: overloaded (HTTP 529)", status=status, retry_after=retry_after)
    if status >= 500:
        return ServerError(f"{label}: server error (HTTP {status})", status=status, retry_after=retry_after)
    return PermanentError(f"{label}: request refused (HTTP {status}); check the key, model name and base URL",
                          status=status)


def error_for_transport(label: str, exc: BaseException) -> ModelError | None:
    """Timeouts and connection failures of httpx-style clients (matched by class name, so no import is
    needed): ModelTimeout or ConnectionFailed; None when `exc` is not a transport error."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & {"TimeoutException", "APITimeoutError", "TimeoutError"}:
        return ModelTimeout(f"{label}: no answer in time")
    if names & {"TransportError", "APIConnectionError", "StreamError", "ConnectionError"}:
        return ConnectionFailed(f"{label}: connection failed ({type(exc).__name__})")
    return None


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
