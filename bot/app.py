"""The daemon's ASGI app: Starlette routes, and a lifespan that owns every component's start and stop.

Start: open the store (pending migrations applied), build the model chain, the pipeline and the surfaces.
Stop (SIGTERM): stop accepting background work, drain turns in flight, close the chain and the store.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bot import __version__, log
from bot.config import Settings, ensure_secret_key
from bot.pipeline import Pipeline
from bot.tasks import TaskSet
from memory.store import Store

logger = log.get("hilo.app")


@dataclass
class Components:
    settings: Settings
    store: Store
    chain: Any
    pipeline: Pipeline
    tasks: TaskSet


def secret_file(settings: Settings) -> Path:
    """Where a generated HILO_SECRET_KEY is kept: beside the SQLite file, else in the working directory."""
    url = settings.database_url
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return Path(url[len("sqlite:///"):]).with_suffix(".secret")
    return Path(".hilo-secret")


def create_app(settings: Settings, *, store: Store | None = None, chain: Any = None) -> Starlette:
    """The app. Tests may pass their own store or chain; otherwise they are built from settings at start."""
    from surfaces.web import Sessions, WebAPI

    settings = ensure_secret_key(settings, secret_file(settings))
    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        from bot.models.factory import build_chain
        from memory.open import open_store

        own_store = store is None
        st = store if store is not None else open_store(settings.database_url)
        await st.open()
        ch = chain if chain is not None else build_chain(settings)
        pipeline = Pipeline(settings, st, ch)
        tasks = TaskSet()
        comps = Components(settings, st, ch, pipeline, tasks)
        state["components"] = comps
        web.pipeline = pipeline
        logger.info("daemon.started", version=__version__, models=[m.label for m in settings.models])
        try:
            yield
        finally:
            await tasks.drain()
            if chain is None:
                await ch.aclose()
            if own_store:
                await st.close()
            logger.info("daemon.stopped")

    web = WebAPI(pipeline=None, sessions=Sessions(settings.secret_key))  # type: ignore[arg-type]

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "version": __version__})

    async def index(request: Request) -> JSONResponse:
        return JSONResponse({
            "name": "hilo", "version": __version__,
            "api": ["POST /api/session", "POST /api/messages", "GET /api/conversations",
                    "GET /api/conversations/{id}/messages"],
        })

    app = Starlette(routes=[Route("/", index), Route("/healthz", health), *web.routes()], lifespan=lifespan)
    app.state.hilo = state
    return app
