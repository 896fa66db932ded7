"""The person's time zone (issue 15 item 5: "the time now in the person's time zone"), on every backend: Telegram and
WhatsApp never say it, so the person names it (`/timezone Madrid`, or in words the model turns into a
`set_timezone` call through the real SDKs against the fake provider); the web widget's browser zone is remembered;
the time tool uses the stored zone and tells the model when none is known; export and forget cover it."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from bot import commands
from bot.commands import parse
from bot.pipeline import Pipeline
from bot.tools import builtin
from bot.tools.registry import ToolContext
from kernel import catalog
from kernel.types import InboundMessage
from kernel.zones import find_zone
from tests.fakes.model_server import FakeModelServer, calls_tool, ok
from tests.test_tools import MODELS, tool_results


@pytest.mark.parametrize(("words", "zone"), [
    ("Madrid", "Europe/Madrid"),
    ("europe/madrid", "Europe/Madrid"),
    ("  new   york ", "America/New_York"),
    ("Buenos Aires", "America/Argentina/Buenos_Aires"),  # a link and its zone: the zone
    ("buenos_aires", "America/Argentina/Buenos_Aires"),
    ("Indianapolis", "America/Indiana/Indianapolis"),
    ("Bogotá", "America/Bogota"),  # accents as people write them
    ("São Paulo", "America/Sao_Paulo"),
    ("Ciudad de México", None),  # not a zone's name: the person is asked again, never guessed
    ("US/Eastern", "US/Eastern"),  # an old alias by its whole name only
    ("Eastern", None),
    ("Mars", None),
    ("", None),
    ("x" * 200, None),
])
def test_a_zone_is_found_by_its_name_or_its_city(words: str, zone: str | None) -> None:
    assert find_zone(words) == zone


def tg(text: str, *, sender: str = "42", lang: str = "en", group: bool = False, **metadata: Any) -> InboundMessage:
    if group:
        metadata["audience"] = "group"
    return InboundMessage(surface="telegram", sender=sender, external_id=f"x:{text}", text=text, language=lang,
                          metadata=metadata)


async def say(store: Any, m: InboundMessage) -> str:
    command = parse(m.text)
    assert command is not None
    return await commands.run(command, m, store)


async def test_timezone_command_shows_sets_and_refuses(store: Any) -> None:
    assert await say(store, tg("/timezone")) == catalog.t("cmd_timezone_unknown", "en")
    assert await store.identity_user("telegram", "42") is None  # asking creates nobody
    assert await say(store, tg("/timezone Narnia", lang="es")) == catalog.t("cmd_timezone_not_found", "es",
                                                                            words="Narnia")
    set_reply = await say(store, tg("/timezone madrid"))
    local = re.search(r"\d\d:\d\d", set_reply)
    assert local is not None
    assert set_reply == catalog.t("cmd_timezone_set", "en", zone="Europe/Madrid", time=local.group())
    user_id = await store.identity_user("telegram", "42")
    assert user_id is not None and await store.person_zone(user_id) == "Europe/Madrid"
    shown = await say(store, tg("/timezone", lang="es"))
    assert shown.startswith("Tu zona horaria: Europe/Madrid (allí son las ")
    # in a group the zone is neither shown nor changed
    assert await say(store, tg("/timezone Lima", group=True)) == catalog.t("cmd_private_only", "en",
                                                                           name="timezone")
    assert await store.person_zone(user_id) == "Europe/Madrid"
    # another person's zone is theirs alone
    assert await say(store, tg("/timezone", sender="43")) == catalog.t("cmd_timezone_unknown", "en")


async def test_the_time_tool_says_when_the_zone_is_not_known(store: Any) -> None:
    moment = datetime(2026, 7, 1, 12, 30, tzinfo=UTC)
    unknown = await builtin.now(ToolContext(1, store, moment, zone_known=False), {})
    assert unknown == ("2026-07-01 12:30 (Wednesday), time zone UTC (UTC+00:00); the person's time zone is not "
                       "known: ask where they are if it matters, then call set_timezone")


@pytest.mark.parametrize("model", MODELS)
async def test_the_person_names_their_zone_and_the_time_tool_uses_it(
    store: Any, model_server: FakeModelServer, job_chain: Any, model: str,
) -> None:
    settings, chain = job_chain({"HILO_MODEL": model, "HILO_TOOLS": "all"})
    p = Pipeline(settings, store, chain)
    name = model.split(":", 1)[1]
    model_server.script(name, [calls_tool("now", {}), ok("It is 12:30 UTC; where are you?"),
                               calls_tool("set_timezone", {"zone": "Bogota"}), ok("Noted."),
                               calls_tool("set_timezone", {"zone": "Atlantis"}), ok("Which city?"),
                               calls_tool("now", {}), ok("It is morning in Bogota.")])
    for i, text in enumerate(["what time is it?", "I live in Bogota", "I moved to Atlantis", "and now?"]):
        await p.handle(InboundMessage(surface="telegram", sender="42", external_id=f"t{i}", text=text))
    results = [r["content"] for request in model_server.requests for r in tool_results(request)]
    # each request carries the results of the turn's own calls (and the history's, compact in the context)
    first_now, set_ok, set_bad, second_now = (results[0], _after(results, "time zone set"),
                                              _after(results, "error: no time zone"), results[-1])
    assert first_now.endswith("time zone UTC (UTC+00:00); the person's time zone is not known: ask where they "
                              "are if it matters, then call set_timezone")
    assert set_ok.startswith("time zone set to America/Bogota; it is ")
    assert set_bad == ("error: no time zone is called 'Atlantis': ask for a big city near them, or an IANA name")
    local = datetime.now(ZoneInfo("America/Bogota"))
    assert f"({local:%A}), time zone America/Bogota (UTC-05:00)" in second_now
    assert "not known" not in second_now
    user_id = await store.identity_user("telegram", "42")
    assert user_id is not None and await store.person_zone(user_id) == "America/Bogota"


def _after(results: list[str], start: str) -> str:
    return next(r for r in results if r.startswith(start))


async def test_the_web_widget_zone_is_remembered_and_covered_by_export_and_forget(
    store: Any, model_server: FakeModelServer, job_chain: Any,
) -> None:
    settings, chain = job_chain({"HILO_MODEL": "openai:m1", "HILO_TOOLS": "now"})
    p = Pipeline(settings, store, chain)
    model_server.script("m1", [ok("hi"), calls_tool("now", {}), ok("It is evening.")])
    web = {"surface": "web", "sender": "visitor-1", "handle": "web-visitor-1"}
    await p.handle(InboundMessage(external_id="w1", text="hello", metadata={"timezone": "Asia/Tokyo"}, **web))
    user_id = await store.user_id("web-visitor-1")
    assert user_id is not None and await store.person_zone(user_id) == "Asia/Tokyo"
    # a later message without a zone (another tab, the CLI) still has it
    await p.handle(InboundMessage(external_id="w2", text="what time is it?", **web))
    [result] = tool_results(model_server.requests[-1])
    assert "time zone Asia/Tokyo (UTC+09:00)" in result["content"]
    exported = await store.export("web-visitor-1")
    assert exported is not None
    users = exported["tables"]["users"]
    assert [u["timezone"] for u in users] == ["Asia/Tokyo"]
    assert await store.erase("web-visitor-1") is not None
    assert await store.user_id("web-visitor-1") is None
