"""The inbound journal (bot/journal.py) and its replay through bot/intake.py.

The journal alone: appends survive as lines in order, in a 0600 file in a 0700 directory; a torn last line (a
crash mid-append) is not a message; the bound refuses with JournalFull and keeps what it had; dropping replayed
lines keeps the rest and deletes an emptied file. The intake on every backend: a message the database refuses is
journaled (the person told once), and replayed in order, idempotently, once the database takes it.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from bot.config import Settings
from bot.intake import Intake
from bot.journal import FILE, Journal
from bot.models.factory import build_chain
from bot.pipeline import Pipeline, Taken
from bot.tasks import TaskSet
from kernel.errors import JournalFull, StoreUnavailable
from kernel.types import InboundMessage
from memory.store import Store
from tests.waiting import wait_until


def msg(ext: str, text: str, sender: str = "+34600", **metadata: Any) -> InboundMessage:
    return InboundMessage(surface="whatsapp", sender=sender, external_id=ext, text=text, metadata=metadata)


async def test_appended_messages_come_back_in_order_from_a_private_file(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "data", max_bytes=1 << 20)
    for i in range(3):
        await journal.append(msg(f"SM{i}", f"hola {i} ñ", num_media=0))
    kept = await journal.pending()
    assert [(m.external_id, m.text, m.metadata) for m in kept if m] == [
        (f"SM{i}", f"hola {i} ñ", {"num_media": 0}) for i in range(3)]
    assert stat.S_IMODE(os.stat(tmp_path / "data").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "data" / FILE).st_mode) == 0o600


async def test_a_torn_last_line_is_not_a_message(tmp_path: Path) -> None:
    journal = Journal(tmp_path, max_bytes=1 << 20)
    await journal.append(msg("SM1", "kept"))
    with open(tmp_path / FILE, "ab") as f:
        f.write(b'{"surface":"whatsapp","sender":"+3')  # the process died mid-append: never acknowledged
    assert [m.external_id for m in await journal.pending() if m] == ["SM1"]


async def test_the_bound_refuses_and_keeps_what_it_had(tmp_path: Path) -> None:
    journal = Journal(tmp_path, max_bytes=600)
    await journal.append(msg("SM1", "a" * 200))
    with pytest.raises(JournalFull):
        await journal.append(msg("SM2", "b" * 400))
    assert [m.external_id for m in await journal.pending() if m] == ["SM1"]


async def test_dropping_replayed_lines_keeps_the_rest_and_deletes_an_empty_journal(tmp_path: Path) -> None:
    journal = Journal(tmp_path, max_bytes=1 << 20)
    for i in range(4):
        await journal.append(msg(f"SM{i}", "x"))
    await journal.drop(3)
    assert [m.external_id for m in await journal.pending() if m] == ["SM3"]
    assert stat.S_IMODE(os.stat(tmp_path / FILE).st_mode) == 0o600
    await journal.drop(1)
    assert not (tmp_path / FILE).exists() and journal.size() == 0


class Refusing:
    """The store, refusing every write while `down`; while `hangs`, an ingest waits forever (a database that
    takes the connection and never answers)."""

    def __init__(self, store: Store) -> None:
        self.store, self.down, self.hangs = store, True, False
        self.hung = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.store, name)
        if name in ("ingest", "record_inbound"):
            async def refused(*args: Any, **kwargs: Any) -> Any:
                if self.down:
                    raise StoreUnavailable("down")
                if self.hangs:
                    self.hung.set()
                    await asyncio.Event().wait()
                return await real(*args, **kwargs)
            return refused
        return real


async def test_refused_messages_are_journaled_then_replayed_in_order_and_once(store: Store, tmp_path: Path) -> None:
    settings = Settings.from_mapping({})
    refusing = Refusing(store)
    pipeline = Pipeline(settings, refusing, build_chain(settings))  # type: ignore[arg-type]
    intake = Intake(pipeline, TaskSet(), Journal(tmp_path, max_bytes=1 << 20))
    ran: list[tuple[str, str]] = []

    async def runner(m: InboundMessage, taken: Taken) -> None:
        ran.append((m.external_id, taken.status))

    intake.register("whatsapp", runner)
    taken = [await intake.take(msg(ext, f"text {ext}")) for ext in ("SM1", "SM2", "SM1")]
    assert [(t.status, t.tell) for t in taken] == [("journaled", True), ("journaled", False), ("journaled", False)]
    assert await intake.replay() == 0 and intake.journal.size() > 0, "still down: nothing replayed, nothing lost"
    refusing.down = False
    assert await intake.take(msg("SM3", "after")) == Taken("journaled"), "behind the journal: order is kept"
    assert await intake.replay() == 4
    await wait_until(lambda: len(ran) >= 3, "the replayed messages run")
    assert ran == [("SM1", "turn"), ("SM2", "turn"), ("SM3", "turn")]  # the second SM1 was a redelivery
    assert intake.journal.size() == 0
    assert (await intake.take(msg("SM4", "now"))).status == "turn", "an empty journal: stored at once"


async def test_the_replayer_replays_what_was_journaled_once_the_database_is_back(store: Store, tmp_path: Path) -> None:
    """Nobody calls replay: the process's own replayer (started with the daemon) stores the journaled messages
    once the database takes them, in order, and each runs once."""
    settings = Settings.from_mapping({})
    refusing = Refusing(store)
    tasks = TaskSet()
    intake = Intake(Pipeline(settings, refusing, build_chain(settings)), tasks,  # type: ignore[arg-type]
                    Journal(tmp_path, max_bytes=1 << 20))
    ran: list[str] = []

    async def runner(m: InboundMessage, taken: Taken) -> None:
        ran.append(m.external_id)

    intake.register("whatsapp", runner)
    intake.start()
    assert [(await intake.take(msg(ext, f"text {ext}"))).status for ext in ("SM1", "SM2")] == ["journaled"] * 2
    refusing.down = False
    await wait_until(lambda: ran == ["SM1", "SM2"] and intake.journal.size() == 0,
                     "the replayer stores and runs the journaled messages, then drops them from the journal")
    await intake.stop(5.0)
    await tasks.drain(1.0)
    assert len(tasks) == 0


async def test_a_stop_ends_a_replay_the_database_holds_up_and_the_next_start_replays_it(
    store: Store, tmp_path: Path,
) -> None:
    """The database takes the connection and never answers: the stop cancels the replay after its timeout
    instead of spending the whole stop budget on it; the message stays in the journal, and the next start
    (a new intake on the same directory) replays it and it runs once."""
    settings = Settings.from_mapping({})
    hanging = Refusing(store)
    intake = Intake(Pipeline(settings, hanging, build_chain(settings)), TaskSet(),  # type: ignore[arg-type]
                    Journal(tmp_path, max_bytes=1 << 20))
    intake.register("whatsapp", lambda m, taken: asyncio.sleep(0))
    intake.start()
    assert (await intake.take(msg("SM1", "held up"))).status == "journaled"
    hanging.down, hanging.hangs = False, True
    await asyncio.wait_for(hanging.hung.wait(), 10)  # the replayer is inside the ingest that never returns
    await asyncio.wait_for(intake.stop(0.1), 10)
    assert [m.external_id for m in await intake.journal.pending() if m] == ["SM1"], "kept for the next start"

    tasks = TaskSet()
    again = Intake(Pipeline(settings, store, build_chain(settings)), tasks, Journal(tmp_path, max_bytes=1 << 20))
    ran: list[tuple[str, str]] = []

    async def runner(m: InboundMessage, taken: Taken) -> None:
        ran.append((m.external_id, taken.status))

    again.register("whatsapp", runner)
    again.start()
    await wait_until(lambda: ran == [("SM1", "turn")] and again.journal.size() == 0,
                     "the next start replays the kept message and drops it from the journal")
    await again.stop(5.0)
