"""A real browser for tests: Debian's Chromium driven by Playwright (never `playwright install`), plus the
loopback pieces the widget tests need: a slow echo model (so streaming is visible) and a tiny second web
server, on another port, that plays a third-party site embedding widget.js.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from typing import Any

from bot.models.base import Completion
from bot.models.echo import EchoProvider
from kernel.types import ChatMessage
from tests.fakes.loopback import serving  # noqa: F401 (the widget tests take it from here)

CHROMIUM = os.environ.get("HILO_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--disable-quic", "--no-first-run",
]


def chromium_path() -> str:
    """Debian's Chromium, or a loud failure that says how to get it (the browser tests are never skipped)."""
    if not os.access(CHROMIUM, os.X_OK):
        raise RuntimeError(
            f"{CHROMIUM} not found: the widget tests drive Debian's Chromium. Install it with "
            "`apt-get update && apt-get install -y chromium` (scripts/test.sh does this when run as root), "
            "or point HILO_TEST_CHROMIUM at a Chromium binary. Do not run `playwright install`."
        )
    return CHROMIUM


async def launch(playwright: Any) -> Any:
    return await playwright.chromium.launch(
        executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)


class SlowEcho(EchoProvider):
    """The echo model, streaming its 3-word chunks `delay` seconds apart, like a real model would."""

    def __init__(self, delay: float = 0.04) -> None:
        self.delay = delay

    async def stream(
        self, model: str, messages: Sequence[ChatMessage], *, timeout: float,
    ) -> AsyncIterator[str | Completion]:
        async for event in super().stream(model, messages, timeout=timeout):
            if isinstance(event, str):
                await asyncio.sleep(self.delay)
            yield event
