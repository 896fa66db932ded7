"""The real daemon app under a real uvicorn server on 127.0.0.1, inside the test's event loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from bot.app import create_app
from bot.config import Settings
from tests.fakes.loopback import free_port, serving

__all__ = ["free_port", "running_daemon"]


@asynccontextmanager
async def running_daemon(settings: Settings, **kwargs: Any) -> AsyncIterator[httpx.AsyncClient]:
    """Start `create_app(settings)` under uvicorn on a free loopback port; yield a client bound to it."""
    app = create_app(settings, **kwargs)
    async with serving(app, lifespan="on", name="the daemon") as base_url, \
            httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        client.app = app  # type: ignore[attr-defined]
        yield client
