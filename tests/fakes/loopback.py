"""Serving an ASGI app on 127.0.0.1 for tests, the two ways the fakes need:

- `ThreadedServer(app)`: uvicorn in a background thread with its own event loop, for the session-wide fakes
  (model providers, Twilio, Telegram) that outlive any one test's loop. `start()` returns the base URL,
  `stop()` ends it; also a context manager.
- `serving(app)`: uvicorn as a task in the running (test's) event loop, for apps the test pokes directly (the
  daemon, a page server); an async context manager yielding the base URL.

Both listen on a free loopback port (`free_port()`), never on another interface.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Literal

import uvicorn
from starlette.requests import Request
from starlette.types import ASGIApp

HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (another process may take it before it is bound again)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class ThreadedServer:
    """`app` under uvicorn in a daemon thread on 127.0.0.1. The socket is bound before the thread starts, so
    the port cannot be lost to a race; `start()` waits (up to `start_timeout` s) until uvicorn serves."""

    def __init__(self, app: ASGIApp, *, name: str = "loopback-server", start_timeout: float = 10.0) -> None:
        self.app = app
        self.name = name
        self.start_timeout = start_timeout
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> str:
        """Start serving (a fresh port on each start); the base URL."""
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP; without it every
        # answer after the first on a kept-alive connection waits ~40 ms for a delayed ACK (Nagle)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, host=HOST, port=self.port, log_level="critical", lifespan="off",
            ws="none", http="h11", loop="asyncio", timeout_graceful_shutdown=1, access_log=False,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name=self.name, daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + self.start_timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"{self.name} did not start")
            time.sleep(0.01)
        return self.base_url

    def stop(self) -> None:
        """Ask uvicorn to exit and wait for the thread (up to 10 s). Harmless when not started."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None,
    ) -> None:
        self.stop()


@asynccontextmanager
async def serving(
    app: ASGIApp, port: int | None = None, *, lifespan: Literal["on", "off"] = "off", name: str = "the server",
) -> AsyncIterator[str]:
    """Serve `app` under uvicorn in the running event loop on 127.0.0.1 (a free port unless given); yield its
    base URL. RuntimeError (or the server's own error) when it does not start within 5 s."""
    port = port or free_port()
    config = uvicorn.Config(app, host=HOST, port=port, log_level="warning", lifespan=lifespan)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started or task.done():
            break
        await asyncio.sleep(0.01)
    if not server.started:
        if task.done():
            task.result()
        raise RuntimeError(f"{name} did not start")
    try:
        yield f"http://{HOST}:{port}"
    finally:
        server.should_exit = True
        await task


class HeldSends:
    """A fake's sends held until a gate opens (`hold(gate)`; None: answer at once). A held send whose client went
    away meanwhile (its process was killed) is never sent; `held` counts the sends waiting now."""

    _gate: threading.Event | None = None
    _held = 0
    _held_lock = threading.Lock()

    def hold(self, gate: threading.Event | None) -> None:
        self._gate = gate

    @property
    def held(self) -> int:
        return self._held

    async def released(self, request: Request) -> bool:
        """True at once when nothing is held; else once the gate opens. False when the client went away first."""
        gate = self._gate
        if gate is None:
            return True
        with self._held_lock:
            self._held += 1
        try:
            while not gate.is_set():
                if await request.is_disconnected():
                    return False
                await asyncio.sleep(0.01)
            return not await request.is_disconnected()
        finally:
            with self._held_lock:
                self._held -= 1
