"""Issue 9 #16: linking with consent on both sides, through the real SQLite store and the real commands.

Before an identity joins, the person redeeming is shown whose account it joins (surface and display name of
the code's owner) and must confirm from the same identity that saw that prompt; every step counts toward the
limits. Once joined, the code's owner is told who joined, on the surface where they asked for the code."""

from __future__ import annotations

import re
from typing import Any

from bot import commands
from bot.commands import parse
from bot.linking import Linker, LinkPolicy, display_name
from bot.notices import Notices
from kernel import catalog
from kernel.types import InboundMessage

CODE = re.compile(r"[0-9A-Z]{4}-[0-9A-Z]{4}-[0-9A-Z]{4}")
ANA = {"first_name": "Ana", "username": "ana", "chat_id": 42, "chat_type": "private"}


def msg(surface: str, sender: str, text: str, *, lang: str = "en", **kw: Any) -> InboundMessage:
    return InboundMessage(surface=surface, sender=sender, external_id=f"{surface}:{sender}:{text}", text=text,
                          language=lang, **kw)


async def run(store: Any, m: InboundMessage, notices: Notices | None = None) -> str:
    command = parse(m.text)
    assert command is not None
    return await commands.run(command, m, store, notices=notices)


def who(name: str | None, surface: str, lang: str = "en") -> str:
    where = catalog.t(f"surface_{surface}", lang)
    return catalog.t("link_who", lang, name=name, surface=where) if name else catalog.t(
        "link_who_unnamed", lang, surface=where)


async def test_redeeming_a_code_first_shows_whose_account_it_joins(store: Any) -> None:
    answer = await run(store, msg("telegram", "42", "/link", metadata=ANA))
    code = CODE.search(answer).group(0)  # type: ignore[union-attr]
    prompt = await run(store, msg("web", "visitor", f"/link {code.lower()}"))
    assert prompt == catalog.t("link_confirm", "en", who=who("Ana (@ana)", "telegram"), code=code)
    assert await store.identity_user("web", "visitor") != await store.identity_user("telegram", "42")
    assert await run(store, msg("web", "visitor", f"/link {code} yes")) == catalog.t("link_done", "en")
    assert await store.identity_user("web", "visitor") == await store.identity_user("telegram", "42")


async def test_only_the_identity_shown_the_prompt_can_confirm(store: Any) -> None:
    linker = Linker(store)
    code = await linker.request("telegram", "42", name="Ana (@ana)")
    # told to send "/link CODE yes" by someone else: the confirm is taken as the first step, and shows the prompt
    blind = await linker.redeem("whatsapp", "+34", code, confirm=True)
    assert blind.status == "prompt" and blind.owner is not None
    assert (blind.owner.surface, blind.owner.name) == ("telegram", "Ana (@ana)")
    assert await store.identity_user("whatsapp", "+34") is None  # nothing joined, nobody was even created
    seen = await linker.redeem("web", "visitor", code)
    assert seen.status == "prompt"
    # another identity cannot confirm the prompt the visitor saw
    assert (await linker.redeem("web", "intruder", code, confirm=True)).status == "prompt"
    assert (await linker.redeem("web", "visitor", code, confirm=True)).status == "prompt"  # shown again
    done = await linker.redeem("web", "visitor", code, confirm=True)
    assert done.status == "linked" and done.user_id == await store.identity_user("telegram", "42")
    assert (await linker.redeem("web", "intruder", code, confirm=True)).status == "invalid"  # used


async def test_every_step_counts_toward_the_limits(store: Any) -> None:
    linker = Linker(store, LinkPolicy(max_code_attempts=3, max_failures=4))
    code = await linker.request("telegram", "42")
    for i in range(3):  # three prompts use up the code's attempts
        assert (await linker.redeem("web", f"v{i}", code)).status == "prompt"
    assert (await linker.redeem("web", "v2", code, confirm=True)).status == "invalid"
    # wrong codes count the same whether confirmed or not
    statuses = [(await linker.redeem("web", "guesser", f"ZZZZ-ZZZZ-{i:04d}", confirm=i % 2 == 0)).status
                for i in range(4)]
    assert statuses == ["invalid"] * 3 + ["locked"]
    fresh = await linker.request("telegram", "42")
    assert (await linker.redeem("web", "guesser", fresh)).status == "locked"


async def test_the_owner_on_the_web_finds_who_joined_in_their_conversation(store: Any) -> None:
    first = await store.ingest(msg("web", "visitor", "hello", lang="es"), 1)
    conv = str(first.conversation_id)
    answer = await run(store, msg("web", "visitor", "/link", lang="es", conversation_ref=conv))
    code = CODE.search(answer).group(0)  # type: ignore[union-attr]
    bob = msg("telegram", "7", f"/link {code}", metadata={"first_name": "Bob", "chat_id": 7})
    assert await run(store, bob) == catalog.t("link_confirm", "en", who=who(None, "web"), code=code)
    confirm = msg("telegram", "7", f"/link {code} yes", metadata={"first_name": "Bob", "chat_id": 7})
    assert await run(store, confirm, Notices(store)) == catalog.t("link_done", "en")
    messages = await store.messages(first.user_id, first.conversation_id)
    assert [(m.role, m.content) for m in messages] == [
        ("user", "hello"), ("assistant", catalog.t("link_joined", "es", who=who("Bob", "telegram", "es")))]


async def test_a_notice_goes_through_the_surface_that_registered_a_sender(store: Any) -> None:
    sent: list[tuple[str, str, int, int]] = []

    async def telegram(recipient: str, text: str, user_id: int, message_id: int) -> None:
        sent.append((recipient, text, user_id, message_id))

    notices = Notices(store)
    notices.register("telegram", telegram)
    code = CODE.search(await run(store, msg("telegram", "42", "/link", metadata=ANA))).group(0)  # type: ignore[union-attr]
    wa = {"profile_name": "Ana P"}
    await run(store, msg("whatsapp", "+34600111222", f"/link {code}", metadata=wa), notices)
    assert sent == []  # nothing joined yet, nobody told
    await run(store, msg("whatsapp", "+34600111222", f"/link {code} yes", metadata=wa), notices)
    user = await store.identity_user("telegram", "42")
    notice = catalog.t("link_joined", "en", who=who("Ana P (…1222)", "whatsapp"))
    [(recipient, text, user_id, message_id)] = sent
    assert (recipient, text, user_id) == ("42", notice, user)
    conv = await store.find_conversation(user, "telegram")
    assert [(m.id, m.role, m.content) for m in await store.messages(user, conv)] == [(message_id, "assistant", notice)]


def test_display_names_per_surface() -> None:
    assert display_name(msg("telegram", "1", "x", metadata={"first_name": "Ana", "username": "ana"})) == "Ana (@ana)"
    assert display_name(msg("telegram", "1", "x", metadata={"username": "ana"})) == "@ana"
    assert display_name(msg("whatsapp", "+34600111222", "x", metadata={"profile_name": "Ana"})) == "Ana (…1222)"
    assert display_name(msg("whatsapp", "+34600111222", "x")) == "…1222"
    assert display_name(msg("web", "abc123", "x")) is None
    assert display_name(msg("cli", "ana", "x", handle="ana")) == "ana"
    # a name is the person's own text: no line breaks or controls, and short
    odd = display_name(msg("telegram", "1", "x", metadata={"first_name": "Ana\nSupport\u202e" + "x" * 200}))
    assert odd is not None and "\n" not in odd and "\u202e" not in odd and len(odd) <= 64
