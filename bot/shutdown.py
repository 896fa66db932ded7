"""ONE shutdown budget, measured from SIGTERM, shared by every phase of the stop.

PM2 (kill_timeout, deploy/ecosystem.config.js) and systemd (TimeoutStopSec, deploy/hilo.service) kill hilo 40 s
after SIGTERM. HILO_STOP_TIMEOUT (Settings.stop_timeout, 36 s by default) is what the stop may take of those 40 s;
the rest is the margin for closing the model chain and the store. Turns run on through every phase, so the
budget is wall time from the signal, not a time per phase: each phase gets at most what is left.

    budget = StopBudget(settings.stop_timeout)
    budget.begin()                           # at SIGTERM (bot/daemon.py); idempotent
    await scheduler.stop(timeout=budget.left(DRAIN_SECONDS))   # at most what is left, and at most its own cap

The phases (bot/daemon.py, then bot/app.py's lifespan): uvicorn's graceful wait for requests in flight
(`for_requests`: at most bot.daemon.GRACEFUL_SECONDS, and leaving AFTER_REQUESTS s when the budget allows), the
jobs' drain (at most bot.jobs.DRAIN_SECONDS), the surfaces' stop, the turns' drain. What still runs when the
budget is spent is cancelled and logged (ids and durations only); a turn cancelled so is resumed after the
restart (its message is stored before the model is called: bot/pipeline.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

#: Seconds of the budget that uvicorn's graceful wait leaves to the phases after it (the jobs' drain, the
#: surfaces' stop, the turns' drain), as far as the budget allows.
AFTER_REQUESTS = 1.0
#: At most how long uvicorn lets requests in flight finish after SIGTERM (bot/daemon.py); less when the budget
#: has less left.
GRACEFUL_SECONDS = 30
#: Seconds before uvicorn's graceful wait ends at which a request still waiting for its turn is answered (503,
#: Retry-After, or the stream's error event; its turn goes on as a tracked task until the turns' drain): uvicorn
#: would cancel it then, and the client would get a 500 or a cut stream.
ANSWER_MARGIN = 0.5


class StopBudget:
    """`seconds` of wall time from `begin()` (SIGTERM). A stop that begins without a signal (a start that failed,
    an in-process test server) begins the budget at the first `left()`."""

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._began: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._bound: asyncio.Future[None] | None = None

    def begin(self) -> None:
        """Start the budget now, unless it started already (a second signal does not extend it). Safe in a signal
        handler: the requests' bound is armed through the loop's thread-safe call."""
        if self._began is None:
            self._began = self._clock()
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._arm)

    def requests_bound(self) -> asyncio.Future[None]:
        """A future (shared; never cancel it) done when requests in flight must be answered: ANSWER_MARGIN s
        before uvicorn's graceful wait (`for_requests(GRACEFUL_SECONDS)`) ends. Pending while no stop began."""
        if self._bound is None:
            self._loop = asyncio.get_running_loop()
            self._bound = self._loop.create_future()
            if self._began is not None:
                self._arm()
        return self._bound

    def _arm(self) -> None:
        assert self._loop is not None and self._bound is not None
        delay = max(0.0, self.for_requests(GRACEFUL_SECONDS) - ANSWER_MARGIN)
        self._loop.call_later(delay, self._reached)

    def _reached(self) -> None:
        if self._bound is not None and not self._bound.done():
            self._bound.set_result(None)

    def left(self, cap: float | None = None) -> float:
        """Seconds left of the budget (0 once spent), at most `cap`."""
        self.begin()
        assert self._began is not None
        left = max(0.0, self.seconds - (self._clock() - self._began))
        return left if cap is None else min(cap, left)

    def for_requests(self, cap: float) -> float:
        """uvicorn's graceful wait: at most `cap`, leaving AFTER_REQUESTS s of the budget when there are."""
        return min(cap, max(0.0, self.left() - AFTER_REQUESTS))
