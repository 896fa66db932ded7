"""The health endpoints: GET /healthz (the process is alive) and GET /readyz (it can take work now).

    /healthz  200 always while the process serves: {"status": "ok", "version", "database": {"ok", "error"?}}
    /readyz   200 {"ready": true, "checks": {...}} when every check passes, else 503 (Retry-After) with the
              failing checks: {"ready": false, "checks": {"database": {"ok": false, "error": "StoreUnavailable"}}}

The database check is the store's probe (`Store.probe`: one write transaction of one statement), so "ready"
means reachable AND writable: Postgres down, a full disk, a read-only file and a deleted SQLite file all fail it.
A success is kept for PROBE_CACHE_S, so that a load balancer polling often costs one write a second at most (a
failure is asked again at the next poll, so recovery shows at once), and the probe waits at most PROBE_TIMEOUT_S
(a locked database is not ready).

The seam for more checks: `Health.add(name, check)`, where `check` is an async callable returning a JSON-ready dict
with "ok"; /readyz is ready only when every one is ok. The app adds (bot/readiness.py) each started surface's own
check, the models' circuits and the outbox's backlog. None of them touches /healthz.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from bot import __version__
from kernel import log
from kernel.errors import StoreError
from memory.store import Store

logger = log.get("hilo.health")

Check = Callable[[], Awaitable[dict[str, Any]]]

PROBE_TIMEOUT_S = 2.0
PROBE_CACHE_S = 1.0
#: What a 503 of /readyz tells a caller to wait before asking again.
RETRY_AFTER_S = 5


class Health:
    """The checks behind /healthz and /readyz. `store` is looked up when asked (it opens in the lifespan)."""

    def __init__(self, store: Callable[[], Store | None]) -> None:
        self._store = store
        self._checks: dict[str, Check] = {"database": self.database}
        self._last: tuple[float, dict[str, Any]] | None = None
        self._failing = False

    def add(self, name: str, check: Check) -> None:
        """One more readiness check (its dict must hold "ok")."""
        self._checks[name] = check

    async def database(self) -> dict[str, Any]:
        """{"ok": True} when the store took its probe's write, else {"ok": False, "error": <kind>}."""
        now = time.monotonic()
        if self._last is not None and now - self._last[0] < PROBE_CACHE_S:
            return self._last[1]
        store = self._store()
        result: dict[str, Any]
        if store is None:
            result = {"ok": False, "error": "starting"}
        else:
            try:
                await asyncio.wait_for(store.probe(), PROBE_TIMEOUT_S)
                result = {"ok": True}
            except StoreError as exc:
                result = {"ok": False, "error": type(exc).__name__}
            except TimeoutError:
                result = {"ok": False, "error": "timeout"}
        if result["ok"] == self._failing:  # said once per change, never per poll
            self._failing = not result["ok"]
            if self._failing:
                logger.error("health.database_failing", error=result["error"])
            else:
                logger.info("health.database_ok")
        self._last = (time.monotonic(), result) if result["ok"] else None  # a failure is asked again at once
        return result

    async def healthz(self, request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "version": __version__, "database": await self.database()})

    async def readyz(self, request: Request) -> JSONResponse:
        checks = {name: await check() for name, check in self._checks.items()}
        ready = all(c["ok"] for c in checks.values())
        response = JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)
        if not ready:
            response.headers["retry-after"] = str(RETRY_AFTER_S)
        return response
