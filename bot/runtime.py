"""What the app needs from a surface (its HTTP routes, and a lifecycle the daemon's lifespan owns), and the
Runtime the lifespan hands each surface at start.

A surface turns raw input into one InboundMessage (checking it is genuine BEFORE parsing), hands it to the
pipeline, and delivers the OutboundMessage. Webhook surfaces acknowledge fast and run the turn as a tracked
task (`runtime.tasks.spawn`). Surfaces register under the `hilo.surfaces` entry points (bot/plugins.py).
Optional: `async def ready(self) -> dict` (JSON with "ok"), the surface's readiness check, which the app adds to
/readyz under the surface's name once it started (bot/readiness.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from starlette.routing import BaseRoute

from bot.intake import Intake
from bot.journal import Journal
from bot.media import Listener
from bot.shutdown import StopBudget

if TYPE_CHECKING:
    from bot.config import Settings
    from bot.models.base import Chain
    from bot.pipeline import Pipeline
    from bot.tasks import TaskSet


@dataclass
class Runtime:
    """What the lifespan built, handed to each surface at start. The store is not in it: a surface reaches
    history, deliveries and opt-out through the pipeline (`pipeline.history`, `.deliveries`, `.opt_out`)."""

    settings: Settings
    chain: Chain
    pipeline: Pipeline
    tasks: TaskSet
    #: the stop budget from SIGTERM (bot/shutdown.py): a request waiting for its turn answers at
    #: `stop.requests_bound()` instead of being cut by uvicorn (default: a budget of HILO_STOP_TIMEOUT not begun)
    stop: StopBudget | None = None
    #: stored, then acknowledged (bot/intake.py): what a messaging surface hands its deliveries to
    intake: Intake = field(init=False)
    #: voice notes and audio (bot/media.py): a taken voice note's turn runs on its transcript
    listener: Listener = field(init=False)

    def __post_init__(self) -> None:
        if self.stop is None:
            self.stop = StopBudget(self.settings.stop_timeout)
        self.intake = Intake(self.pipeline, self.tasks,
                             Journal(self.settings.data_dir, self.settings.journal_max_bytes))
        from bot.transcribe import from_settings  # the openai SDK: only when HILO_TRANSCRIBE_MODEL is set

        self.listener = Listener(self.settings, self.pipeline, from_settings(self.settings))


class Surface(Protocol):
    name: str

    def routes(self) -> list[BaseRoute]:
        """Routes mounted on the app (known before start; they answer 503 until started)."""

    async def start(self, runtime: Runtime) -> None:
        """Connect (e.g. start polling, register a webhook). Called once the store and pipeline are ready."""

    async def stop(self) -> None:
        """Stop receiving; turns in flight are drained by the app after every surface has stopped."""
