"""Stored, then acknowledged: the one seam every messaging surface hands its inbound deliveries to.

A surface (Telegram webhook and polling, WhatsApp) checks a delivery is genuine, normalizes it, and calls
`take` (a message: a turn or a command) or `record` (a delivery that is not one: a refusal, STOP / START).
Either returns once what it changes is durable: the message stored by the pipeline's `take` (one `ingest`
transaction), the inbound record written (memory/sql_inbound.py), or, when the database cannot take it, the
message appended to the local journal (bot/journal.py, fsync'd). Only then does the surface acknowledge the
platform (webhook 200 / empty TwiML; polling: the update's offset), and `spawn` runs the rest (the model, the
reply) in a tracked task through the surface's registered runner.

Journaled messages are replayed into the database, in order, by `replay`: this process's own replayer (`start`),
at start and every REPLAY_SECONDS while the journal holds messages, in every process (the journal is a file of
this process, so a job leased to one process of the database would leave the others' journals waiting); each
then runs through its surface's runner like any other. While the journal
holds messages, new ones go to it too, behind them, so that a person's messages keep their order. The person
is told once (per surface and person, until the journal is empty) that their message is kept and will be
answered (`Taken.tell`). JournalFull (a StoreError) means nothing was kept: the surface answers 503.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from bot.journal import Journal
from bot.pipeline import Taken
from bot.poll_lease import PollLease
from kernel import log
from kernel.errors import Draining, InputError, JournalFull, StoreError
from kernel.types import InboundMessage

if TYPE_CHECKING:
    from bot.pipeline import Pipeline
    from bot.tasks import TaskSet

logger = log.get("hilo.intake")

#: How often the replayer looks at the journal (a look at a file's size while it is empty).
REPLAY_SECONDS = 2.0

#: What a surface does with a taken message, in a tracked task: run the turn or command, answer.
Runner = Callable[[InboundMessage, Taken], Coroutine[Any, Any, None]]
#: How a surface starts its tracked tasks (False: the daemon is draining), so that its stop drains them.
Spawn = Callable[[Coroutine[Any, Any, Any], str], bool]


class Intake:
    def __init__(self, pipeline: Pipeline, tasks: TaskSet, journal: Journal) -> None:
        self.pipeline = pipeline
        self.tasks = tasks
        self.journal = journal
        self._runners: dict[str, tuple[Runner, Spawn | None]] = {}
        self._told: set[tuple[str, str]] = set()
        self._replaying = asyncio.Lock()
        self._kept = asyncio.Event()  # set when a message was journaled, and by `stop`
        self._replayer: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        """Run this process's replayer as a tracked task: the journal now (what an earlier run kept), then every
        REPLAY_SECONDS while it holds messages."""
        self._stopping = False
        self._replayer = self.tasks.spawn(self._replay_loop(), name="journal.replayer")

    async def _replay_loop(self) -> None:
        while not self._stopping:
            self._kept.clear()
            if self.journal.size():
                try:
                    await self.replay()
                except Exception as exc:  # one failed look never ends the replayer: the next one tries again
                    logger.error("journal.replay_failed", error=type(exc).__name__)
            wait = REPLAY_SECONDS if self.journal.size() else None  # empty: until a message is kept
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kept.wait(), timeout=wait)

    async def stop(self, timeout: float) -> None:
        """End the replayer: a replay in progress stops after its message, or is cancelled after `timeout` s (a
        database that hangs); what it had not dropped from the journal is replayed again, as redeliveries, by
        the next start."""
        self._stopping = True
        self._kept.set()
        if self._replayer is not None:
            _, pending = await asyncio.wait({self._replayer}, timeout=timeout)
            if pending:
                self._replayer.cancel()
                logger.warning("journal.replay_cancelled", left=len(await self.journal.pending()))
            await asyncio.gather(self._replayer, return_exceptions=True)
            self._replayer = None

    def poll_lease(self) -> PollLease:
        """The lease that lets one process of many poll Telegram (bot/poll_lease.py)."""
        return PollLease(self.pipeline.store)

    def register(self, surface: str, runner: Runner, spawn: Spawn | None = None) -> None:
        """`runner` answers what was taken on `surface`; `spawn` starts its tasks (default: the app's TaskSet)."""
        self._runners[surface] = (runner, spawn)

    def unregister(self, surface: str) -> None:
        self._runners.pop(surface, None)

    async def record(self, surface: str, external_id: str, kind: str, sender: str | None = None) -> bool:
        """Record a delivery that is not a turn before acting on it: True the first time, False for a
        redelivery (do nothing). When the database cannot say, True: answering a refusal twice beats never."""
        try:
            return await self.pipeline.store.record_inbound(surface, external_id, kind, sender)
        except StoreError as exc:
            logger.error("intake.record_failed", surface=surface, kind=kind, error=type(exc).__name__)
            return True

    async def take(self, msg: InboundMessage) -> Taken:
        """Keep `msg` durably (stored, or journaled) and say what was kept. Refused text (empty, too long) is
        recorded and comes back as "refused" (or "duplicate" when redelivered). JournalFull: nothing kept."""
        try:
            self.pipeline.validate(msg)
        except InputError as exc:
            first = await self.record(msg.surface, msg.external_id, "refused", msg.sender)
            return Taken("refused", refusal=exc) if first else Taken("duplicate")
        if self.journal.size() == 0:  # messages waiting in the journal go first: this one joins them
            try:
                return await self.pipeline.take(msg)
            except JournalFull:
                raise
            except StoreError as exc:
                logger.error("intake.not_stored", surface=msg.surface, error=type(exc).__name__,
                             chars=len(msg.text), fix="the database refused it (down, locked or full): kept in "
                             f"the journal ({self.journal.path}) until it returns; check HILO_DATABASE_URL")
        await self.journal.append(msg)
        self._kept.set()  # the replayer looks every REPLAY_SECONDS from now on, until the journal is empty
        return Taken("journaled", tell=self.tell_once(msg.surface, msg.sender))

    def tell_once(self, surface: str, sender: str) -> bool:
        """True the first time a person is to be told that hilo cannot answer now (until the journal empties)."""
        key = (surface, sender)
        if key in self._told:
            return False
        self._told.add(key)
        return True

    def spawn(self, msg: InboundMessage, taken: Taken) -> bool:
        """Run the surface's runner on what was taken, in a tracked task. False when the daemon is draining
        (a stored message is then answered by the next start's recovery)."""
        entry = self._runners.get(msg.surface)
        if entry is None:
            logger.warning("intake.no_runner", surface=msg.surface, status=taken.status)
            self.pipeline.release(taken)
            return False
        runner, spawn = entry
        coro = runner(msg, taken)
        try:
            started = spawn(coro, f"{msg.surface}.inbound") if spawn is not None else bool(
                self.tasks.spawn(coro, name=f"{msg.surface}.inbound"))
        except Draining:
            started = False
        if not started:
            coro.close()
            self.pipeline.release(taken)
        return started

    async def replay(self) -> int:
        """Replay the journal into the database, in order; each replayed message then runs. Stops at the first
        StoreError (the database is still away: the rest waits for the next run). The number replayed."""
        if self._replaying.locked():
            return 0
        async with self._replaying:
            lines = await self.journal.pending()
            done = 0
            for msg in lines:
                if self._stopping:
                    break
                if msg is not None:
                    try:
                        taken = await self.pipeline.take(msg)
                    except InputError:
                        taken = None  # validated before it was kept: a later, smaller limit
                    except StoreError as exc:
                        logger.info("journal.replay_waits", left=len(lines) - done, error=type(exc).__name__)
                        break
                    if taken is not None and taken.status != "duplicate":
                        self.spawn(msg, replace(taken, replayed=True))
                done += 1
            if done:
                await self.journal.drop(done)
                logger.info("journal.replayed", count=done, left=len(lines) - done)
            if done == len(lines):
                self._told.clear()
            return done
