"""The real daemon app under a real uvicorn server on 127.0.0.1, inside the test's event loop."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn

from bot.app import create_app
from bot.config import Settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def running_daemon(settings: Settings, **kwargs: Any) -> AsyncIterator[httpx.AsyncClient]:
    """Start `create_app(settings)` under uvicorn on a free loopback port; yield a client bound to it."""
    app = create_app(settings, **kwargs)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started or task.done():
            break
        await asyncio.sleep(0.01)
    if not server.started:
        if task.done():
            task.result()
        raise RuntimeError("the daemon did not start")
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            client.app = app  # type: ignore[attr-defined]
            yield client
    finally:
        server.should_exit = True
        await task
