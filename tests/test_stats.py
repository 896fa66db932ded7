"""`hilo stats` (issue 13 item 5) on both backends: known turns on Telegram and the web over three UTC days, through
the real pipeline and the real OpenAI SDK against the fake provider (scripted so that some turns fall back and
some calls fail), priced by HILO_PRICES, Telegram's replies sent by the real outbox through a transport that
refuses one chat; then `hilo stats --json` (bot/cli.py's main) is checked figure by figure against what was
built, a retention run shows its deleted count, `--surface` and `--days` filter, and the text table shows the
same figures. An empty database prints zeros."""

from __future__ import annotations

import asyncio
import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.cli import main
from bot.config import Settings
from bot.models.factory import build_chain
from bot.outbox import with_route
from bot.pipeline import Pipeline
from bot.retry import RetryPolicy
from bot.tasks import TaskSet
from kernel import log
from kernel.errors import SendError
from kernel.types import InboundMessage
from tests.backends import Backend, TestClock
from tests.fakes.model_server import FakeModelServer, ok, status
from tests.waiting import no_sleep, wait_until

#: USD per million tokens (in, out): large, so that each call costs cents
PRICES = {"model-a": (1000.0, 5000.0), "model-b": (500.0, 2000.0)}
BLOCKED = "3"  # the Telegram chat whose replies fail for good


class Refusing:
    """A Telegram transport: sends every part, except to the chat that blocked the bot (a permanent failure)."""

    name = "telegram"
    max_part_chars = 4096

    def __init__(self) -> None:
        self.sent = 0

    async def send(self, recipient: str, text: str, reply_to: str | None) -> str:
        if recipient == BLOCKED:
            raise SendError("Forbidden: bot was blocked by the user", transient=False, code=403)
        self.sent += 1
        return f"m{self.sent}"


class Built:
    """What the test did, per turn: (day, surface) -> the cost and tokens the provider reported."""

    def __init__(self, server: FakeModelServer) -> None:
        self.server = server
        self.tokens: dict[tuple[str, str], list[int]] = {}
        self.cost: dict[tuple[str, str], float] = {}

    def record(self, day: str, surface: str, answered_by: str | None) -> None:
        key = (day, surface)
        tokens = self.tokens.setdefault(key, [0, 0])
        self.cost.setdefault(key, 0.0)
        if answered_by is None:
            return
        body = self.server.requests_for(answered_by)[-1].body  # what the fake counted, as it counts it
        tin = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
        tout = len("the answer is here".split())
        tokens[0] += tin
        tokens[1] += tout
        pin, pout = PRICES[answered_by]
        self.cost[key] += (tin * pin + tout * pout) / 1_000_000


async def build(store: Any, clock: TestClock, server: FakeModelServer) -> tuple[list[str], Built]:
    """The turns the comments below list, on three days from noon two days ago; the days and what was built."""
    settings = Settings.from_mapping({
        "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": server.base_url + "/v1", "HILO_EMBEDDER": "none",
        "HILO_MODEL": "openai:model-a", "HILO_FALLBACK_MODELS": "openai:model-b",
        "HILO_PRICES": json.dumps({m: {"in": i, "out": o} for m, (i, o) in PRICES.items()}),
    })
    chain = build_chain(settings, policy=RetryPolicy(attempts=1, sleep=no_sleep), timeout=5)
    pipeline = Pipeline(settings, store, chain)
    transport = Refusing()
    pipeline.outbox.register(transport)
    tasks = TaskSet()
    pipeline.outbox.start(tasks)
    built = Built(server)
    first = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0) - timedelta(days=2)
    clock.offset = first - datetime.now(UTC)  # noon, two days ago: every turn of a day falls on that day
    days = [(first + timedelta(days=i)).date().isoformat() for i in range(3)]
    seq = 0
    web: dict[str, int] = {}

    async def turn(day: int, surface: str, sender: str, kind: str, conv: str | None = None) -> None:
        nonlocal seq
        seq += 1
        # each model's default answer, for this turn's one call to it
        server.script("model-a", default=ok("the answer is here") if kind == "ok" else status(503))
        server.script("model-b", default=ok("the answer is here") if kind == "fallback" else status(503))
        text = f"question number {seq}"
        if surface == "telegram":
            msg = with_route(InboundMessage(surface, sender, f"{sender}:{seq}", text, received_at=clock()), sender)
        else:
            ref = str(web[conv]) if conv in web else None
            msg = InboundMessage(surface, sender, f"{sender}:{seq}", text, received_at=clock(), conversation_ref=ref)
        out = await pipeline.handle(msg)
        assert out.status == ("failed" if kind == "fail" else "ok"), out
        if surface == "web" and conv is not None:
            web.setdefault(conv, out.conversation_id)
        built.record(days[day], surface, {"ok": "model-a", "fallback": "model-b"}.get(kind))

    try:
        # day 0: Telegram alice 3 turns (one by the fallback), bob 1; the web: carol's W1 (one turn no model
        # answered) and W2
        for kind in ("ok", "ok", "fallback"):
            await turn(0, "telegram", "1", kind)
        await turn(0, "telegram", "2", "ok")
        await turn(0, "web", "carol", "ok", "W1")
        await turn(0, "web", "carol", "fail", "W1")
        await turn(0, "web", "carol", "ok", "W2")
        clock.advance(86_400)
        # day 1: alice by the fallback, bob's turn no model answers; carol twice in W1
        await turn(1, "telegram", "1", "fallback")
        await turn(1, "telegram", "2", "fail")
        await turn(1, "web", "carol", "ok", "W1")
        await turn(1, "web", "carol", "ok", "W1")
        clock.advance(86_400)
        # day 2: dave, who blocked the bot: his reply and the apology of the turn no model answered both fail
        await turn(2, "telegram", BLOCKED, "ok")
        await turn(2, "telegram", BLOCKED, "fail")

        async def all_settled() -> bool:
            return (await store.outbox_backlog())[0] == 0

        await wait_until(all_settled, "every Telegram part sent or failed")
    finally:
        await pipeline.outbox.stop(timeout=5)
        await tasks.drain(timeout=5)
        await chain.aclose()
    return days, built


async def stats(backend: Backend, capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    capsys.readouterr()
    try:
        assert await asyncio.to_thread(main, ["stats", "--db", backend.url, *args]) == 0
    finally:
        log.configure()  # an in-process `hilo` logs warnings only: info lines on again for the tests after this one
    out = capsys.readouterr().out
    return json.loads(out) if "--json" in args else out


def by_key(data: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["day"], r["surface"]): r for r in data["rows"]}


#: (day, surface) -> turns, conversations, people, exchanges mean, p90, fallback turns, calls, failed calls,
#: delivery failures: what `build` did
EXPECTED = {
    (0, "telegram"): (4, 2, 2, 2.0, 3, 1, 5, 1, 0),
    (0, "web"): (2, 2, 1, 1.0, 1, 0, 4, 2, 0),
    (1, "telegram"): (1, 2, 2, 0.5, 1, 1, 4, 3, 0),
    (1, "web"): (2, 1, 1, 2.0, 2, 0, 2, 0, 0),
    (2, "telegram"): (1, 1, 1, 1.0, 1, 0, 3, 2, 2),
}


def check_row(row: dict[str, Any], want: tuple[Any, ...], tokens: list[int], cost: float) -> None:
    turns, convs, people, mean, p90, fallbacks, calls, failed, undelivered = want
    assert (row["turns"], row["conversations"], row["people"]) == (turns, convs, people)
    assert row["exchanges_per_conversation"] == {"mean": mean, "p90": p90}
    assert (row["tokens_in"], row["tokens_out"]) == tuple(tokens)
    assert round(row["cost_usd"], 2) == round(cost, 2) and row["cost_usd"] == pytest.approx(cost, abs=1e-6)
    assert row["per_conversation"] == {"tokens_in": round(tokens[0] / convs, 6),
                                       "tokens_out": round(tokens[1] / convs, 6),
                                       "cost_usd": pytest.approx(cost / convs, abs=1e-6)}
    assert row["per_person"]["cost_usd"] == pytest.approx(cost / people, abs=1e-6)
    assert row["per_person"]["tokens_in"] == round(tokens[0] / people, 6)
    assert (row["fallback_turns"], row["fallback_rate"]) == (fallbacks, round(fallbacks / turns, 6))
    assert (row["model_calls"], row["model_failures"]) == (calls, failed)
    assert row["model_failure_rate"] == round(failed / calls, 6)
    assert row["delivery_failures"] == undelivered


async def test_stats_show_what_the_turns_did_per_surface_and_day(
    store: Any, backend: Backend, clock: TestClock, model_server: FakeModelServer, capsys: pytest.CaptureFixture[str],
) -> None:
    days, built = await build(store, clock, model_server)
    data = await stats(backend, capsys, "--since", days[0], "--days", "3", "--json")
    assert (data["since"], data["until"], data["days"], data["surface"]) == (days[0], days[2], 3, None)
    rows = by_key(data)
    assert len(rows) == 3 * 4  # every day and surface, zeros included
    for (day, surface), want in EXPECTED.items():
        key = (days[day], surface)
        check_row(rows[key], want, built.tokens[key], built.cost[key])
    quiet = [k for k in rows if (days.index(k[0]), k[1]) not in EXPECTED]
    assert quiet and all(rows[k]["turns"] == rows[k]["model_calls"] == rows[k]["cost_usd"] == 0 for k in quiet)
    totals = data["totals"]
    exchanges = sorted([3, 1, 1, 1, 1, 0, 2, 1])  # each conversation-day's turns
    assert (totals["turns"], totals["conversations"], totals["people"]) == (10, 8, 4)
    assert totals["exchanges_per_conversation"] == {"mean": 1.25, "p90": exchanges[math.ceil(0.9 * 8) - 1]}
    assert (totals["fallback_rate"], totals["model_failure_rate"]) == (round(2 / 10, 6), round(8 / 18, 6))
    assert totals["cost_usd"] == pytest.approx(sum(built.cost.values()), abs=1e-6)
    assert totals["delivery_failures"] == 2 and totals["retention_deleted"] == 0
    assert "question number" not in json.dumps(data) and "carol" not in json.dumps(data)  # no text, no handle

    # the table says the same
    table = await stats(backend, capsys, "--since", days[0], "--days", "3")
    line = next(x for x in table.splitlines() if x.startswith(f"{days[0]}  telegram"))
    t = rows[(days[0], "telegram")]
    assert line.split() == [days[0], "telegram", "4", "2", "2", "2.00", "3",
                            f"{t['per_conversation']['tokens_in']:.1f}", f"{t['per_conversation']['tokens_out']:.1f}",
                            f"{t['per_conversation']['cost_usd']:.4f}", f"{t['per_person']['cost_usd']:.4f}",
                            f"{t['cost_usd']:.4f}", "25.0%", "20.0%", "0", "0"]
    total_line = table.splitlines()[-1].split()
    assert total_line[:7] == ["total", "all", "10", "8", "4", "1.25", "3"] and total_line[-2:] == ["2", "0"]
    assert "question number" not in table and "carol" not in table

    # --surface and --days filter
    only_web = await stats(backend, capsys, "--since", days[0], "--days", "2", "--surface", "web", "--json")
    assert [(r["day"], r["surface"]) for r in only_web["rows"]] == [(days[0], "web"), (days[1], "web")]
    assert (only_web["totals"]["turns"], only_web["totals"]["model_calls"]) == (4, 6)

    # retention: the web's messages older than two days go (day 0's five), counted on the day it ran
    assert (await store.purge_messages("web", 2, 100))[0] == 5
    after = by_key(await stats(backend, capsys, "--since", days[0], "--days", "3", "--json"))
    assert after[(days[2], "web")]["retention_deleted"] == 5
    assert after[(days[0], "web")]["turns"] == after[(days[0], "web")]["model_calls"] == 0
    check_row(after[(days[1], "web")], EXPECTED[(1, "web")], built.tokens[(days[1], "web")],
              built.cost[(days[1], "web")])


async def test_an_empty_database_prints_zeros(backend: Backend, store: Any, capsys: pytest.CaptureFixture[str]) -> None:
    data = await stats(backend, capsys, "--json", "--days", "2")
    assert len(data["rows"]) == 2 * 4 and data["totals"]["turns"] == 0 and data["totals"]["cost_usd"] == 0
    assert data["totals"]["exchanges_per_conversation"] == {"mean": 0.0, "p90": 0}
    table = await stats(backend, capsys)
    assert table.splitlines()[-1].split()[:3] == ["total", "all", "0"]


@pytest.mark.parametrize("args", [["--days", "0"], ["--since", "yesterday"]])
def test_bad_options_are_a_clear_error(args: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    try:
        assert main(["stats", "--db", f"sqlite:///{tmp_path / 'x.db'}", *args]) == 2
    finally:
        log.configure()
    assert "configuration error" in capsys.readouterr().err
