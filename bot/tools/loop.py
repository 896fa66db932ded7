"""The bounded tool loop of a turn: model -> tool calls -> results -> model, until the model answers in text.

    loop = ToolLoop(chain, registry, steps=4, seconds=30.0, cost_usd=0.05)
    ran = await loop.run(ctx.messages, offer, tool_ctx, on_delta)     # Ran(completion, calls, failure, ...)

Each step asks the chain (streamed when the turn streams) with the tools offered; when the answer calls tools,
the assistant's calls and each call's result (bot/tools/registry.py: a failing tool is an error result, never a
failed turn) are appended to the model's input and to `Ran.messages`, which the pipeline stores with the reply
(memory/tool_rows.py) so that later turns know what the tools did. Bounds: after `steps` rounds of calls, once
`seconds` have passed since the first call, or once the turn's model calls cost `cost_usd` (0: no cost bound),
the model is asked one last time with the tools still declared but `tool_choice` "none": it must answer in text.
A tool call never outlives the time left. Without an offer the loop is one plain call of the chain.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from bot.models.base import AllModelsFailed, Chain, ChainResult, Completion, Reset, ToolOffer
from bot.tools.registry import Registry, ToolContext
from kernel import log
from kernel.types import ChatMessage, ModelCallRecord

logger = log.get("hilo.tools")

#: bot.pipeline.DeltaSink: a text delta, or reset=True ("discard what you showed").
Sink = Callable[[str, bool], Awaitable[None]]


@dataclass(slots=True)
class Ran:
    """What the loop did: the final answer (None when every model failed, `failure` says how), every model call
    of every step, the turn's tool calls and results in order (to store), the text the last step streamed, and
    the steps that called tools."""

    completion: Completion | None
    calls: list[ModelCallRecord] = field(default_factory=list)
    failure: AllModelsFailed | None = None
    messages: list[ChatMessage] = field(default_factory=list)
    shown: str = ""
    steps: int = 0


class ToolLoop:
    """Runs one turn's model calls and tool calls within the bounds (see the module docstring)."""

    def __init__(self, chain: Chain, registry: Registry, *, steps: int, seconds: float, cost_usd: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.chain = chain
        self.registry = registry
        self.steps = steps
        self.seconds = seconds
        self.cost_usd = cost_usd
        self._clock = clock

    async def run(self, messages: Sequence[ChatMessage], offer: ToolOffer | None, ctx: ToolContext | None,
                  on_delta: Sink | None = None) -> Ran:
        ran = Ran(None)
        asked = list(messages)
        deadline = self._clock() + self.seconds
        while True:
            bounded = offer is not None and self._bounded(ran, deadline)
            tools = ToolOffer(offer.specs, "none") if offer is not None and bounded else offer
            try:
                result, ran.shown = await self._ask(asked, tools, on_delta)
            except AllModelsFailed as exc:
                ran.calls.extend(exc.calls)
                ran.failure = exc
                return ran
            ran.calls.extend(result.calls)
            completion = result.completion
            if tools is None or bounded or not completion.tool_calls or ctx is None:
                ran.completion = completion
                if bounded:
                    logger.info("tools.bounded", user_id=ctx.user_id if ctx else None, steps=ran.steps,
                                cost_usd=round(self._spent(ran), 6))
                return ran
            if on_delta is not None and ran.shown:
                await on_delta("", True)  # the text before the calls is not the reply: the reply comes after
            ran.steps += 1
            call_message = ChatMessage("assistant", completion.text, tool_calls=completion.tool_calls)
            asked.append(call_message)
            ran.messages.append(call_message)
            for call in completion.tool_calls:
                done = await self.registry.call(call, ctx, timeout=deadline - self._clock())
                reply = ChatMessage("tool", done.content, tool_call_id=call.id, tool_name=call.name,
                                    tool_error=done.error)
                asked.append(reply)
                ran.messages.append(reply)

    def _bounded(self, ran: Ran, deadline: float) -> bool:
        """No more tool calls this turn: steps used up, time up, or the cost bound reached."""
        return (ran.steps >= self.steps or self._clock() >= deadline
                or (self.cost_usd > 0 and self._spent(ran) >= self.cost_usd))

    @staticmethod
    def _spent(ran: Ran) -> float:
        return sum(c.cost_usd for c in ran.calls)

    async def _ask(self, messages: Sequence[ChatMessage], tools: ToolOffer | None,
                   on_delta: Sink | None) -> tuple[ChainResult, str]:
        """One answer of the chain, streamed to `on_delta` when given: (the result, the text it showed). Without
        tools the chain is asked as before tools existed (a Chain that takes no `tools` still works)."""
        offer: dict[str, ToolOffer] = {"tools": tools} if tools is not None else {}
        if on_delta is None:
            return await self.chain.complete(messages, **offer), ""
        shown: list[str] = []
        async for event in self.chain.stream(messages, **offer):
            if isinstance(event, ChainResult):
                return event, "".join(shown)
            if isinstance(event, Reset):
                shown.clear()
                await on_delta("", True)
            else:
                shown.append(event)
                await on_delta(event, False)
        raise RuntimeError("model stream ended without a result")
