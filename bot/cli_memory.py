"""`hilo memory --user U [--all] [--json]` and `hilo forget --user U --memory ID` (bot/cli.py parses them)."""

from __future__ import annotations

import json
import sys
from typing import Any

from bot.erasures import Erasures
from bot.erasures import forget_memory as forget_noted
from bot.memory_commands import memory_json, parse_id
from kernel.errors import ConfigError


async def show_memories(store: Any, handle: str, include_ended: bool, as_json: bool) -> int:
    """What hilo remembers about `handle`, newest first: one line each, or a JSON list (memory_json)."""
    user_id = await store.user_id(handle)
    found = await store.memories(user_id, include_ended=include_ended) if user_id is not None else []
    if as_json:
        print(json.dumps([memory_json(m) for m in found], ensure_ascii=False, indent=2))
        return 0
    for m in found:
        ended = f" [ended {m.ended_at:%Y-%m-%d}]" if m.ended_at else ""
        print(f"{m.short_id:<8} {m.kind:<12} {m.source:<8} {m.confidence:.1f} {m.content}{ended}")
    print(f"{len(found)} memories of {handle}" if user_id is not None else f"nothing is stored about {handle}")
    return 0


async def forget_memory(store: Any, handle: str, ref: str, erasures: Erasures | None = None) -> int:
    """One memory of `handle` (ref: m12 or 12), not the person; noted in `erasures` first (bot/erasures.py)."""
    memory_id = parse_id(ref)
    if memory_id is None:
        raise ConfigError(f"--memory {ref!r} is not a memory id: give one as `hilo memory` lists it, e.g. m12")
    user_id = await store.user_id(handle)
    if user_id is None or not await forget_noted(store, erasures, user_id, memory_id):
        print(f"hilo: {handle} has no memory m{memory_id}: see `hilo memory --user {handle}`", file=sys.stderr)
        return 1
    print(f"forgot m{memory_id} of {handle}")
    return 0
