"""The daemon's ASGI app: Starlette routes, and a lifespan that owns every component's start and stop.

Start: open the store (pending migrations applied), build the model chain and the pipeline, start each
surface, then the background jobs (bot/jobs.py). Stop (SIGTERM): the jobs take no new runs and drain first
(their work may need the surfaces' senders), then the surfaces stop, turns in flight drain, the chain and the
store close.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from bot import __version__, job_list
from bot.config import Settings, ensure_secret_key
from bot.jobs import JobRegistry, Scheduler
from bot.models.base import Chain
from bot.pipeline import Pipeline
from bot.plugins import enabled_surfaces
from bot.runtime import Runtime, Surface
from bot.tasks import TaskSet
from kernel import log, tokens
from kernel.errors import ConfigError
from memory.open import SQLITE_PREFIX, open_store, sqlite_path
from memory.store import Store

logger = log.get("hilo.app")


def secret_file(settings: Settings) -> Path:
    """Where a generated HILO_SECRET_KEY is kept: beside the SQLite file, its suffix replaced by `.secret`
    (sqlite:///data/hilo.db -> data/hilo.secret); for Postgres (or :memory:) `.hilo-secret` in the working
    directory."""
    url = settings.database_url
    if url.startswith(SQLITE_PREFIX) and url != "sqlite:///:memory:":
        return Path(sqlite_path(url)).with_suffix(".secret")
    return Path(".hilo-secret")


def with_secret_key(settings: Settings) -> Settings:
    """`settings` with HILO_SECRET_KEY, generated into `secret_file` on first run. ConfigError when that file
    cannot be kept: its directory (the database's) is missing or not writable."""
    path = secret_file(settings)
    try:
        return ensure_secret_key(settings, path)
    except FileNotFoundError:
        raise ConfigError(
            f"the directory {path.parent.absolute()} does not exist: it holds the database and its generated "
            f"secret key ({path.name}). Create it (mkdir -p {path.parent.absolute()}) or set HILO_DATABASE_URL"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"cannot write the generated secret key {path.absolute()} ({exc.strerror}): make "
            f"{path.parent.absolute()} writable for this user, or set HILO_SECRET_KEY"
        ) from None


def create_app(
    settings: Settings, *, store: Store | None = None, chain: Chain | None = None,
    surfaces: list[Surface] | None = None, jobs: JobRegistry | None = None,
) -> Starlette:
    """The app. Tests may pass their own store, chain, surfaces or jobs; otherwise they come from settings
    (the jobs: bot/job_list.py). `app.state.hilo` holds the Runtime (`runtime`), the names of the started
    surfaces (`surfaces`) and the job Scheduler (`jobs`) while it runs. A start that fails undoes what it
    started and raises: nothing is logged here, the caller says why (`hilo serve`: one `daemon.failed` line)."""
    settings = with_secret_key(settings)
    active = surfaces if surfaces is not None else enabled_surfaces(settings)
    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        from bot.models.factory import build_chain

        st = store if store is not None else open_store(settings.database_url)
        ch: Chain | None = None
        started: list[Surface] = []
        runtime: Runtime | None = None
        scheduler: Scheduler | None = None

        async def stop() -> None:
            if scheduler is not None:
                await scheduler.stop()
            for surface in reversed(started):
                try:
                    await surface.stop()
                except Exception as exc:  # one surface failing to stop must not keep the others running
                    logger.error("surface.stop_failed", surface=surface.name, error=type(exc).__name__)
            if runtime is not None:
                await runtime.tasks.drain()
            if chain is None and ch is not None:
                await ch.aclose()
            if store is None:
                await st.close()

        # The tokenizer loads on a thread while the store opens and the surfaces start: no turn waits for it.
        loader = tokens.preload()
        try:
            await st.open()
            ch = chain if chain is not None else build_chain(settings)
            runtime = Runtime(settings, ch, Pipeline(settings, st, ch), TaskSet())
            state["runtime"] = runtime
            for surface in active:
                await surface.start(runtime)
                started.append(surface)
            scheduler = Scheduler(st, jobs if jobs is not None else job_list.registry(settings, st))
            await scheduler.start()
            state["jobs"] = scheduler
            if loader is not None:
                await asyncio.to_thread(loader.join)
        except BaseException:
            await stop()
            raise
        state["surfaces"] = [s.name for s in started]
        try:
            yield
        finally:
            await stop()
            logger.info("daemon.stopped")

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "version": __version__})

    routes: list[BaseRoute] = [Route("/healthz", health)]
    for surface in active:
        routes.extend(surface.routes())
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.hilo = state
    return app
