"""Commands a person can send on any surface: /start, /help, /remember, /memory, /forget, /link, /unlink, /export,
/timezone.

Surface-agnostic: a surface parses the text (`parse`), decides whether the command is addressed to hilo, and
hands the person's InboundMessage and the store to `run`, which returns the reply text in the person's
language. Nothing here knows Telegram; WhatsApp and the web reuse it. A command is not a turn: it is not
stored as a message and never reaches the model.

- /remember, /memory and /forget (and /link) speak about the person's private data: in a shared place (metadata
  `audience: "group"`) they only point to a private chat.
- /remember TEXT stores a memory the person stated; /memory lists memories with short ids ("m12"), newest first;
  "/forget m12" or "/forget some words" forgets one (bot/memory_commands.py).
- /forget alone asks first; "/forget yes" (or "sí") deletes. Stateless on purpose: no pending confirmation to lose
  on a restart or to share between processes. It deletes the PERSON (every surface they are linked on).
- /link and /unlink: verified identity linking (bot/linking.py): one memory for one person on every surface.
  "/link CODE" shows whose account the code joins and "/link CODE yes" joins it; unlike /forget's, this
  confirmation is kept in the store: only the identity that was shown the prompt can confirm it.
- /export: everything stored about the person (bot/export.py): here a download link of theirs only, signed and
  short-lived; on Telegram the surface sends the JSON itself as a document instead.
- /timezone shows the person's time zone (what the time tool and reminders use; UTC until known); "/timezone
  Madrid" (a city, or an IANA name: kernel/zones.py) sets it. The web widget's browser zone is remembered too.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from bot import memory_commands
from bot.erasures import ErasureNotKept, Erasures
from bot.export import ExportLinks
from bot.notices import Notices
from kernel import catalog, log
from kernel.types import InboundMessage, Memory
from kernel.zones import MAX_CHARS, find_zone, zone_name
from memory.store import Inspection, Store

if TYPE_CHECKING:
    from bot.media_store import MediaFiles

#: "/forget yes", "/forget sí": the words that confirm a deletion, in any catalogue language.
CONFIRM_WORDS = frozenset({"yes", "y", "si", "sí", "confirm", "confirmar"})
#: At most this many memories are listed by /memory (the newest); the rest are counted.
MEMORY_FACTS_SHOWN = memory_commands.MEMORY_SHOWN

_COMMAND = re.compile(r"/([A-Za-z0-9_]{1,32})(?:@([A-Za-z0-9_]{1,64}))?(?=\s|$)(.*)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Command:
    """A parsed command: "/Forget@hilo_bot  yes" -> name "forget", target "hilo_bot", args "yes"."""

    name: str
    args: str = ""
    #: The bot a Telegram-style "/cmd@bot" addresses (lowercase), None when not said.
    target: str | None = None


def parse(text: str) -> Command | None:
    """The command in `text`, or None when the text is not a command (it does not start with "/name")."""
    m = _COMMAND.match(text.strip())
    if m is None:
        return None
    target = m.group(2).lower() if m.group(2) else None
    return Command(m.group(1).lower(), m.group(3).strip(), target)


@dataclass(frozen=True, slots=True)
class CommandContext:
    """What a command handler gets: the message, the store, the reply language and the arguments."""

    msg: InboundMessage
    store: Store
    lang: str
    args: str
    #: Where a command can tell someone else something (the owner of a link code); None: nowhere.
    notices: Notices | None = None
    default_language: str = "en"
    #: signs /export's download links; None (or no secret key): there are none here
    exports: ExportLinks | None = None
    #: the downloaded media files (bot/media.py) `/forget yes` deletes; None: none here
    media: MediaFiles | None = None
    #: where `/forget yes` notes the erasure first (bot/erasures.py); None: nowhere (an in-memory database)
    erasures: Erasures | None = None

    @property
    def in_group(self) -> bool:
        return self.msg.metadata.get("audience") == "group"

    async def handle(self) -> str | None:
        """The person's handle, or None when nothing is stored about them (a command never creates a user)."""
        if self.msg.handle:
            return self.msg.handle
        return await self.store.identity_handle(self.msg.surface, self.msg.sender)

    def t(self, key: str, **params: object) -> str:
        return catalog.t(key, self.lang, **params)


Handler = Callable[[CommandContext], Awaitable[str]]


async def start(ctx: CommandContext) -> str:
    return ctx.t("cmd_start")


async def help_(ctx: CommandContext) -> str:
    return ctx.t("cmd_help")


async def memory(ctx: CommandContext) -> str:
    handle = await ctx.handle()
    data = await ctx.store.inspect(handle) if handle else None
    if not data:
        return ctx.t("cmd_memory_empty")
    return describe_memory(data, await ctx.store.memories(data["user"]["id"]), ctx.lang)


async def _person(ctx: CommandContext, *, create: bool) -> int | None:
    """The id of the person who sent the command (created when `create` and not stored yet)."""
    m = ctx.msg
    if m.handle:
        return await ctx.store.user_id(m.handle, create=create)
    return await ctx.store.identity_user(m.surface, m.sender, create=create)


async def remember(ctx: CommandContext) -> str:
    if not ctx.args.strip():
        return ctx.t("cmd_remember_usage")
    user_id = await _person(ctx, create=True)
    assert user_id is not None
    return await memory_commands.remember(ctx.store, user_id, ctx.args, ctx.lang)


async def forget(ctx: CommandContext) -> str:
    try:
        return await _forget(ctx)
    except ErasureNotKept as exc:  # the record of erasures took no line: nothing forgotten, they can ask again
        log.get("hilo.erasures").error("erasures.not_kept", handle=await ctx.handle(), error=str(exc))
        return ctx.t("cmd_forget_failed")


async def _forget(ctx: CommandContext) -> str:
    what = ctx.args.strip()
    handle = await ctx.handle()
    if what and what.casefold() not in CONFIRM_WORDS:
        user_id = await ctx.store.user_id(handle) if handle else None
        return await memory_commands.forget_one(ctx.store, user_id, what, ctx.lang, ctx.erasures)
    if what.casefold() not in CONFIRM_WORDS:
        return ctx.t("cmd_forget_confirm")
    from bot.media import forget as forget_all  # noted, then the person's media files, then their rows
    from bot.media_store import MediaStoreError

    try:
        existed = handle is not None and await forget_all(ctx.store, ctx.media, handle, ctx.erasures) is not None
    except MediaStoreError:  # nothing forgotten yet (logged where it failed): they can ask again
        return ctx.t("cmd_forget_failed")
    return ctx.t("cmd_forget_done" if existed else "cmd_forget_nothing")


async def timezone(ctx: CommandContext) -> str:
    words = ctx.args.strip()
    seen = zone_name(ctx.msg.metadata.get("timezone"))  # the browser's, from the web widget
    if not words:
        handle = await ctx.handle()
        user_id = await ctx.store.user_id(handle) if handle else None
        zone = await ctx.store.person_zone(user_id, seen) if user_id is not None else None
        return ctx.t("cmd_timezone_is", zone=zone, time=_local_time(zone)) if zone else ctx.t("cmd_timezone_unknown")
    zone = find_zone(words)
    if zone is None:
        return ctx.t("cmd_timezone_not_found", words=words[:MAX_CHARS])
    user_id = await _person(ctx, create=True)
    assert user_id is not None
    await ctx.store.set_person_zone(user_id, zone)
    return ctx.t("cmd_timezone_set", zone=zone, time=_local_time(zone))


def _local_time(zone: str) -> str:
    return datetime.now(ZoneInfo(zone)).strftime("%H:%M")


async def link(ctx: CommandContext) -> str:
    """/link: a one-time code for this identity; /link CODE: whose account the code joins; /link CODE yes (from
    the identity shown that): join this identity to the code's person, who is told."""
    from bot.linking import Linker, display_name, normalize, show, who

    linker = Linker(ctx.store, notices=ctx.notices)
    m = ctx.msg
    if m.handle and await ctx.store.user_id(m.handle) is not None:
        # a message filed under a handle (`hilo chat --user U`): its identity is that person's
        await ctx.store.link_identity(m.handle, m.surface, m.sender, "cli")
    if not ctx.args.strip():
        code = await linker.request(m.surface, m.sender, name=display_name(m), language=ctx.lang,
                                    conversation_ref=m.conversation_ref)
        return ctx.t("link_code", code=code)
    typed, confirm = confirmed(ctx.args)
    result = await linker.redeem(m.surface, m.sender, typed, client_ip=m.client_ip, confirm=confirm)
    if result.status == "locked":
        until = result.locked_until.strftime("%H:%M") if result.locked_until else "?"
        return ctx.t("link_locked", until=until)
    if result.status == "prompt" and result.owner is not None:
        owner = result.owner
        return ctx.t("link_confirm", who=who(owner.name, owner.surface, ctx.lang), code=show(normalize(typed) or ""))
    if result.status == "linked" and result.owner is not None:
        await linker.tell_owner(result.owner, m, ctx.default_language)
    return ctx.t({"linked": "link_done", "already_linked": "link_already", "own_code": "link_own_code",
                  }.get(result.status, "link_invalid"))


def confirmed(args: str) -> tuple[str, bool]:
    """"CODE yes" -> ("CODE", True); "CODE" -> ("CODE", False)."""
    words = args.split()
    if len(words) > 1 and words[-1].casefold() in CONFIRM_WORDS:
        return " ".join(words[:-1]), True
    return args, False


async def unlink(ctx: CommandContext) -> str:
    """/unlink: this identity leaves its person; its future messages go to a new one."""
    from bot.linking import Linker

    status = await Linker(ctx.store).unlink(ctx.msg.surface, ctx.msg.sender)
    return ctx.t("unlink_done" if status == "unlinked" else "unlink_only")


async def export(ctx: CommandContext) -> str:
    """/export: a download link of everything stored about the person (theirs only, for a few minutes)."""
    handle = await ctx.handle()
    user_id = await ctx.store.user_id(handle) if handle else None
    if handle is None or user_id is None:
        return ctx.t("cmd_export_nothing")
    if ctx.msg.surface == "cli" or ctx.exports is None or not ctx.exports.secret_key:
        return ctx.t("cmd_export_cli", handle=handle)  # a terminal opens no link: the operator's command
    return ctx.t("cmd_export_link", url=ctx.exports.link(user_id, handle), minutes=ctx.exports.minutes)


HANDLERS: dict[str, Handler] = {
    "start": start, "help": help_, "remember": remember, "memory": memory, "forget": forget, "link": link,
    "unlink": unlink, "export": export, "timezone": timezone,
}
#: Commands that show or change the person's private data: never answered in a shared place.
PRIVATE_ONLY = frozenset({"remember", "memory", "forget", "link", "unlink", "export", "timezone"})


async def run(
    command: Command, msg: InboundMessage, store: Store, *, default_language: str = "en",
    notices: Notices | None = None, exports: ExportLinks | None = None, media: MediaFiles | None = None,
    erasures: Erasures | None = None,
) -> str:
    """The reply to `command`, sent by the person of `msg`, in their language (msg.language, else the default).
    `notices`: where to tell others what a command did to them (the owner of a link code who was joined)."""
    lang = catalog.language(msg.language, default_language)
    handler = HANDLERS.get(command.name)
    if handler is None:
        return catalog.t("cmd_unknown", lang, name=command.name)
    ctx = CommandContext(msg, store, lang, command.args, notices, default_language, exports, media, erasures)
    if command.name in PRIVATE_ONLY and ctx.in_group:
        return catalog.t("cmd_private_only", lang, name=command.name)
    return await handler(ctx)


def describe_memory(data: Inspection, memories: Sequence[Memory], lang: str) -> str:
    """/memory's answer: the current memories with their ids, newest first (bot/memory_commands.py), then what is
    kept (from `Store.inspect` output), counted."""
    text = memory_commands.listing(memories, lang) or catalog.t("cmd_memory_no_facts", lang)
    conversations = [c for c in data["conversations"] if c["messages"]]
    messages = sum(len(c["messages"]) for c in conversations)
    surfaces = sorted({c["surface"] for c in conversations})
    if messages:
        since = str(data["user"]["created_at"])[:10]
        text += "\n\n" + catalog.t(
            "cmd_memory_counts", lang, messages=messages, conversations=len(conversations),
            surfaces=", ".join(surfaces), since=since,
        )
    return text
