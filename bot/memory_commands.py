"""What a person says about their memories: /remember TEXT, /memory (with short ids), /forget <id or words>.

Used by bot/commands.py (every surface: Telegram, WhatsApp, the web widget, `hilo chat`), `hilo memory` / `hilo
forget --memory` (bot/cli.py) and the widget's "what I remember" view (surfaces/web_memories.py). A memory is
named by its short id, "m12" (kernel.types.Memory.short_id); "12" is read the same way.

/forget <words>: the memories the words name best (Store.find_memories): one is forgotten; several that are too
close to choose between are listed with their ids, and the person sends /forget with the right one; none: said so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from bot.erasures import Erasures, forget_memory
from kernel import catalog, tokens
from kernel.types import Memory, MemoryDraft
from memory.store import Store

#: At most this many memories are listed by /memory (the newest); the rest are counted.
MEMORY_SHOWN = 30
_SHORT_ID = re.compile(r"m?(\d{1,18})", re.IGNORECASE)


def parse_id(text: str) -> int | None:
    """"m12" or "12" -> 12; anything else None."""
    m = _SHORT_ID.fullmatch(text.strip())
    return int(m.group(1)) if m else None


def memory_json(m: Memory) -> dict[str, Any]:
    """A memory as `hilo memory --json` and the widget's GET /api/memories show it (no terms, no vector)."""
    def when(moment: Any) -> str | None:
        return moment.isoformat() if moment is not None else None

    return {
        "id": m.short_id, "kind": m.kind, "key": m.key, "content": m.content, "source": m.source,
        "confidence": m.confidence, "importance": m.importance, "source_external_ids": list(m.source_external_ids),
        "created_at": when(m.created_at), "updated_at": when(m.updated_at),
        "last_accessed_at": when(m.last_accessed_at), "access_count": m.access_count,
        "expires_at": when(m.expires_at), "ended_at": when(m.ended_at),
        "superseded_by": f"m{m.superseded_by}" if m.superseded_by is not None else None,
    }


def line(m: Memory) -> str:
    return f"- {m.short_id}: {m.content}"


def listing(memories: Sequence[Memory], lang: str) -> str | None:
    """The newest MEMORY_SHOWN memories as lines with their ids, the rest counted; None when there are none."""
    if not memories:
        return None
    shown = memories[:MEMORY_SHOWN]
    text = catalog.t("cmd_memory_facts", lang, facts="\n".join(line(m) for m in shown))
    if len(memories) > len(shown):
        text += "\n" + catalog.t("cmd_memory_more", lang, count=len(memories) - len(shown))
    return text + "\n" + catalog.t("cmd_memory_id", lang, id=shown[0].short_id)


async def remember(store: Store, user_id: int, text: str, lang: str) -> str:
    """Store what the person stated (confidence 1.0) and say what happened."""
    if not text.strip():
        return catalog.t("cmd_remember_usage", lang)
    added = await store.add_memory(user_id, MemoryDraft(text.strip(), token_count=tokens.count(text.strip())))
    if added.outcome == "superseded" and added.previous is not None:
        return catalog.t("cmd_remember_superseded", lang, id=added.memory.short_id, old=added.previous.short_id)
    key = "cmd_remember_merged" if added.outcome == "merged" else "cmd_remember_added"
    return catalog.t(key, lang, id=added.memory.short_id)


async def named(store: Store, user_id: int, what: str) -> tuple[int | None, list[Memory]]:
    """What `what` names of the person's memories: (its short id, [that memory] or []) for an id, else (None,
    the memories its words name best: one, several too close to choose between, or none). /forget and the
    model's `forget` tool (bot/tools/builtin.py) read it the same way."""
    memory_id = parse_id(what)
    if memory_id is not None:
        found = await store.memory(user_id, memory_id)
        return memory_id, [found] if found is not None else []
    return None, await store.find_memories(user_id, what)


async def forget_one(store: Store, user_id: int | None, what: str, lang: str, erasures: Erasures | None = None) -> str:
    """Forget the memory `what` names: a short id, or words (see the module docstring); noted in `erasures` first
    (bot/erasures.py; ErasureNotKept: nothing forgotten)."""
    memory_id, matches = await named(store, user_id, what) if user_id is not None else (parse_id(what), [])
    if memory_id is not None:
        found = matches[0] if matches else None
        if found is None or not await forget_memory(store, erasures, found.user_id, found.id):
            return catalog.t("cmd_forget_no_id", lang, id=f"m{memory_id}")
        return catalog.t("cmd_forget_one_done", lang, id=found.short_id, content=found.content)
    if not matches:
        return catalog.t("cmd_forget_no_match", lang)
    if len(matches) > 1:
        return catalog.t("cmd_forget_which", lang, items="\n".join(line(m) for m in matches[:MEMORY_SHOWN]))
    [only] = matches
    await forget_memory(store, erasures, only.user_id, only.id)
    return catalog.t("cmd_forget_one_done", lang, id=only.short_id, content=only.content)
