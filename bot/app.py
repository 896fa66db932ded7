"""The daemon's ASGI app: Starlette routes, and a lifespan that owns every component's start and stop.

Start: open the store (pending migrations applied), build the model chain and the pipeline, start each
surface. Stop (SIGTERM): stop the surfaces, drain turns in flight, close the chain and the store.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from bot import __version__, log
from bot.config import Settings, ensure_secret_key
from bot.pipeline import Pipeline
from bot.tasks import TaskSet
from memory.store import Store
from surfaces.base import Runtime, Surface

logger = log.get("hilo.app")


def secret_file(settings: Settings) -> Path:
    """Where a generated HILO_SECRET_KEY is kept: beside the SQLite file, else in the working directory."""
    url = settings.database_url
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return Path(url[len("sqlite:///"):]).with_suffix(".secret")
    return Path(".hilo-secret")


def create_app(
    settings: Settings, *, store: Store | None = None, chain: Any = None, surfaces: list[Surface] | None = None,
) -> Starlette:
    """The app. Tests may pass their own store, chain or surfaces; otherwise they come from settings."""
    from surfaces.registry import enabled

    settings = ensure_secret_key(settings, secret_file(settings))
    active = surfaces if surfaces is not None else enabled(settings)
    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        from bot.models.factory import build_chain
        from memory.open import open_store

        st = store if store is not None else open_store(settings.database_url)
        await st.open()
        ch = chain if chain is not None else build_chain(settings)
        runtime = Runtime(settings, st, ch, Pipeline(settings, st, ch), TaskSet())
        state["runtime"] = runtime
        started: list[Surface] = []
        try:
            for surface in active:
                await surface.start(runtime)
                started.append(surface)
            logger.info("daemon.started", version=__version__, models=[m.label for m in settings.models],
                        surfaces=[s.name for s in started])
            yield
        finally:
            for surface in reversed(started):
                try:
                    await surface.stop()
                except Exception as exc:  # one surface failing to stop must not keep the others running
                    logger.error("surface.stop_failed", surface=surface.name, error=type(exc).__name__)
            await runtime.tasks.drain()
            if chain is None:
                await ch.aclose()
            if store is None:
                await st.close()
            logger.info("daemon.stopped")

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "version": __version__})

    routes: list[BaseRoute] = [Route("/healthz", health)]
    for surface in active:
        routes.extend(surface.routes())
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.hilo = state
    return app
