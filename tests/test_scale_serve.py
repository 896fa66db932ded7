"""The same across N processes (issue 12 item 7): three `hilo serve` on ONE Postgres take 500 messages from 50
people over the web API, Telegram webhooks and WhatsApp webhooks (signed as the platforms sign them), with
redeliveries (the same update / MessageSid / client_message_id posted again, to another process) and bursts from
one person sent to the three processes at once; one process is SIGKILLed mid-load and started again.

A delivery that got no 2xx or no answer is delivered again, to the next process, as the platforms would (behind
a load balancer). A web request cut by the kill is not repeated (the visitor closed the tab): if its message was
stored, recovery stores its reply. The echo model answers (no network, no sleep).

After the load settles, on the database and the fakes: every acknowledged message stored exactly once, every
stored message answered exactly once (one assistant reply; one send per reply part on Telegram and Twilio), each
conversation's replies in the order of its messages, each person's sequential messages stored in the order they
were sent, and the load finished (no deadlock). The figures are in the assertion messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from tests.fakes import telegram_api as fake_telegram
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.loopback import free_port
from tests.fakes.postgres import SERVER
from tests.fakes.serve_process import ServeProcess
from tests.inbound_faults import Delivery, answers, sent, serve_env, telegram, whatsapp
from tests.waiting import wait_until

bot_api_session, bot_api = fake_telegram.bot_api_session, fake_telegram.bot_api
twilio_api_session, twilio_api = fake_twilio.twilio_api_session, fake_twilio.twilio_api

PROCESSES = 3
PEOPLE = {"web": 17, "telegram": 17, "whatsapp": 16}  # 50 people
SEQUENTIAL, BURST = 6, 4  # each person's messages: 6 one after the other, then 4 at once to the 3 processes
KILL_AT, RESTART_AT = 150, 300  # acknowledged messages when process 1 is SIGKILLed, and when it starts again


def text_of(surface: str, person: int, j: int) -> str:
    return f"{surface} person {person} message {j}"


class Daemons:
    """The three processes, each on a port of its own that a restart keeps (the platforms' URLs)."""

    def __init__(self, tmp_path: Path, envs: list[dict[str, str]], ports: list[int]) -> None:
        self.tmp_path, self.envs, self.ports = tmp_path, envs, ports
        self.procs: list[ServeProcess] = []
        self.ended: list[str] = []  # the lines of the killed process

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[i]}"

    def start(self, i: int) -> ServeProcess:
        proc = ServeProcess(self.tmp_path / f"p{i}", self.envs[i], args=("--port", str(self.ports[i])))
        proc.wait_started(timeout=120)
        return proc

    def kill(self) -> None:
        for proc in self.procs:
            proc.kill()


@dataclass
class Tally:
    """What the load saw: acknowledged deliveries (by text), web answers, statuses."""

    acknowledged: set[str] = field(default_factory=set)
    cut: set[str] = field(default_factory=set)  # web requests that got no answer
    web_replies: dict[str, list[tuple[str, str | None]]] = field(default_factory=dict)  # text -> (status, reply)
    web_attempts: dict[str, list[str]] = field(default_factory=dict)  # text -> each attempt's status or error
    redelivered: int = 0
    retried: int = 0
    statuses: Counter[str] = field(default_factory=Counter)


class Load:
    def __init__(self, daemons: Daemons, bot: fake_telegram.FakeBotApi) -> None:
        self.daemons, self.bot = daemons, bot
        self.tally = Tally()
        self.client = httpx.AsyncClient(timeout=120)
        self.sessions: dict[int, str] = {}
        self.conversations: dict[int, int] = {}
        self.twilio: fake_twilio.FakeTwilioApi | None = None
        self.sent_at_kill = (0, 0)  # what the fakes had been sent when the process was killed

    def sent(self) -> tuple[int, int]:
        """How many messages the fake Telegram and the fake Twilio were sent so far."""
        assert self.twilio is not None
        return len(self.bot.sent), len(self.twilio.sent)

    async def platform(self, d: Delivery, target: int) -> None:
        """Post until a process answers 2xx, starting at `target`, then the next (as a platform retries)."""
        for attempt in itertools.count():
            status = await d.post(self.client, self.daemons.url((target + attempt) % PROCESSES))
            self.tally.statuses[str(status)] += 1
            if status == 200:
                self.tally.acknowledged.add(d.text)
                return
            self.tally.retried += 1

    async def web(self, person: int, text: str, target: int, client_id: str) -> None:
        body: dict[str, Any] = {"text": text, "client_message_id": client_id}
        if person in self.conversations:
            body["conversation_id"] = self.conversations[person]
        headers = {"Authorization": f"Bearer {self.sessions[person]}"}
        for attempt in itertools.count():
            try:
                r = await self.client.post(self.daemons.url((target + attempt) % PROCESSES) + "/api/messages",
                                           json=body, headers=headers)
            except httpx.ConnectError:  # refused (the process is down): the load balancer tries the next
                self.tally.retried += 1
                self.tally.web_attempts.setdefault(text, []).append("refused")
                continue
            except httpx.TransportError as exc:  # cut by the kill: not repeated
                self.tally.cut.add(text)
                self.tally.statuses["None"] += 1
                self.tally.web_attempts.setdefault(text, []).append(type(exc).__name__)
                return
            self.tally.statuses[str(r.status_code)] += 1
            self.tally.web_attempts.setdefault(text, []).append(f"{r.status_code} {r.text[:80]}")
            if r.status_code == 200:
                break
            assert r.status_code == 503, (r.status_code, r.text)  # "try again": the person does, elsewhere
            self.tally.retried += 1
        answer = r.json()
        self.tally.acknowledged.add(text)
        self.tally.web_replies.setdefault(text, []).append((answer["status"], answer["reply"]))
        self.conversations.setdefault(person, answer["conversation_id"])

    async def session(self, person: int, target: int) -> None:
        for attempt in itertools.count():
            try:
                r = await self.client.post(self.daemons.url((target + attempt) % PROCESSES) + "/api/session")
            except httpx.TransportError:
                continue
            if r.status_code == 200:
                self.sessions[person] = r.json()["session"]
                return

    def send(self, surface: str, person: int, j: int) -> Callable[[int], Awaitable[None]]:
        """A function that sends message `j` of `person` to a process (and its redelivery, for every third)."""
        text = text_of(surface, person, j)
        if surface == "web":
            client_id = f"c{person}-{j}"

            async def web(target: int) -> None:
                await self.web(person, text, target, client_id)
                if j % 3 == 1 and text in self.tally.acknowledged:  # the same client_message_id, another process
                    self.tally.redelivered += 1
                    await self.web(person, text, (target + 1) % PROCESSES, client_id)
            return web
        d = telegram(self.bot, person, text) if surface == "telegram" else whatsapp(
            person, text, sid=f"SM{person:016x}{j:016x}")

        async def platform(target: int) -> None:
            await self.platform(d, target)
            if j % 3 == 1:  # the same update / MessageSid again, to another process
                self.tally.redelivered += 1
                await self.platform(d, (target + 1) % PROCESSES)
        return platform

    async def person(self, surface: str, person: int) -> None:
        if surface == "web":
            await self.session(person, person)
        for j in range(SEQUENTIAL):
            await self.send(surface, person, j)((person + j) % PROCESSES)
        burst = range(SEQUENTIAL, SEQUENTIAL + BURST)
        await asyncio.gather(*(self.send(surface, person, j)((person + j) % PROCESSES) for j in burst))


async def kill_and_restart(load: Load, daemons: Daemons, people: asyncio.Future[Any]) -> float:
    """SIGKILL process 1 once KILL_AT messages were acknowledged; start it again at RESTART_AT (or when the
    people are done). Returns the moment it was killed."""
    await wait_until(lambda: len(load.tally.acknowledged) >= KILL_AT or people.done(), "the kill point",
                     seconds=120)
    os.kill(daemons.procs[1].proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    load.sent_at_kill = load.sent()
    await wait_until(lambda: len(load.tally.acknowledged) >= RESTART_AT or people.done(), "the restart point",
                     seconds=120)
    await asyncio.to_thread(daemons.procs[1].kill)
    daemons.ended += daemons.procs[1].lines
    daemons.procs[1] = await asyncio.to_thread(daemons.start, 1)
    return killed


ROWS = """
SELECT m.id, m.conversation_id, m.content,
       (SELECT count(*) FROM messages r WHERE r.reply_to = m.id AND r.role = 'assistant') AS replies
FROM messages m WHERE m.role = 'user' ORDER BY m.id
"""
REPLY_ORDER = "SELECT conversation_id, reply_to FROM messages WHERE role = 'assistant' ORDER BY id"
PENDING = "SELECT count(*) FROM deliveries WHERE status IN ('pending', 'sending')"
DEADLOCKS = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
PARTS = "SELECT surface, count(*) FROM deliveries WHERE status = 'sent' GROUP BY surface"


async def test_three_processes_on_one_postgres_answer_500_messages_once_each_through_a_sigkill(
    tmp_path: Path, bot_api: fake_telegram.FakeBotApi, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    url = SERVER.create_database()
    ports = [free_port() for _ in range(PROCESSES)]
    envs = []
    for i, port in enumerate(ports):
        (tmp_path / f"p{i}").mkdir()
        envs.append(serve_env(
            tmp_path, port, bot_api, twilio_api, HILO_DATABASE_URL=url, HILO_DATA_DIR=str(tmp_path / f"p{i}"),
            HILO_LOG_FORMAT="json", HILO_RATE_LIMIT_IP="100000", HILO_RATE_LIMIT_VISITOR="100000",
            # recovery answers a message left by the killed process at once and looks every second; the killed
            # process's sends are taken over after 6 s (a live sender renews its lease every 2 s)
            HILO_RECOVERY_GRACE="0.5", HILO_RECOVERY_SECONDS="1", HILO_OUTBOX_LEASE="6"))
    daemons = Daemons(tmp_path, envs, ports)
    load = Load(daemons, bot_api)
    load.twilio = twilio_api
    db = None
    began = time.monotonic()
    try:
        daemons.procs.append(await asyncio.to_thread(daemons.start, 0))  # migrates the database first
        daemons.procs += await asyncio.gather(*(asyncio.to_thread(daemons.start, i) for i in (1, 2)))
        people = asyncio.ensure_future(asyncio.gather(*(
            load.person(surface, k) for surface, n in PEOPLE.items() for k in range(n))))
        killer = asyncio.ensure_future(kill_and_restart(load, daemons, people))
        done, _ = await asyncio.wait({people}, timeout=240)
        assert done, f"the load did not finish (deadlock?): {len(load.tally.acknowledged)} acknowledged"
        people.result()
        killed = await killer
        loaded = time.monotonic() - began
        db = await asyncpg.connect(url)
        stored_texts = {t for t in load.tally.acknowledged if not t.startswith("web")}

        async def settled() -> bool:
            got = answers(bot_api, twilio_api)
            if not all(got[(s, who, t)] for s, who, t in platform_keys(stored_texts)):
                return False
            rows = await db.fetch(ROWS)
            return all(r["replies"] for r in rows) and await db.fetchval(PENDING) == 0

        with contextlib.suppress(AssertionError):  # the figures are asserted below
            await wait_until(settled, "every message answered and every reply part sent", seconds=120)
        pending = await db.fetchval(PENDING)
        for proc in daemons.procs:
            proc.terminate()
        await asyncio.gather(*(asyncio.to_thread(proc.wait, 60) for proc in daemons.procs))
        wall = time.monotonic() - began
        rows = await db.fetch(ROWS)
        reply_order = await db.fetch(REPLY_ORDER)
        parts = dict(await db.fetch(PARTS))  # type: ignore[arg-type]
        lines = [line for proc in daemons.procs for line in proc.lines] + daemons.ended
        (tmp_path / "daemons.log").write_text("\n".join(lines))  # kept by pytest's tmp_path for a failure's reader
        deadlocks = await db.fetchval(DEADLOCKS)  # every process has ended: its counters are flushed
    finally:
        if db is not None:
            await db.close()
        await load.client.aclose()
        daemons.kill()

    tally = load.tally
    stored = Counter(r["content"] for r in rows)
    duplicates = sum(n - 1 for n in stored.values())
    lost = sorted(tally.acknowledged - set(stored))
    replies = Counter(r["replies"] for r in rows)
    got = answers(bot_api, twilio_api)
    across = sent_across_the_kill(bot_api, twilio_api, load.sent_at_kill)
    sends = [(key, n) for key, n in got.items() if n != 1 and not (n == 2 and key in across)]
    unsent = [k for k in platform_keys(set(stored)) if got[k] == 0]
    figures = (f"{sum(PEOPLE.values()) * (SEQUENTIAL + BURST)} messages from {sum(PEOPLE.values())} people, "
               f"{len(tally.acknowledged)} acknowledged, {len(stored)} stored, {len(tally.cut)} web requests cut "
               f"by the kill ({len(tally.cut & set(stored))} of them stored), {tally.redelivered} redeliveries, "
               f"{tally.retried} deliveries repeated after no 2xx; {replies[1]} answered once, "
               f"{sum(n for k, n in replies.items() if k > 1)} more than once, {replies[0]} never; "
               f"{duplicates} duplicates stored, {len(lost)} lost; statuses {dict(tally.statuses)}; "
               f"{pending} reply parts unsent; killed at {killed - began:.1f} s, load done at {loaded:.1f} s, "
               f"settled at {wall:.1f} s; {len(across)} replies sent again after the kill")
    journaled = sum('"journal.kept"' in line for line in lines)
    figures += f"; {deadlocks} deadlocks, {journaled} messages journaled"
    (tmp_path / "figures.txt").write_text(figures + "\n")  # a passing run's figures, for whoever measures
    assert lost == [], f"acknowledged but not stored: {lost[:5]}; {figures}"
    assert duplicates == 0, f"stored twice: {[t for t, n in stored.items() if n > 1][:5]}; {figures}"
    assert (deadlocks, journaled) == (0, 0), f"the database is up throughout: {figures}"
    assert set(replies) == {1}, f"replies per stored message {dict(replies)}; {figures}"
    assert (sends, unsent) == ([], []), f"sends per reply: {sends[:5]}, never sent: {unsent[:5]}; {figures}"
    again = Counter(surface for surface, _, _ in across)  # of two sends across the kill, the killed one is unrecorded
    assert parts == {"telegram": len(bot_api.sent) - again["telegram"],
                     "whatsapp": len(twilio_api.sent) - again["whatsapp"]}, (
        f"sent parts {parts} against the fakes' sends; {figures}")
    for text, answered in tally.web_replies.items():  # the web answers in the response
        (status, reply), *redelivered = answered
        assert status == "ok" and f"You said: {text}\n" in str(reply), (text, tally.web_attempts[text], figures)
        # a redelivery stored after the answer is a duplicate; one whose turn waited while the first was
        # answered hands back that same reply
        assert all(r in (("duplicate", None), ("ok", reply)) for r in redelivered), (text, answered, figures)
    out_of_order = replies_out_of_order(rows, reply_order)
    assert out_of_order == [], f"replies out of the messages' order in {out_of_order[:5]}; {figures}"
    sent_order = sends_out_of_order(rows, bot_api, twilio_api)
    assert sent_order == [], f"sends out of the messages' order to {sent_order[:5]}; {figures}"
    unordered = sequential_out_of_order(rows)
    assert unordered == [], f"sequential messages stored out of order: {unordered[:5]}; {figures}"


def platform_keys(texts: set[str]) -> list[tuple[str, str, str]]:
    """(surface, recipient, text) of the Telegram and WhatsApp messages among `texts`."""
    keys = []
    for text in texts:
        surface, _, person, _, _ = text.split()
        if surface == "telegram":
            keys.append(("telegram", str(1000 + int(person)), text))
        elif surface == "whatsapp":
            keys.append(("whatsapp", f"+3460000{int(person):04d}", text))
    return keys


def sent_across_the_kill(bot: fake_telegram.FakeBotApi, twilio: fake_twilio.FakeTwilioApi,
                         at_kill: tuple[int, int]) -> set[tuple[str, str, str]]:
    """(surface, recipient, text said) of the echo answers sent before the kill and once more after it: the
    killed process had sent them and died before it recorded that (a send the provider accepted is not taken
    back, and neither Telegram nor Twilio takes an idempotency key), so the outbox sent them again."""
    def said(rows: list[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
        return {(s, who, t.split("You said: ", 1)[1].split("\n", 1)[0]) for s, who, t in rows if "You said: " in t}

    everything, on_telegram = sent(bot, twilio), len(bot.sent)  # Telegram's first (the daemons have ended)
    telegram, whatsapp = everything[:on_telegram], everything[on_telegram:]
    before = said(telegram[:at_kill[0]] + whatsapp[:at_kill[1]])
    return before & said(telegram[at_kill[0]:] + whatsapp[at_kill[1]:])


def replies_out_of_order(rows: list[Any], reply_order: list[Any]) -> list[str]:
    """Conversations whose replies were stored in another order than their messages: their messages' numbers in
    the order they were answered."""
    position = {r["id"]: i for i, r in enumerate(rows)}
    seen: dict[int, list[int]] = {}
    for r in reply_order:
        seen.setdefault(r["conversation_id"], []).append(position.get(r["reply_to"], -1))
    out = []
    for order in seen.values():
        if order != sorted(order):
            surface, _, person, _, _ = rows[order[0]]["content"].split()
            out.append(f"{surface} person {person}: " + " ".join(rows[i]["content"].split()[-1] for i in order))
    return out


def sends_out_of_order(rows: list[Any], bot: fake_telegram.FakeBotApi,
                       twilio: fake_twilio.FakeTwilioApi) -> list[str]:
    """Recipients whose answers were sent in another order than their messages were stored."""
    position = {r["content"]: i for i, r in enumerate(rows)}
    said: dict[str, list[int]] = {}
    for who, text in [(str(s.chat_id), s.text) for s in bot.sent] + [(s.to, s.body) for s in twilio.sent]:
        if "You said: " in text:
            said.setdefault(who, []).append(position[text.split("You said: ", 1)[1].split("\n", 1)[0]])
    return [who for who, order in said.items() if order != sorted(order)]


def sequential_out_of_order(rows: list[Any]) -> list[str]:
    """People whose sequentially sent messages (0 .. SEQUENTIAL-1) were stored in another order."""
    stored: dict[str, list[int]] = {}
    for r in rows:
        surface, _, person, _, j = r["content"].split()
        if int(j) < SEQUENTIAL:
            stored.setdefault(f"{surface} {person}", []).append(int(j))
    return [who for who, order in stored.items() if order != sorted(order)]
