"""Surface-agnostic commands (/start, /help, /memory, /forget, /link, /unlink) against the real SQLite store."""

from __future__ import annotations

from typing import Any

import pytest
import structlog

from bot import commands
from bot.commands import Command, parse
from kernel import catalog
from kernel.types import InboundMessage


def msg(text: str, *, sender: str = "42", lang: str | None = "en", group: bool = False, **kw: Any) -> InboundMessage:
    metadata = {"audience": "group"} if group else {}
    return InboundMessage(surface="telegram", sender=sender, external_id=f"x:{text}", text=text, language=lang,
                          metadata=metadata, **kw)


async def say(store: Any, text: str, **kw: Any) -> str:
    m = msg(text, **kw)
    command = parse(m.text)
    assert command is not None
    return await commands.run(command, m, store)


async def ingest(store: Any, text: str, *, sender: str = "42", surface: str = "telegram", ext: str = "") -> None:
    m = InboundMessage(surface=surface, sender=sender, external_id=ext or f"{surface}:{sender}:{text}", text=text)
    assert await store.ingest(m, 3) is not None


@pytest.mark.parametrize(("text", "expected"), [
    ("/start", Command("start")),
    ("  /Forget yes ", Command("forget", "yes")),
    ("/forget@Hilo_Bot  sí", Command("forget", "sí", "hilo_bot")),
    ("/help@hilo_bot", Command("help", "", "hilo_bot")),
    ("/link ABC-123\nmore", Command("link", "ABC-123\nmore")),
    ("hello /start", None),
    ("/", None),
    ("/start-now", None),
    ("/path/to/file", None),
    ("", None),
])
def test_parse(text: str, expected: Command | None) -> None:
    assert parse(text) == expected


async def test_start_and_help_are_localized(store: Any) -> None:
    assert await say(store, "/start") == catalog.t("cmd_start", "en")
    assert await say(store, "/start", lang="es-ES") == catalog.t("cmd_start", "es")
    assert await say(store, "/help", lang="es") == catalog.t("cmd_help", "es")
    assert await say(store, "/help", lang="fr") == catalog.t("cmd_help", "en")
    assert "/nope" in await say(store, "/nope")
    # commands create nobody
    assert await store.identity_user("telegram", "42") is None


async def test_memory_lists_facts_and_counts(store: Any) -> None:
    assert await say(store, "/memory") == catalog.t("cmd_memory_empty", "en")
    await ingest(store, "hello")
    await ingest(store, "hola", surface="telegram", ext="second")
    uid = await store.identity_user("telegram", "42")
    await store.remember(uid, "likes green tea", 4)
    text = await say(store, "/memory")
    [memory] = await store.memories(uid)
    assert f"- {memory.short_id}: likes green tea" in text and "messages 2, conversations 1" in text
    assert "(telegram)" in text
    es = await say(store, "/memory", lang="es")
    assert es.startswith("Lo que sé de ti") and "mensajes 2" in es


async def test_memory_caps_the_facts_it_lists(store: Any) -> None:
    await ingest(store, "hello")
    uid = await store.identity_user("telegram", "42")
    for i in range(commands.MEMORY_FACTS_SHOWN + 3):
        await store.remember(uid, f"fact number {i}", 3)
    text = await say(store, "/memory")
    assert "fact number 0\n" not in text and f"fact number {commands.MEMORY_FACTS_SHOWN + 2}" in text
    assert "...and 3 more." in text
    lines = [line for line in text.splitlines() if line.startswith("- m")]
    newest = await store.memories(uid)
    assert lines == [f"- {m.short_id}: {m.content}" for m in newest[:commands.MEMORY_FACTS_SHOWN]]  # newest first


async def test_forget_asks_first_then_deletes_the_person(store: Any) -> None:
    await ingest(store, "my secret is tangerine")
    assert await say(store, "/forget") == catalog.t("cmd_forget_confirm", "en")
    assert await say(store, "/forget please") == catalog.t("cmd_forget_no_match", "en")  # words: one memory
    assert await store.inspect("telegram:42") is not None
    assert await say(store, "/forget YES") == catalog.t("cmd_forget_done", "en")
    assert await store.inspect("telegram:42") is None
    assert await say(store, "/forget yes") == catalog.t("cmd_forget_nothing", "en")
    await ingest(store, "again", ext="again")
    assert await say(store, "/forget sí", lang="es") == catalog.t("cmd_forget_done", "es")


async def test_a_person_who_forgets_themselves_leaves_their_handle_in_the_log(store: Any) -> None:
    """The operator's note of an erasure (docs/deploy.md, "Backups"): a restore of a backup taken before it brings
    the person back, and `hilo forget --user HANDLE` is how to forget them again. The handle (an id), no text."""
    await ingest(store, "my secret is tangerine")
    with structlog.testing.capture_logs() as logs:
        assert await say(store, "/forget yes") == catalog.t("cmd_forget_done", "en")
        assert await say(store, "/forget yes") == catalog.t("cmd_forget_nothing", "en")
    said = [e for e in logs if e["event"] == "person.forgotten"]
    assert [(e["log_level"], e["handle"]) for e in said] == [("info", "telegram:42")]
    assert said[0]["rows"] >= 2 and "tangerine" not in str(said)


async def test_forget_only_touches_the_sender(store: Any) -> None:
    await ingest(store, "mine", sender="1")
    await ingest(store, "theirs", sender="2")
    await say(store, "/forget yes", sender="1")
    assert await store.inspect("telegram:1") is None
    assert await store.inspect("telegram:2") is not None


async def test_private_commands_are_not_answered_in_a_group(store: Any) -> None:
    await ingest(store, "my secret is tangerine")
    for name in ("memory", "forget", "link", "unlink"):
        assert await say(store, f"/{name} yes", group=True) == catalog.t("cmd_private_only", "en", name=name)
    assert await store.inspect("telegram:42") is not None
    assert await say(store, "/help", group=True) == catalog.t("cmd_help", "en")


async def test_link_and_unlink_through_commands(store: Any) -> None:
    import re

    await ingest(store, "my dog is called Rufo")
    answer = await say(store, "/link", lang="es")
    code = re.search(r"[0-9A-Z]{4}-[0-9A-Z]{4}-[0-9A-Z]{4}", answer).group(0)  # type: ignore[union-attr]
    assert answer == catalog.t("link_code", "es", code=code)
    assert await say(store, f"/link {code}") == catalog.t("link_own_code", "en")
    web = InboundMessage(surface="web", sender="v1", external_id="w", text=f"/link {code.lower()}", language="en")
    owner = catalog.t("link_who_unnamed", "en", surface="Telegram")  # the test's Telegram message has no name
    assert await commands.run(parse(web.text), web, store) == catalog.t(  # type: ignore[arg-type]
        "link_confirm", "en", who=owner, code=code)
    yes = InboundMessage(surface="web", sender="v1", external_id="w", text=f"/link {code} sí", language="en")
    assert await commands.run(parse(yes.text), yes, store) == catalog.t("link_done", "en")  # type: ignore[arg-type]
    assert await store.identity_user("web", "v1") == await store.identity_user("telegram", "42")
    assert await commands.run(parse(yes.text), yes, store) == catalog.t("link_invalid", "en")  # type: ignore[arg-type]
    unlink = InboundMessage(surface="web", sender="v1", external_id="u", text="/unlink", language="en")
    assert await commands.run(parse("/unlink"), unlink, store) == catalog.t("unlink_done", "en")  # type: ignore[arg-type]
    assert await say(store, "/unlink") == catalog.t("unlink_only", "en")
    assert await store.identity_user("web", "v1") != await store.identity_user("telegram", "42")


async def test_wrong_codes_lock_linking_out(store: Any) -> None:
    answers = [await say(store, f"/link ZZZZ-{i:04d}", sender="9") for i in range(12)]
    assert answers[0] == catalog.t("link_invalid", "en")
    assert answers[-1].startswith(catalog.t("link_locked", "en", until="").split("{")[0][:20])


async def test_a_handle_names_the_person_directly(store: Any) -> None:
    # CLI-style messages carry the handle instead of an identity
    await store.user_id("ana", create=True)
    m = InboundMessage(surface="cli", sender="ana", external_id="c1", text="/forget yes", handle="ana")
    assert await commands.run(Command("forget", "yes"), m, store) == catalog.t("cmd_forget_done", "en")
    assert await store.user_id("ana") is None


async def test_link_from_the_terminal_speaks_for_the_handles_person(store: Any) -> None:
    import re

    await store.user_id("ana", create=True)
    m = InboundMessage(surface="cli", sender="ana", external_id="c1", text="/link", handle="ana", language="en")
    code = re.search(r"[0-9A-Z]{4}-[0-9A-Z]{4}-[0-9A-Z]{4}", await commands.run(parse("/link"), m, store))  # type: ignore[arg-type]
    web = InboundMessage(surface="web", sender="v9", external_id="w", text=f"/link {code.group(0)}")  # type: ignore[union-attr]
    owner = catalog.t("link_who", "en", name="ana", surface=catalog.t("surface_cli", "en"))
    assert await commands.run(parse(web.text), web, store) == catalog.t(  # type: ignore[arg-type]
        "link_confirm", "en", who=owner, code=code.group(0))  # type: ignore[union-attr]
    yes = parse(web.text + " yes")
    assert await commands.run(yes, web, store) == catalog.t("link_done", "en")  # type: ignore[arg-type]
    assert await store.identity_user("web", "v9") == await store.user_id("ana")


async def test_remember_stores_a_stated_memory_and_says_what_happened(store: Any) -> None:
    assert await say(store, "/remember") == catalog.t("cmd_remember_usage", "en")
    assert await store.identity_user("telegram", "42") is None  # the usage creates nobody
    reply = await say(store, "/remember I work at Acme")
    uid = await store.identity_user("telegram", "42")
    [m] = await store.memories(uid)
    assert (m.content, m.source, m.confidence) == ("I work at Acme", "stated", 1.0)
    assert reply == catalog.t("cmd_remember_added", "en", id=m.short_id)
    assert await say(store, "/remember i work at acme") == catalog.t("cmd_remember_merged", "en", id=m.short_id)
    assert await say(store, "/remember soy vegetariana", lang="es") == catalog.t(
        "cmd_remember_added", "es", id=f"m{m.id + 1}")
    assert (await say(store, "/remember secret", group=True)) == catalog.t("cmd_private_only", "en", name="remember")
    assert len(await store.memories(uid)) == 2


async def test_forget_one_memory_by_id_or_by_words(store: Any) -> None:
    await say(store, "/remember I have a dog called Rex")
    await say(store, "/remember I have a cat called Tom")
    await say(store, "/remember I work at Acme")
    uid = await store.identity_user("telegram", "42")
    acme, tom, rex = await store.memories(uid)
    assert await say(store, f"/forget {acme.short_id}") == catalog.t(
        "cmd_forget_one_done", "en", id=acme.short_id, content="I work at Acme")
    assert await say(store, f"/forget {acme.short_id}") == catalog.t("cmd_forget_no_id", "en", id=acme.short_id)
    which = await say(store, "/forget called")
    assert which == catalog.t("cmd_forget_which", "en", items=f"- {tom.short_id}: {tom.content}\n"
                                                              f"- {rex.short_id}: {rex.content}")
    assert len(await store.memories(uid)) == 2  # asked, nothing forgotten
    assert await say(store, "/forget the dog Rex") == catalog.t(
        "cmd_forget_one_done", "en", id=rex.short_id, content=rex.content)
    assert [m.id for m in await store.memories(uid)] == [tom.id]
    assert await say(store, "/forget zanzibar") == catalog.t("cmd_forget_no_match", "en")
    assert await say(store, f"/forget {tom.short_id}", group=True) == catalog.t(
        "cmd_private_only", "en", name="forget")
    assert await store.inspect("telegram:42") is not None  # one memory at a time, never the person


async def test_forget_by_id_never_reaches_another_person(store: Any) -> None:
    await say(store, "/remember my locker is 42", sender="1")
    other = await store.identity_user("telegram", "1")
    [theirs] = await store.memories(other)
    await say(store, "/remember hello", sender="2")
    assert await say(store, f"/forget {theirs.short_id}", sender="2") == catalog.t(
        "cmd_forget_no_id", "en", id=theirs.short_id)
    assert await say(store, "/forget locker", sender="2") == catalog.t("cmd_forget_no_match", "en")
    assert await say(store, "/forget m1", sender="3") == catalog.t("cmd_forget_no_id", "en", id="m1")
    assert [m.id for m in await store.memories(other)] == [theirs.id]
