"""The built-in tools, chosen with HILO_TOOLS (bot/config.py): `now`, `remember`, `forget`, `search_memory`,
`set_timezone`, and the reminders: `remind` (stored; the `reminders` job delivers it: bot/reminders.py),
`list_reminders`, `cancel_reminder`.

Each reads and writes only the turn's person (ToolContext.user_id, from the pipeline): the memories store is the
one /remember, /memory and /forget use (bot/memory_commands.py), so what the model remembers the person can list
and forget, and the other way round. Results are short plain text for the model, in English (the model answers the
person in their language).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from bot import memory_commands
from bot.erasures import forget_memory
from bot.tools.registry import Registry, Tool, ToolContext, ToolError
from kernel.types import MemoryDraft, ToolSpec
from kernel.zones import MAX_CHARS, find_zone, zone_name

#: The longest fact the model may store in one call (a memory is a sentence, not a document).
FACT_CHARS = 500
#: A reminder's longest text, how far ahead it may be, and how many one person may have pending.
REMINDER_CHARS = 500
REMINDER_AHEAD = timedelta(days=366)
REMINDERS_PENDING = 50


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


async def now(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
    """The date and time in the person's time zone (UTC when hilo does not know it)."""
    name = zone_name(ctx.timezone)
    zone: Any = ZoneInfo(name) if name is not None else UTC
    local = ctx.now.astimezone(zone)
    offset = local.strftime("%z")
    said = (f"{local:%Y-%m-%d %H:%M} ({local:%A}), time zone {getattr(zone, 'key', 'UTC')} "
            f"(UTC{offset[:3]}:{offset[3:]})")
    if not ctx.zone_known:
        said += "; the person's time zone is not known: ask where they are if it matters, then call set_timezone"
    return said


async def set_timezone(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
    """The person's time zone is the one they named (a city or an IANA name), as /timezone does."""
    words = str(arguments["zone"]).strip()
    found = find_zone(words)
    if found is None:
        raise ToolError(f"no time zone is called {words!r}: ask for a big city near them, or an IANA name")
    await ctx.store.set_person_zone(ctx.user_id, found)
    return f"time zone set to {found}; it is {ctx.now.astimezone(ZoneInfo(found)):%Y-%m-%d %H:%M} there now"


async def remember(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
    """Store a fact the person stated, as /remember does."""
    fact = str(arguments["fact"]).strip()
    if not fact:
        raise ToolError("the fact is empty")
    added = await ctx.store.add_memory(ctx.user_id, MemoryDraft(fact))
    if added.outcome == "superseded" and added.previous is not None:
        return f"stored as {added.memory.short_id}, replacing {added.previous.short_id}"
    if added.outcome == "merged":
        return f"merged into {added.memory.short_id}: {added.memory.content}"
    return f"stored as {added.memory.short_id}"


async def forget(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
    """Forget the memory an id ("m12") or words name, as /forget does; several close matches are listed."""
    what = str(arguments["memory"]).strip()
    memory_id, matches = await memory_commands.named(ctx.store, ctx.user_id, what)
    if not matches:
        return f"no memory m{memory_id}" if memory_id is not None else "no memory matches those words"
    if len(matches) > 1:
        listed = "\n".join(memory_commands.line(m) for m in matches[:memory_commands.MEMORY_SHOWN])
        return f"several memories match; call forget again with one id:\n{listed}"
    [found] = matches
    if not await forget_memory(ctx.store, ctx.erasures, ctx.user_id, found.id):
        return f"no memory {found.short_id}"
    return f"forgotten {found.short_id}: {found.content}"


async def search_memory(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
    """The person's current memories the words name best, with their ids."""
    found = await ctx.store.find_memories(ctx.user_id, str(arguments["query"]))
    if not found:
        return "nothing found"
    return "\n".join(memory_commands.line(m) for m in found[:memory_commands.MEMORY_SHOWN])


def _local(ctx: ToolContext, moment: datetime) -> str:
    name = zone_name(ctx.timezone) or "UTC"
    local = moment.astimezone(ZoneInfo(name))
    return f"{local:%Y-%m-%d %H:%M} ({local:%A}) {name}"


async def remind(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
    """A reminder for the person at a time (`at`: ISO 8601; without an offset, in their time zone) or in some
    minutes; delivered once, at that time, where they were last active (bot/reminders.py)."""
    text = str(arguments["text"]).strip()
    if not text:
        raise ToolError("the reminder's text is empty")
    at, minutes = arguments.get("at"), arguments.get("in_minutes")
    if (at is None) == (minutes is None):
        raise ToolError("give the time either as at or as in_minutes, one of them")
    if minutes is not None:
        due = ctx.now + timedelta(minutes=int(minutes))
    else:
        try:
            when = datetime.fromisoformat(str(at).strip())
        except ValueError:
            raise ToolError("at must be a date and time in ISO 8601, e.g. 2026-12-05T09:00") from None
        due = when.replace(tzinfo=ZoneInfo(zone_name(ctx.timezone) or "UTC")) if when.tzinfo is None else when
    if due <= ctx.now:
        raise ToolError(f"that time has passed: it is {_local(ctx, ctx.now)} now")
    if due - ctx.now > REMINDER_AHEAD:
        raise ToolError("a reminder can be at most a year ahead")
    added = await ctx.store.add_reminder(ctx.user_id, ctx.message_id, text, due.astimezone(UTC), REMINDERS_PENDING)
    if added is None:
        raise ToolError(f"the person has {REMINDERS_PENDING} pending reminders: cancel one first")
    said = f"reminder {added.short_id} set for {_local(ctx, due)}"
    return said if ctx.zone_known else said + " (the person's time zone is not known: UTC)"


async def list_reminders(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
    """The person's pending reminders, soonest first, with their ids."""
    found = await ctx.store.reminders(ctx.user_id)
    return "\n".join(f"{r.short_id}: {_local(ctx, r.due_at)}: {r.text}" for r in found) or "no pending reminders"


async def cancel_reminder(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
    """Cancel one of the person's pending reminders by its id (r12)."""
    named = str(arguments["reminder"]).strip().lower().removeprefix("r")
    cancelled = await ctx.store.cancel_reminder(ctx.user_id, int(named)) if named.isdigit() else None
    if cancelled is None:
        return f"no pending reminder {arguments['reminder']}"
    return f"cancelled {cancelled.short_id}: {cancelled.text}"


BUILTIN: dict[str, Tool] = {t.spec.name: t for t in (
    Tool(ToolSpec("now", "The current date, time and weekday in the person's time zone.", _object({}, [])),
         now, private=False),
    Tool(ToolSpec("remember", "Store a fact about the person for later conversations (one short sentence).",
                  _object({"fact": {"type": "string", "maxLength": FACT_CHARS,
                                    "description": "the fact, e.g. 'has a dog called Rufo'"}}, ["fact"])),
         remember),
    Tool(ToolSpec("forget", "Forget one of the person's stored memories, named by its id (m12) or by words.",
                  _object({"memory": {"type": "string", "maxLength": FACT_CHARS,
                                      "description": "the memory's id such as m12, or words it contains"}},
                          ["memory"])),
         forget),
    Tool(ToolSpec("search_memory", "Search the facts stored about the person; answers them with their ids.",
                  _object({"query": {"type": "string", "maxLength": FACT_CHARS,
                                     "description": "words to look for"}}, ["query"])),
         search_memory),
    Tool(ToolSpec("set_timezone", "Set the person's time zone when they say where they are (it is UTC until then).",
                  _object({"zone": {"type": "string", "maxLength": MAX_CHARS,
                                    "description": "a city (Madrid) or an IANA zone name (America/Bogota)"}},
                          ["zone"])),
         set_timezone),
    Tool(ToolSpec("remind", "Remind the person of something at a time: the reminder is sent to them then, once, "
                  "where they last wrote. Give the time as `at` or as `in_minutes`.",
                  _object({"text": {"type": "string", "maxLength": REMINDER_CHARS,
                                    "description": "what to remind them of, e.g. 'call the dentist'"},
                           "at": {"type": "string", "maxLength": 40,
                                  "description": "ISO 8601 date and time, e.g. 2026-12-05T09:00 (without an "
                                                 "offset: the person's time zone)"},
                           "in_minutes": {"type": "integer", "minimum": 1, "maximum": 527040,
                                          "description": "or: minutes from now"}}, ["text"])),
         remind),
    Tool(ToolSpec("list_reminders", "The person's pending reminders, with their ids (r12).", _object({}, [])),
         list_reminders),
    Tool(ToolSpec("cancel_reminder", "Cancel one of the person's pending reminders by its id.",
                  _object({"reminder": {"type": "string", "maxLength": 24, "description": "its id, e.g. r12"}},
                          ["reminder"])),
         cancel_reminder),
)}


def registry(names: tuple[str, ...], *, timeout: float, extra: Iterable[Tool] = ()) -> Registry:
    """The registry of the built-in tools named (HILO_TOOLS; bot/config_tools.py has checked the names), and
    `extra` tools (the operator's: bot/tools/http_tool.py)."""
    return Registry([*(BUILTIN[n] for n in names), *extra], timeout=timeout)
