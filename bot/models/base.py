"""The model-provider contract and its errors.

ModelError                        a call failed; adapters classify SDK errors into these
 ├── TransientError               worth retrying: `retry_after` seconds when the server said so
 │    ├── RateLimited             429 (and Anthropic's 529 overloaded)
 │    ├── ServerError             5xx
 │    ├── ModelTimeout            no answer in time
 │    └── ConnectionFailed        refused, reset, cut stream
 └── PermanentError               retrying will not help (401, 400, 404 ...): go to the next model
AllModelsFailed                   every model of the chain failed: `calls` carries every attempt
 └── CapReached                   a spend cap refused the call before it was made (bot/spend.py): no model answers

Adapters map HTTP statuses with `error_for_status` (one table for every provider), error objects sent inside a
200 answer (OpenRouter's and vLLM's stream events and bodies, Anthropic's `event: error`) with `error_in_answer`
(classified like the HTTP status they stand for) and transport failures with `error_for_transport`. A streaming
consumer sees `Reset()` when output already shown must be discarded.

An answer that arrived is a `Completion` with its `outcome` (what model_calls records): "ok", "refused" (the model
declined; `text` is its refusal when it gave one), "cut" (the token limit ended it), "tool_calls" (it stopped to
call tools: `tool_calls` lists them; with no tools offered, a call nobody will run) or "empty" (no text at all).
`outcome_of` decides it for every provider.

Tools (bot/tools) are offered as a `ToolOffer`: a `ToolProvider` (openai, anthropic) sends them in its API's
format and parses the calls (streamed too); a provider without tool calling (echo) is asked without them.

Retries live in `bot.models.retry` (over bot.retry, which also parses Retry-After) only; providers never retry
(SDK retries are off). `Chain` is what the pipeline asks of the model chain (bot.models.chain.ModelChain),
`ChainResult` its answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from bot.config import ModelSpec
from bot.retry import retry_after_from_headers
from kernel.errors import HiloError
from kernel.types import AnswerOutcome, ChatMessage, ModelCallRecord, ToolCall, ToolSpec


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


class CapReached(AllModelsFailed):
    """A spend cap (bot/spend.py) refused the chain's next call: `scope` (person_daily, person_monthly,
    global_daily, global_monthly) and `period` ("day" or "month"). Its last record is the refused call
    (outcome "cap_reached", no tokens, no latency): the turn is answered, by the catalogue."""

    outcome = "cap_reached"

    def __init__(self, calls: Sequence[ModelCallRecord], scope: str, period: str) -> None:
        super().__init__(calls)
        self.scope = scope
        self.period = period


@dataclass(frozen=True, slots=True)
class Reset:
    """Stream marker: the text deltas yielded so far are void (the model failed mid-answer); a new answer follows."""


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


#: Error kinds (OpenAI `type` / `code`, Anthropic `error.type`, vLLM exception names) as the HTTP status they stand for.
_KIND_STATUS = {
    "rate_limit_exceeded": 429, "rate_limit_error": 429, "RateLimitError": 429, "insufficient_quota": 429,
    "overloaded_error": 529, "overloaded": 529,
    "server_error": 500, "api_error": 500, "internal_error": 500, "InternalServerError": 500,
    "service_unavailable": 503, "ServiceUnavailableError": 503, "timeout_error": 504, "timeout": 504,
    "invalid_request_error": 400, "BadRequestError": 400, "authentication_error": 401, "invalid_api_key": 401,
    "permission_error": 403, "not_found_error": 404, "NotFoundError": 404, "model_not_found": 404,
}


def _status_in(error: Mapping[str, object]) -> int:
    """The HTTP status an error object stands for: its numeric `code` (OpenRouter, vLLM), else its kind (`type` or
    a string `code`), else 500: the server took the request and then failed, which is worth another try."""
    code = error.get("code")
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599:
        return code
    for kind in (error.get("type"), code):
        if isinstance(kind, str) and kind in _KIND_STATUS:
            return _KIND_STATUS[kind]
    return 500


def error_in_answer(label: str, error: object, headers: Mapping[str, str] | None = None) -> ModelError:
    """The error for an error object found inside a 200 answer (a stream event or a body), classified like its
    HTTP equivalent. `error` is the object itself or an envelope holding it under "error" (as OpenRouter, vLLM and
    Anthropic send it). The provider's message is never kept."""
    if isinstance(error, Mapping) and isinstance(error.get("error"), Mapping):
        error = error["error"]
    status = _status_in(error) if isinstance(error, Mapping) else 500
    return error_for_status(label, status, headers)


def error_for_transport(label: str, exc: BaseException) -> ModelError | None:
    """Timeouts and connection failures of httpx-style clients (matched by class name, so no import is
    needed): ModelTimeout or ConnectionFailed; None when `exc` is not a transport error. An answer whose JSON
    ends in the middle (a cut event or body that still ended cleanly) is a connection failure too."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & {"TimeoutException", "APITimeoutError", "TimeoutError"}:
        return ModelTimeout(f"{label}: no answer in time")
    if names & {"TransportError", "APIConnectionError", "StreamError", "ConnectionError"}:
        return ConnectionFailed(f"{label}: connection failed ({type(exc).__name__})")
    if "JSONDecodeError" in names:
        return ConnectionFailed(f"{label}: answer cut in the middle of its JSON")
    return None


@dataclass(frozen=True, slots=True)
class Completion:
    """One answer. `outcome`: see the module docstring (AnswerOutcome)."""

    text: str
    tokens_in: int
    tokens_out: int
    outcome: AnswerOutcome = "ok"
    #: of tokens_in (every input token, cached or not), those read from the provider's prompt cache
    tokens_cached: int = 0
    #: the calls the model asked for (only when tools were offered: bot/tools/loop.py runs them)
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolOffer:
    """The tools a call offers. `choice` "auto": the model may call them; "none": it must answer in text (the
    tool loop's bound is reached; the tools stay declared because the history holds calls of them)."""

    specs: tuple[ToolSpec, ...]
    choice: str = "auto"


def outcome_of(text: str, *, refused: bool = False, cut: bool = False, tool_calls: bool = False) -> AnswerOutcome:
    """What an answer amounts to, the same way for every provider: a refusal first, then a cut, then one that
    stopped for a tool call, then an answer with no text."""
    if refused:
        return "refused"
    if cut:
        return "cut"
    if tool_calls:
        return "tool_calls"
    return "ok" if text.strip() else "empty"


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


@runtime_checkable
class ToolProvider(Protocol):
    """A ModelProvider that can offer tools (`tool_calling` is its marker): `tools` in its API's format."""

    tool_calling: bool

    async def complete(self, model: str, messages: Sequence[ChatMessage], *, timeout: float,
                       tools: ToolOffer | None = None) -> Completion:
        """ModelProvider.complete, offering `tools`; the Completion lists the calls the model made."""

    def stream(self, model: str, messages: Sequence[ChatMessage], *, timeout: float,
               tools: ToolOffer | None = None) -> AsyncIterator[str | Completion]:
        """ModelProvider.stream, offering `tools`; the final Completion lists the calls the model made."""


@dataclass(frozen=True, slots=True)
class ChainResult:
    """The answer of the chain: which model gave it and every call made for it (failed ones included)."""

    completion: Completion
    spec: ModelSpec
    calls: list[ModelCallRecord] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.completion.text


@runtime_checkable
class Chain(Protocol):
    """The models a turn is answered by, as the pipeline uses them: bot.models.chain.ModelChain (the primary
    model, then its fallbacks, retried and circuit-broken), or a test's fake. The app's lifespan owns it."""

    async def complete(self, messages: Sequence[ChatMessage], *, tools: ToolOffer | None = None) -> ChainResult:
        """The first answer of the chain (offering `tools` to the models that can call them). AllModelsFailed
        (carrying every call) when no model answered."""

    def stream(self, messages: Sequence[ChatMessage], *,
               tools: ToolOffer | None = None) -> AsyncIterator[str | Reset | ChainResult]:
        """Text deltas as they arrive, Reset() when what was shown must be discarded (a fallback starts over),
        then exactly one ChainResult. AllModelsFailed when no model answered."""

    async def aclose(self) -> None:
        """Close the providers' HTTP clients."""
