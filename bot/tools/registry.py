"""The tool registry: tools with JSON-schema arguments, offered to the model, called with the turn's person.

    registry = Registry([now_tool, remember_tool])
    registry.offer(private=True)                       # ToolOffer of the tools this turn may use
    result = await registry.call(call, ctx)            # ToolResult: content, error flag

A tool never learns whose turn it is from the model: `ToolContext` (the user id, the store, the person's time zone
and language) is built by the pipeline from the stored turn; the model's arguments only say what to do. A tool
that fails (ToolError, a bad argument, an exception, its time running out) becomes an error result the model reads,
never a failed turn; asyncio.CancelledError always propagates. Logs carry the tool's name, the call's outcome and
sizes, never the arguments or the result.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot.models.base import ToolOffer
from kernel import log
from kernel.errors import ConfigError, HiloError
from kernel.types import ToolCall, ToolSpec
from memory.store import Store

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

    from bot.erasures import Erasures

logger = log.get("hilo.tools")


class ToolError(HiloError):
    """A tool could not do what it was asked; its message (written by hilo, never holding secrets) is what the
    model reads as the result."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool knows of the turn, from the pipeline: whose it is (`user_id`: every read and write of a tool is
    this person's), the store, the moment, the person's time zone (an IANA name, "UTC" when unknown: `zone_known`
    says) and language."""

    user_id: int
    store: Store
    now: datetime
    timezone: str = "UTC"
    language: str = "en"
    zone_known: bool = True
    #: the person's message whose turn this is (a reminder records it); None outside a turn
    message_id: int | None = None
    #: where `forget` notes a memory before deleting it (bot/erasures.py); None: nowhere (an in-memory database)
    erasures: Erasures | None = None


Run = Callable[[ToolContext, Mapping[str, Any]], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Tool:
    """One tool: its spec (what the model is offered) and what runs it. `private`: it reads or writes the
    person's memory, so it is not offered where others read the answer (a group)."""

    spec: ToolSpec
    run: Run = field(hash=False)
    private: bool = True


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A call's result as the model reads it (`error`: the tool failed and `content` says how)."""

    call: ToolCall
    content: str
    error: bool = False


#: The longest explanation of a wrong argument the model reads (jsonschema quotes the value it refused).
ERROR_CHARS = 300


def validator(schema: Mapping[str, Any], where: str) -> Draft202012Validator:
    """A JSON Schema (2020-12) validator of a tool's arguments: the whole standard, by the jsonschema package
    (imported only where tools are on). A schema that is not one is a ConfigError saying `where`."""
    from jsonschema import Draft202012Validator, SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ConfigError(f"{where}: parameters is not a valid JSON schema: {exc.message}") from None
    if schema.get("type") != "object":
        raise ConfigError(f"{where}: parameters must be a JSON schema of type object")
    return Draft202012Validator(schema)


def check_arguments(checker: Draft202012Validator, arguments: Mapping[str, Any]) -> None:
    """ToolError when `arguments` break the tool's schema (`checker`: its validator): the missing and the unknown
    arguments by name, any other rule by jsonschema's explanation of the error that matters most."""
    from jsonschema.exceptions import best_match

    errors = list(checker.iter_errors(arguments))
    if not errors:
        return
    top = [e for e in errors if not e.absolute_path]
    missing = sorted({str(m) for e in top if e.validator == "required" for m in e.validator_value
                      if m not in arguments})
    if missing:
        raise ToolError(f"missing argument(s): {', '.join(missing)}")
    schema = checker.schema if isinstance(checker.schema, Mapping) else {}
    known, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extra = sorted(n for n in arguments if n not in known and not any(re.search(p, n) for p in patterns)
                   ) if any(e.validator == "additionalProperties" for e in top) else []
    if extra:
        raise ToolError(f"unknown argument(s): {', '.join(extra)}")
    error = best_match(errors)
    where = ".".join(str(p) for p in error.absolute_path)
    said = f"argument {where}: {error.message}" if where else error.message
    raise ToolError(said if len(said) <= ERROR_CHARS else said[:ERROR_CHARS - 1] + "…")


class Registry:
    """The tools this daemon offers, by name."""

    def __init__(self, tools: Iterable[Tool] = (), *, timeout: float = 10.0) -> None:
        self.tools = {t.spec.name: t for t in tools}
        self._checkers = {name: validator(t.spec.parameters, f"tool {name}") for name, t in self.tools.items()}
        #: a single call's time limit, in seconds (the loop's own bound may cut it shorter)
        self.timeout = timeout

    def __bool__(self) -> bool:
        return bool(self.tools)

    def offer(self, *, private: bool) -> ToolOffer | None:
        """The tools a turn is offered (without the private ones where others read the answer); None: none."""
        specs = tuple(t.spec for t in self.tools.values() if private or not t.private)
        return ToolOffer(specs) if specs else None

    async def call(self, call: ToolCall, ctx: ToolContext, *, timeout: float | None = None) -> ToolResult:
        """Run one call for the turn of `ctx`: its result, or an error result (never raises but cancellation)."""
        started = time.perf_counter()
        tool = self.tools.get(call.name)
        try:
            if tool is None:
                raise ToolError(f"there is no tool named {call.name!r}")
            check_arguments(self._checkers[call.name], call.arguments)
            limit = self.timeout if timeout is None else min(timeout, self.timeout)
            content = await asyncio.wait_for(tool.run(ctx, call.arguments), max(limit, 0.0))
            result = ToolResult(call, content)
        except ToolError as exc:
            result = ToolResult(call, f"error: {exc}", error=True)
        except TimeoutError:
            result = ToolResult(call, "error: the tool took too long and was stopped", error=True)
        except Exception as exc:  # a tool's bug is the model's error result, not the person's failed turn
            logger.error("tool.crashed", tool=call.name, user_id=ctx.user_id, error=type(exc).__name__)
            result = ToolResult(call, f"error: the tool failed ({type(exc).__name__})", error=True)
        logger.info("tool.called", tool=call.name if tool is not None else "unknown", user_id=ctx.user_id,
                    ok=not result.error, chars_out=len(result.content),
                    ms=round((time.perf_counter() - started) * 1000, 2))
        return result
