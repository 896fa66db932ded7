"""Fault injection against a real `hilo serve` (tests/fakes/serve_process.py) with the Telegram webhook and
WhatsApp on the loopback fakes: nothing acknowledged is lost, nothing is answered twice (docs/delivery.md).

- SIGKILL while acknowledged webhooks wait on a locked database: after the restart (the platforms redeliver
  what got no 2xx, as Telegram does and Twilio does for a broken connection) every acknowledged message is
  answered, once.
- Redelivered commands and refusals after a restart (/link, /help, a sticker, too long, not allowed, media
  without text, STOP after START): no extra reply, no extra link code.
- Postgres stopped for 10 s: every message is journaled, acknowledged, replayed and answered once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from kernel import catalog
from tests.fakes import telegram_api as fake_telegram
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.daemon import free_port
from tests.fakes.postgres import StoppablePostgres
from tests.fakes.serve_process import ServeProcess
from tests.fakes.telegram_api import FakeBotApi
from tests.inbound_faults import Delivery, answers, sent, serve_env, telegram, telegram_update, whatsapp
from tests.waiting import wait_until

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api
twilio_api_session = fake_twilio.twilio_api_session
twilio_api = fake_twilio.twilio_api

N = 20  # people per surface
OUTAGE = 10.0  # seconds Postgres stays stopped
ANSWERS = 11  # the redelivery test's deliveries get one answer each, but STOP (none)


async def settle(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> bool:
    """Whether `condition` came true within `timeout` s (the figures are asserted after, so a failure says how
    many); a busy CI machine is slow, never wrong."""
    try:
        await wait_until(condition, what, seconds=timeout)
    except AssertionError:
        return False
    return True


async def until(condition: Callable[[], bool], what: str) -> None:
    await wait_until(condition, what, seconds=120.0)


async def answered_then_stopped(daemon: ServeProcess, deliveries: list[Delivery], bot_api: FakeBotApi,
                                twilio_api: fake_twilio.FakeTwilioApi, what: str) -> None:
    """Wait (up to the settle timeout) until every delivery got an answer, then stop `daemon` cleanly."""
    everyone = {(d.surface, d.who, d.text) for d in deliveries}
    await settle(lambda: set(answers(bot_api, twilio_api)) >= everyone, what)
    daemon.terminate()
    daemon.wait()


def serve(tmp_path: Path, port: int, env: dict[str, str]) -> ServeProcess:
    daemon = ServeProcess(tmp_path, env, args=("--port", str(port)))
    daemon.wait_started()
    return daemon


async def test_sigkill_while_acknowledged_webhooks_wait_on_a_locked_database_loses_none(
    tmp_path: Path, bot_api: FakeBotApi, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    port = free_port()
    env = serve_env(tmp_path, port, bot_api, twilio_api)
    deliveries = [telegram(bot_api, i, f"tg question {i}") for i in range(N)]
    deliveries += [whatsapp(i, f"wa question {i}") for i in range(N)]
    first = serve(tmp_path, port, env)
    base = first.url
    lock = sqlite3.connect(tmp_path / "hilo.db", isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")  # every write of the daemon now waits (then fails after busy_timeout)
    try:
        async with httpx.AsyncClient(timeout=120) as client:
            posts = [asyncio.create_task(d.post(client, base)) for d in deliveries]
            await until(lambda: any(p.done() and p.result() == 200 for p in posts), "a first acknowledgement")
            os.kill(first.proc.pid, signal.SIGKILL)
            statuses = await asyncio.gather(*posts)
    finally:
        lock.rollback()
        lock.close()
        first.kill()
    acknowledged = [d for d, status in zip(deliveries, statuses, strict=True) if status == 200]
    assert acknowledged
    second = serve(tmp_path, port, env)
    try:
        async with httpx.AsyncClient(timeout=60) as client:
            for d, status in zip(deliveries, statuses, strict=True):
                if status != 200:  # no 2xx: the platform delivers it again
                    assert await d.post(client, base) == 200
        await answered_then_stopped(second, deliveries, bot_api, twilio_api, "every message answered")
    finally:
        second.kill()
    got = answers(bot_api, twilio_api)
    lost = [d.text for d in acknowledged if got[(d.surface, d.who, d.text)] == 0]
    assert lost == [], f"{len(lost)} of {len(acknowledged)} acknowledged messages lost"
    assert {key: n for key, n in got.items() if n > 1} == {}, "answered twice"


async def test_sigkill_while_polled_updates_wait_on_a_locked_database_loses_none(
    tmp_path: Path, bot_api: FakeBotApi, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    """Polling: an update is confirmed (the next getUpdates' offset passes it) only once it is durable."""
    port = free_port()
    env = serve_env(tmp_path, port, bot_api, twilio_api, HILO_TELEGRAM_MODE="polling")
    deliveries = [telegram(bot_api, i, f"polled question {i}") for i in range(N)]
    first = serve(tmp_path, port, env)
    lock = sqlite3.connect(tmp_path / "hilo.db", isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        bot_api.enqueue(*(d.body for d in deliveries))
        first_id = deliveries[0].body["update_id"]
        await until(lambda: bot_api._state.confirmed >= first_id, "a first update confirmed")
        os.kill(first.proc.pid, signal.SIGKILL)
        confirmed = bot_api._state.confirmed
    finally:
        lock.rollback()
        lock.close()
        first.kill()
    acknowledged = [d for d in deliveries if d.body["update_id"] <= confirmed]
    second = serve(tmp_path, port, env)
    try:
        await answered_then_stopped(second, deliveries, bot_api, twilio_api, "every update answered")
    finally:
        second.kill()
    got = answers(bot_api, twilio_api)
    lost = [d.text for d in acknowledged if got[(d.surface, d.who, d.text)] == 0]
    assert lost == [], f"{len(lost)} of {len(acknowledged)} confirmed updates lost"
    assert [d.text for d in deliveries if got[(d.surface, d.who, d.text)] != 1] == [], "each answered once"


@pytest.mark.parametrize("mode", ["webhook", "polling"])
async def test_redelivered_commands_and_refusals_after_a_restart_get_no_second_answer(
    tmp_path: Path, bot_api: FakeBotApi, twilio_api: fake_twilio.FakeTwilioApi, mode: str,
) -> None:
    port = free_port()
    env = serve_env(tmp_path, port, bot_api, twilio_api, HILO_MAX_MESSAGE_CHARS="200",
                    HILO_TELEGRAM_ALLOWED_USERS="1000,1001,1002,1003,1004,1005", HILO_TELEGRAM_MODE=mode)
    polling = bot_api if mode == "polling" else None
    sticker = bot_api.update(bot_api.message(None, user_id=1003, sticker={
        "file_id": "CAAD", "file_unique_id": "s1", "type": "regular", "width": 512, "height": 512,
        "is_animated": False, "is_video": False}))
    deliveries = [
        telegram(bot_api, 0, "/link"), telegram(bot_api, 1, "/help"), telegram(bot_api, 2, "x" * 300),
        telegram_update(sticker), telegram(bot_api, 4, "/memory"), telegram(bot_api, 9, "not allowed here"),
        whatsapp(0, "/link"), whatsapp(1, "/help"), whatsapp(2, "y" * 300),
        whatsapp(3, "", NumMedia="1", MediaUrl0="https://example.com/a.jpg", MediaContentType0="image/jpeg"),
        whatsapp(4, "STOP", sid="SM" + "1" * 32), whatsapp(4, "START", sid="SM" + "2" * 32),
    ]
    first = serve(tmp_path, port, env)
    try:
        async with httpx.AsyncClient(timeout=60) as client:
            for d in deliveries:
                assert await d.post(client, first.url, polling) == 200
            await until(lambda: len(sent(bot_api, twilio_api)) >= ANSWERS, "the first answers")
            for d in deliveries:  # redelivered in the same process
                assert await d.post(client, first.url, polling) == 200
        first.terminate()
        assert first.wait() == 0
    finally:
        first.kill()
    before = sent(bot_api, twilio_api)
    second = serve(tmp_path, port, env)
    try:
        async with httpx.AsyncClient(timeout=60) as client:
            for d in deliveries:  # and after a restart
                assert await d.post(client, second.url, polling) == 200
            # probes, answered once everything before them was looked at (Telegram: in order per chat)
            probes = [whatsapp(5, "are you there?"), telegram(bot_api, 0, "are you there?")]
            for probe in probes:
                assert await probe.post(client, second.url, polling) == 200
            await until(lambda: all(answers(bot_api, twilio_api)[(p.surface, p.who, p.text)] == 1
                                         for p in probes), "the probes' answers")
        second.terminate()
        assert second.wait() == 0
    finally:
        second.kill()
    after = [s for s in sent(bot_api, twilio_api) if "You said: are you there?" not in s[2]]
    with contextlib.closing(sqlite3.connect(tmp_path / "hilo.db")) as db:
        codes = db.execute("SELECT count(*) FROM link_codes").fetchone()[0]
    same, restart = len(before) - ANSWERS, len(after) - len(before)
    assert (same, restart, codes) == (0, 0, 2), (
        f"{same + restart} extra replies ({same} in the same process, {restart} after the restart), "
        f"{codes - 2} extra link codes")  # one link code per surface
    resumed = catalog.t("whatsapp_resumed", "en")
    assert [t for _, who, t in after if who == deliveries[-1].who] == [resumed]


@pytest.mark.parametrize("surface_count", [N // 2])
async def test_messages_while_postgres_is_stopped_are_journaled_acknowledged_and_answered_once(
    tmp_path: Path, bot_api: FakeBotApi, twilio_api: fake_twilio.FakeTwilioApi, surface_count: int,
) -> None:
    pg = StoppablePostgres()
    uri = await asyncio.to_thread(pg.start)
    port = free_port()
    env = serve_env(tmp_path, port, bot_api, twilio_api, HILO_DATABASE_URL=uri)
    deliveries: list[Delivery] = []
    for i in range(surface_count):
        deliveries += [telegram(bot_api, i, f"tg while down {i}"), whatsapp(i, f"wa while down {i}")]
    daemon = serve(tmp_path, port, env)
    try:
        await asyncio.to_thread(pg.stop)
        stopped = time.monotonic()
        async with httpx.AsyncClient(timeout=60) as client:
            statuses = await asyncio.gather(*(d.post(client, daemon.url) for d in deliveries))
            again = await asyncio.gather(*(d.post(client, daemon.url) for d in deliveries[:4]))  # redeliveries
        told = await settle(lambda: len(sent(bot_api, twilio_api)) >= len(deliveries), "each person told")
        # the outage lasts OUTAGE s (a duration, not an ordering: everything above has happened already)
        await asyncio.sleep(max(0.0, OUTAGE - (time.monotonic() - stopped)))
        await asyncio.to_thread(pg.start)
        await answered_then_stopped(daemon, deliveries, bot_api, twilio_api, "every message answered")
    finally:
        daemon.kill()
        await asyncio.to_thread(pg.remove)
    got = answers(bot_api, twilio_api)
    dropped = [d.text for d in deliveries if got[(d.surface, d.who, d.text)] == 0]
    assert dropped == [], (f"{len(dropped)} of {len(deliveries)} messages dropped (statuses {statuses}); the "
                           "daemon's last lines:\n" + "\n".join(daemon.lines[-80:]))
    assert statuses == [200] * len(deliveries) and again == [200] * 4, "journaled, so acknowledged"
    assert told
    kept = catalog.t("message_kept", "en")
    notices = [(surface, who) for surface, who, t in sent(bot_api, twilio_api) if t == kept]
    assert sorted(notices) == sorted((d.surface, d.who) for d in deliveries), "each person told once"
    assert {key: n for key, n in got.items() if n > 1} == {}, "answered twice"
    assert not (tmp_path / "data" / "inbound.journal").exists(), "the replayed journal is deleted"


async def test_of_two_processes_exactly_one_polls_and_the_other_takes_over_when_it_dies(
    tmp_path: Path, bot_api: FakeBotApi, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    """The poller's lease (bot/poll_lease.py): one of two `hilo serve` on one database polls; SIGKILLed, the
    other takes the lease over once it expired and answers what came meanwhile, once."""
    envs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        port = free_port()
        envs.append((port, serve_env(tmp_path, port, bot_api, twilio_api, HILO_TELEGRAM_MODE="polling",
                                     HILO_DATA_DIR=str(tmp_path / name / "data"))))
    daemons: list[ServeProcess] = []
    try:
        daemons.append(a := ServeProcess(tmp_path / "a", envs[0][1], args=("--port", str(envs[0][0]))))
        a.wait_started()
        await until(lambda: any("telegram.poll_lease_taken" in line for line in a.lines), "a polls")
        daemons.append(b := ServeProcess(tmp_path / "b", envs[1][1], args=("--port", str(envs[1][0]))))
        b.wait_started()
        await until(lambda: any("telegram.poll_standby" in line for line in b.lines), "b stands by")
        before = telegram(bot_api, 0, "before the crash")
        bot_api.enqueue(before.body)
        await until(lambda: answers(bot_api, twilio_api)[("telegram", before.who, before.text)] == 1,
                         "answered by the poller")
        os.kill(a.proc.pid, signal.SIGKILL)
        after = telegram(bot_api, 1, "after the crash")
        bot_api.enqueue(after.body)
        await asyncio.to_thread(b.wait_for, lambda line: "telegram.poll_lease_taken" in line)
        await until(lambda: answers(bot_api, twilio_api)[("telegram", after.who, after.text)] == 1,
                         "answered by the process that took over")
        b.terminate()
        assert b.wait() == 0
    finally:
        for daemon in daemons:
            daemon.kill()
    got = answers(bot_api, twilio_api)
    assert (got[("telegram", before.who, before.text)], got[("telegram", after.who, after.text)]) == (1, 1)
    assert sum("telegram.poll_lease_taken" in line for line in b.lines) == 1
