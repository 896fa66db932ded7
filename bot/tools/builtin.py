"""The built-in tools, chosen with HILO_TOOLS (bot/config.py): `now`, `remember`, `forget`, `search_memory`,
`set_timezone`.

Each reads and writes only the turn's person (ToolContext.user_id, from the pipeline): the memories store is the
one /remember, /memory and /forget use (bot/memory_commands.py), so what the model remembers the person can list
and forget, and the other way round. Results are short plain text for the model, in English (the model answers the
person in their language).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC
from typing import Any
from zoneinfo import ZoneInfo

from bot import memory_commands
from bot.tools.registry import Registry, Tool, ToolContext, ToolError
from kernel.types import MemoryDraft, ToolSpec
from kernel.zones import MAX_CHARS, find_zone, zone_name

#: The longest fact the model may store in one call (a memory is a sentence, not a document).
FACT_CHARS = 500


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
    if not await ctx.store.forget_memory(ctx.user_id, found.id):
        return f"no memory {found.short_id}"
    return f"forgotten {found.short_id}: {found.content}"


async def search_memory(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
    """The person's current memories the words name best, with their ids."""
    found = await ctx.store.find_memories(ctx.user_id, str(arguments["query"]))
    if not found:
        return "nothing found"
    return "\n".join(memory_commands.line(m) for m in found[:memory_commands.MEMORY_SHOWN])


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
)}


def registry(names: tuple[str, ...], *, timeout: float, extra: Iterable[Tool] = ()) -> Registry:
    """The registry of the built-in tools named (HILO_TOOLS; bot/config_tools.py has checked the names), and
    `extra` tools (the operator's: bot/tools/http_tool.py)."""
    return Registry([*(BUILTIN[n] for n in names), *extra], timeout=timeout)
