"""Where Prometheus scrapes /metrics (bot/metrics.py), never public by default:

- HILO_METRICS_PORT: a port of its own (HILO_METRICS_HOST, loopback unless set), served by a second uvicorn
  server inside the daemon's event loop, without a token: keep that port off the internet (a firewall, a private
  network, the container's unpublished port);
- HILO_METRICS_TOKEN: GET /metrics on the main port too, only with `Authorization: Bearer <token>` (401 without
  one, 403 with another: compared in constant time).
With neither, nothing serves metrics: the main app has no /metrics route (404).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import socket
from collections.abc import Iterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bot import metrics as metrics_module
from bot.config import Settings
from bot.metrics import Metrics
from kernel import log

logger = log.get("hilo.metrics")

PATH = "/metrics"


def _endpoint(metrics: Metrics, token: str | None) -> Route:
    async def scrape(request: Request) -> Response:
        if token is not None:
            given = request.headers.get("authorization", "")
            if not given.lower().startswith("bearer "):
                return JSONResponse({"error": "unauthorized", "detail": "send Authorization: Bearer <HILO_METRICS_"
                                     "TOKEN>"}, status_code=401, headers={"www-authenticate": "Bearer"})
            if not hmac.compare_digest(given[7:].strip().encode(), token.encode()):
                return JSONResponse({"error": "forbidden", "detail": "not the HILO_METRICS_TOKEN"}, status_code=403)
        return Response(await metrics.exposition(), media_type=metrics_module.CONTENT_TYPE_LATEST,
                        headers={"cache-control": "no-store"})

    return Route(PATH, scrape, methods=["GET"])


def metrics_route(metrics: Metrics, token: str) -> Route:
    """GET /metrics on the main app, behind the bearer token."""
    return _endpoint(metrics, token)


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers (SIGTERM belongs to the daemon's own server, bot/daemon.py), saying when
    it serves."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.up = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets)
        finally:
            self.up.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class MetricsServer:
    """/metrics on HILO_METRICS_PORT while the app runs (nothing when it is 0). `start` raises ConfigError when the
    port cannot be bound."""

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        s = self.settings
        if not s.metrics_port:
            return
        from bot.daemon import bind, url_of

        sock = bind(s.metrics_host, s.metrics_port)
        app = Starlette(routes=[_endpoint(self.metrics, None)])
        config = uvicorn.Config(app, host=s.metrics_host, port=s.metrics_port, lifespan="off", log_config=None,
                                log_level="warning", access_log=False, timeout_graceful_shutdown=1)
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="metrics.server")
        waiter = asyncio.create_task(self._server.up.wait())
        await asyncio.wait([self._task, waiter], return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if self._task.done():  # it could not serve
            self._task.result()
        logger.info("metrics.serving", url=url_of(s.metrics_host, s.metrics_port) + PATH)

    async def stop(self) -> None:
        server, task, self._server, self._task = self._server, self._task, None, None
        if server is None or task is None:
            return
        server.should_exit = True
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(task, 3)
