"""The readiness checks beyond the database's (bot/health.py `Health.add`): the model chain's circuits, the outbox's
backlog, and a surface's own (its `ready()`, when it has one: Telegram's polling loop or webhook, Twilio's
credentials). Each answers a JSON-ready dict with "ok"; /readyz is 503 while any is not ok.

- models: each model's circuit state (bot/models/chain.py CircuitBreaker): closed, half_open or open. An open
  circuit on a fallback, or on the primary while a fallback can answer, is reported and still ready; when every
  model's circuit is open (the last model of the chain too: nothing is left to answer) it is not ready.
- outbox: the parts not delivered yet and the oldest one's age; not ready while that age passes
  HILO_READY_OUTBOX_AGE (the sender is stuck, or a surface cannot deliver).
Every check is cheap: the circuits are in memory, the backlog is one indexed read kept for CACHE_S.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bot.health import Check
from kernel.errors import StoreError
from memory.store import Store

#: How long a check's answer is kept (a load balancer polling every second costs one read per CACHE_S).
CACHE_S = 5.0
#: A check waits at most this for the database (a locked one is not ready), as the database's probe does.
TIMEOUT_S = 2.0


def cached(check: Check, ok_s: float = CACHE_S, failed_s: float = 0.0,
           clock: Callable[[], float] = time.monotonic) -> Check:
    """`check`, its answer kept for `ok_s` s when ok and `failed_s` s when not (by default a failure is asked
    again at the next poll, as the database's is, so recovery shows at once)."""
    last: list[tuple[float, dict[str, Any]]] = []

    async def run() -> dict[str, Any]:
        now = clock()
        if last and now - last[0][0] < (ok_s if last[0][1]["ok"] else failed_s):
            return last[0][1]
        result = await check()
        last[:] = [(clock(), result)]
        return result

    return run


def models_check(chain: object) -> Check:
    """The chain's circuits, by model label. A chain without breakers (a test's fake) is always ok."""
    breakers: dict[str, Any] = getattr(chain, "breakers", {}) or {}

    async def run() -> dict[str, Any]:
        states = {label: breaker.state for label, breaker in breakers.items()}
        ok = not states or any(state != "open" for state in states.values())
        result: dict[str, Any] = {"ok": ok, "circuits": states}
        if not ok:
            result["error"] = "every model's circuit is open"
        return result

    return run


def backlog_reader(store: Store) -> Callable[[], Awaitable[tuple[int, float]]]:
    """(undelivered parts, the oldest one's age in s by the store's clock). StoreError when it cannot be read."""

    async def read() -> tuple[int, float]:
        count, oldest = await store.outbox_backlog()
        age = max(0.0, (store.clock() - oldest).total_seconds()) if oldest is not None else 0.0
        return count, age

    return read


def outbox_check(store: Store, max_age: float) -> Check:
    read = backlog_reader(store)

    async def run() -> dict[str, Any]:
        try:
            count, age = await asyncio.wait_for(read(), TIMEOUT_S)
        except StoreError as exc:
            return {"ok": False, "error": type(exc).__name__}
        except TimeoutError:
            return {"ok": False, "error": "timeout"}
        result: dict[str, Any] = {"ok": age <= max_age, "pending": count, "oldest_s": round(age, 1),
                                  "max_age_s": max_age}
        if not result["ok"]:
            result["error"] = "the oldest undelivered part is older than HILO_READY_OUTBOX_AGE"
        return result

    # kept by the store's clock, which also times the parts (the tests move it)
    return cached(run, clock=lambda: store.clock().timestamp())
