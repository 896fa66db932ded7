"""The daemon's ASGI app: Starlette routes, and a lifespan that owns every component's start and stop.

Start: open the store (pending migrations applied), build the model chain and the pipeline, start each
surface, then the background jobs (bot/jobs.py). Stop (SIGTERM): the jobs take no new runs and drain first
(their work may need the surfaces' senders), then the surfaces stop, turns in flight drain, the chain and the
store close. The jobs' drain, the surfaces' stop and the turns' drain each get at most what is left of ONE budget
measured from SIGTERM (HILO_STOP_TIMEOUT, bot/shutdown.py); what overruns it is cancelled and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.routing import BaseRoute, Route

from bot import job_list
from bot.config import Settings, ensure_secret_key
from bot.health import Health
from bot.jobs import JobRegistry, Scheduler
from bot.media import forget_again
from bot.metrics import Metrics
from bot.metrics_http import MetricsServer, metrics_route
from bot.models.base import Chain
from bot.pipeline import Pipeline
from bot.plugins import enabled_surfaces
from bot.readiness import backlog_reader, models_check, outbox_check
from bot.runtime import Runtime, Surface
from bot.shutdown import StopBudget
from bot.tasks import TaskSet
from kernel import log, tokens
from kernel.errors import ConfigError
from memory.open import SQLITE_PREFIX, open_store, sqlite_path
from memory.store import Store

logger = log.get("hilo.app")
#: At most this much of the stop budget goes to the outbox's sends in flight (after the surfaces' own flush).
OUTBOX_DRAIN_SECONDS = 5.0
#: At most this much goes to a journal replay in progress (bot/intake.py; each message is one transaction).
INTAKE_STOP_SECONDS = 5.0
#: Seconds the stop waits for alerts still being sent (a webhook or SMTP server that hangs is cut then).
ALERTS_DRAIN_SECONDS = 5.0


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


async def _stop_surface(surface: Surface, budget: StopBudget) -> None:
    """Stop `surface` within what is left of the budget; cancelled (and logged) when it takes longer. One surface
    failing to stop must not keep the others running."""
    began = time.monotonic()
    try:
        await asyncio.wait_for(surface.stop(), budget.left())
    except TimeoutError:
        logger.warning("surface.stop_cancelled", surface=surface.name,
                       ran_ms=round((time.monotonic() - began) * 1000))
    except Exception as exc:
        logger.error("surface.stop_failed", surface=surface.name, error=type(exc).__name__)


def create_app(
    settings: Settings, *, store: Store | None = None, chain: Chain | None = None,
    surfaces: list[Surface] | None = None, jobs: JobRegistry | None = None, stop_budget: StopBudget | None = None,
) -> Starlette:
    """The app. Tests may pass their own store, chain, surfaces or jobs; otherwise they come from settings
    (the jobs: bot/job_list.py); `stop_budget` is the shutdown budget the daemon begins at SIGTERM (default: a
    new one of HILO_STOP_TIMEOUT s, begun when the stop begins). `app.state.hilo` holds the Runtime
    (`runtime`), the names of the started surfaces (`surfaces`), the job Scheduler (`jobs`), the embedder
    (`embedder`, bot/embedders) and the open store (`store`, for /healthz and /readyz: bot/health.py) while it
    runs.
    A start that fails undoes what it started and raises: nothing is logged here, the caller says why
    (`hilo serve`: one `daemon.failed` line)."""
    settings = with_secret_key(settings)
    budget = stop_budget if stop_budget is not None else StopBudget(settings.stop_timeout)
    active = surfaces if surfaces is not None else enabled_surfaces(settings)
    state: dict[str, Any] = {}
    health = Health(lambda: state.get("store"))
    # a registry of this app's own (bot/metrics.py), only when something can scrape it: with metrics off, no
    # prometheus-client is imported and a turn records nothing (the counters cost ~20 us a turn and 5 MB)
    metrics = Metrics() if settings.metrics_port or settings.metrics_token else None

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        from bot.embedders.factory import announce, build_embedder
        from bot.models.factory import build_chain

        st = store if store is not None else open_store(settings.database_url)
        ch: Chain | None = None
        started: list[Surface] = []
        runtime: Runtime | None = None
        scheduler: Scheduler | None = None
        exporter = MetricsServer(settings, metrics) if metrics is not None else None
        # A local model loads at start on its own thread, in a tracked task (no start waits for it: the surfaces serve
        # meanwhile, and a turn's question waits for the load at most HILO_EMBED_QUERY_TIMEOUT); the embed job embeds
        # new messages, each turn its question.
        # Which embedder runs is said once everything has started (a start that fails says only why, in one line).
        embedder = build_embedder(settings)

        async def stop() -> None:
            # every phase gets at most what is left of ONE budget from SIGTERM (bot/shutdown.py)
            if exporter is not None and metrics is not None:
                await exporter.stop()
                metrics.deactivate()
            if scheduler is not None:
                await scheduler.stop(timeout=budget.left(scheduler.drain_timeout))
            if runtime is not None:  # before the surfaces its replayed messages run through; what is still
                await runtime.intake.stop(budget.left(INTAKE_STOP_SECONDS))  # journaled: the next start's
            for surface in reversed(started):
                await _stop_surface(surface, budget)
            if runtime is not None:  # the surfaces flushed their parts before closing; the rest waits for a start
                await runtime.pipeline.outbox.stop(timeout=budget.left(OUTBOX_DRAIN_SECONDS))
                await runtime.tasks.drain(timeout=budget.left())
                # turns a surface runs outside the task set (Telegram's, in python-telegram-bot's update
                # processing) and still running now are cancelled too, before the chain and the store close under
                # them (a closed model client would fail them into an apology): stored, unanswered, recovered
                await runtime.pipeline.cancel_turns()
                await runtime.pipeline.alerts.drain(timeout=budget.left(ALERTS_DRAIN_SECONDS))  # alerts the stop met
                await runtime.listener.aclose()  # the transcriber's client, once no turn uses it
            if chain is None and ch is not None:
                await ch.aclose()
            if store is None:
                await st.close()
            await embedder.aclose()

        # The token index opens (on a first start: is built) on a thread while the store opens and the surfaces
        # start: no turn waits for it (kernel/tokens.py; tiktoken loads only for a text the index leaves to it).
        loader = tokens.preload()
        try:
            await st.open()
            state["store"] = st
            if metrics is not None:
                metrics.activate(backlog_reader(st))
            ch = chain if chain is not None else build_chain(settings)
            runtime = Runtime(settings, ch, Pipeline(settings, st, ch, embedder), TaskSet(), budget)
            state["runtime"] = runtime
            if runtime.pipeline.erasures is not None:  # before any surface serves whom a restored backup brought back
                await forget_again(runtime.pipeline.erasures, st, runtime.pipeline.media_files)
            for surface in active:
                await surface.start(runtime)
                started.append(surface)
                ready = getattr(surface, "ready", None)  # optional: Telegram's loop or webhook, Twilio's account
                if ready is not None:
                    health.add(surface.name, ready)
            health.add("models", models_check(ch))
            health.add("outbox", outbox_check(st, settings.ready_outbox_age))
            runtime.pipeline.outbox.start(runtime.tasks)  # resumes what an earlier run left undelivered
            scheduler = Scheduler(st, jobs if jobs is not None else job_list.registry(
                settings, st, ch, embedder, pipeline=runtime.pipeline))
            await scheduler.start()
            runtime.intake.start()  # replays what the last run kept while the database was away, then watches
            if any(job.name == "recover" for job in scheduler.registry):  # at start too, not only when due
                runtime.tasks.spawn(scheduler.run_now("recover"), name="recover.start")
            state["jobs"] = scheduler
            state["embedder"] = embedder
            state["metrics"] = metrics
            if exporter is not None:
                await exporter.start()
            if loader is not None:
                await asyncio.to_thread(loader.join)
        except BaseException:
            await stop()
            raise
        state["surfaces"] = [s.name for s in started]
        announce(settings, embedder, st.vector_status)
        # once everything started (a start that fails has no load to wait for); before, the model loaded in the
        # first turn's embedding (1.0-1.3 s on a 2-vCPU host) unless the embed job found something to embed first
        assert runtime is not None
        runtime.tasks.spawn(embedder.start(), name="embedder.start")
        try:
            yield
        finally:
            await stop()
            logger.info("daemon.stopped")

    routes: list[BaseRoute] = [Route("/healthz", health.healthz), Route("/readyz", health.readyz)]
    if metrics is not None and settings.metrics_token:  # never public: without a token, no /metrics route
        routes.append(metrics_route(metrics, settings.metrics_token))
    for surface in active:
        routes.extend(surface.routes())
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.hilo = state
    return app
