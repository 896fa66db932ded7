"""`hilo serve` as a process: bind, start, serve, stop.

1. Read the settings and set up logging (to stdout: PM2's out log, journald).
2. Build the app (a generated secret key is kept beside the database) and bind the port: a port in use is
   said before anything starts.
3. Start the app's components: `create_app`'s lifespan (the store and its migrations, the model chain, the
   surfaces: Telegram's getMe, webhook registration ...).
4. Listen and serve with uvicorn. `daemon.started`, with the URL, once the socket accepts connections.
5. SIGTERM / SIGINT: uvicorn stops accepting and finishes the requests in flight; the lifespan then stops the
   surfaces, drains the turns in flight and closes the store (`daemon.stopped`); exit status 0. The signal
   begins ONE budget (HILO_STOP_TIMEOUT, bot/shutdown.py) that all of these share: what still runs when it is
   spent is cancelled and logged, so the process ends before PM2 or systemd kill it.

A daemon that cannot start says why in ONE line, the event `daemon.failed` with `error`, in the configured
log format, and exits non-zero: 2 for a setting to fix, 1 for a service that refused or cannot be reached.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from bot import __version__
from bot.config import Settings
from bot.shutdown import GRACEFUL_SECONDS, StopBudget
from kernel import heap, log
from kernel.errors import ConfigError, HiloError

logger = log.get("hilo.daemon")

__all__ = ["GRACEFUL_SECONDS", "serve"]  # GRACEFUL_SECONDS: uvicorn's graceful wait at most (bot/shutdown.py)


class _Server(uvicorn.Server):
    """uvicorn's server, telling `on_started` when its sockets accept connections, beginning the stop budget at
    SIGTERM / SIGINT, and giving requests in flight only what the budget leaves."""

    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None], budget: StopBudget) -> None:
        super().__init__(config)
        self._on_started = on_started
        self._budget = budget

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._on_started()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._budget.begin()
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # read by uvicorn's shutdown as asyncio.wait_for's timeout (annotated int there; any float works)
        self.config.timeout_graceful_shutdown = self._budget.for_requests(GRACEFUL_SECONDS)  # type: ignore[assignment]
        await super().shutdown(sockets)


def _log_format_hint() -> str:
    """HILO_LOG_FORMAT before the settings could be read (a wrong setting is reported in the format asked)."""
    raw = os.environ.get("HILO_LOG_FORMAT")
    if raw is None and Path(".env").is_file():
        from dotenv import dotenv_values

        raw = dotenv_values(".env").get("HILO_LOG_FORMAT")
    return "json" if (raw or "").strip() == "json" else "console"


def url_of(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (not listening yet). ConfigError saying why when it cannot be."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"--host {host!r} is not an address of this machine ({exc.strerror})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait for TIME_WAIT
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        where = url_of(host, port)
        if exc.errno == errno.EADDRINUSE:
            why = "the port is already in use (another hilo, or another program): stop it or choose --port"
        elif exc.errno == errno.EACCES:
            why = "permission denied (ports below 1024 need privileges): choose --port 8000 or above"
        else:
            why = f"{exc.strerror}: check --host and --port"
        raise ConfigError(f"cannot listen on {where}: {why}") from None
    return sock


class _Stop:
    """SIGTERM / SIGINT before uvicorn takes them (while starting) or after it gave them back (stopping):
    remembered, so that a daemon asked to stop while starting stops as soon as it has started."""

    def __init__(self, budget: StopBudget) -> None:
        self.requested = False
        self._budget = budget
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Stop:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, sig: int, frame: FrameType | None) -> None:
        self._budget.begin()
        self.requested = True


async def _run(app: Any, settings: Settings, sock: socket.socket, host: str, stop: _Stop,
               budget: StopBudget) -> None:
    port = sock.getsockname()[1]
    url = url_of(host, port)
    config = uvicorn.Config(
        app, host=host, port=port, lifespan="off", log_config=None, log_level="warning", access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SECONDS,
        # X-Forwarded-For/-Proto are believed only from HILO_TRUSTED_PROXIES (uvicorn trusts 127.0.0.1 otherwise)
        proxy_headers=bool(settings.trusted_proxies), forwarded_allow_ips=list(settings.trusted_proxies),
    )

    def started() -> None:
        logger.info("daemon.started", url=url, version=__version__, models=[m.label for m in settings.models],
                    surfaces=app.state.hilo["surfaces"])

    async with app.router.lifespan_context(app):  # the components start here (or raise: nothing runs)
        heap.settle()  # what start built stays out of the collections that would pause a turn (kernel/heap.py)
        if not stop.requested:
            await _Server(config, started, budget).serve(sockets=[sock])


def serve(read_settings: Callable[[], Settings], host: str, port: int) -> int:
    """Run the daemon until SIGTERM / SIGINT; the process's exit status."""
    log.configure("info", _log_format_hint(), stream="stdout")
    sock: socket.socket | None = None
    try:
        settings = read_settings()
        log.configure(settings.log_level, settings.log_format, stream="stdout")
        log.capture_uncaught()
        from bot.app import create_app

        budget = StopBudget(settings.stop_timeout)
        app = create_app(settings, stop_budget=budget)
        sock = bind(host, port)
        with _Stop(budget) as stop:
            asyncio.run(_run(app, settings, sock, host, stop, budget))
        return 0
    except ConfigError as exc:
        logger.error("daemon.failed", error=str(exc))
        return 2
    except HiloError as exc:
        logger.error("daemon.failed", error=str(exc))
        return 1
    except Exception as exc:  # a bug: the traceback helps (a field in JSON)
        logger.error("daemon.failed", error=f"{type(exc).__name__}: {exc}", exc_info=exc)
        return 1
    finally:
        if sock is not None:
            sock.close()
