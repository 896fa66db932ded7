"""Tool calls and tool results as stored messages of their turn, and back as the model's input.

Stored (finish_turn, with the reply, in its transaction): the model's calls as an "assistant" message (its text,
often empty) with `metadata["tool_calls"]` = [{"id", "name", "arguments"}], each result as a "tool" message with
`metadata` {"tool_call_id", "tool_name", "tool_error"}; both with `reply_to` the person's message, so they sort in
its exchange, between the message and the reply.

Read back (context assembly): the conversation's last exchanges keep them in full (the calls, and each result
paired with its call, in the providers' formats); older exchanges keep a compact form: no call message (its text,
if any, stays), each result one line `name(arguments) -> result`, both cut to COMPACT_CHARS, as data.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from kernel.types import ChatMessage, Role, StoredMessage, ToolCall

#: How much of a call's arguments and of its result an older exchange keeps.
COMPACT_CHARS = 200
_ROLES: dict[str, Role] = {"user": "user", "assistant": "assistant", "system": "system"}
#: The ChatMessage of a plain stored message (neither a tool call nor a result: the same in full and compact), by
#: (message id, block), with the message it was built from: a conversation's messages are each built once, not at
#: every turn (py-spy of a web turn at c=1: building them was 13% of the event loop's time). The SQLite store's
#: windows hand each turn the very objects the turn before had (memory/windows.py); Postgres, and SQLite when the
#: window was not kept, read them anew: an entry serves a message read again when what the ChatMessage is made of
#: (role, content, tokens, metadata) is the same (`_same`), so a row with the same id and other text (another
#: database in the same process) is built anew. Oldest out first beyond PLAIN_KEPT. As many as the windows hold
#: (16 MB: ~25,000 chat lines), about 350 bytes each besides the text they share: 4,096 missed every time once 64
#: visitors' conversations passed 90 turns (a web load at c=1 with 32,768: +15% req/s there).
PLAIN_KEPT = 32_768
_plain: OrderedDict[tuple[int, str], tuple[StoredMessage, ChatMessage]] = OrderedDict()


def _same(kept: StoredMessage, m: StoredMessage) -> bool:
    return kept is m or (kept.content == m.content and kept.role == m.role and kept.token_count == m.token_count
                         and kept.metadata == m.metadata)


def stored_form(m: ChatMessage) -> tuple[str, str, dict[str, Any]]:
    """(role, content, metadata) of a tool call or result message, as finish_turn stores it."""
    if m.role == "tool":
        return "tool", m.content, {"tool_call_id": m.tool_call_id, "tool_name": m.tool_name,
                                   "tool_error": m.tool_error}
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls]
    return "assistant", m.content, {"tool_calls": calls}


def calls_of(m: StoredMessage) -> tuple[ToolCall, ...]:
    """The tool calls a stored assistant message made (none for an ordinary reply)."""
    raw = m.metadata.get("tool_calls") if m.role == "assistant" else None
    if not isinstance(raw, list):
        return ()
    return tuple(ToolCall(str(c.get("id", "")), str(c.get("name", "")), dict(c.get("arguments") or {}))
                 for c in raw if isinstance(c, dict))


def is_tool_message(m: StoredMessage) -> bool:
    """A tool result, or the model's message that made tool calls (its text, if any, was withdrawn from the person:
    the reply comes after): what the model keeps of its turn, not what the person reads."""
    return m.role == "tool" or bool(calls_of(m))


def _cut(text: str) -> str:
    return text if len(text) <= COMPACT_CHARS else text[:COMPACT_CHARS - 1] + "…"


def chat_messages(messages: Sequence[StoredMessage], *, full: bool, block: str) -> list[ChatMessage]:
    """`messages` (a run of the conversation, oldest first) as the model's input: tool use in full or compact."""
    out: list[ChatMessage] = []
    paired: dict[str, ToolCall] = {}  # calls seen in this run: a result is sent in full only after its call
    for m in messages:
        kept = _plain.get((m.id, block))
        if kept is not None and _same(kept[0], m):
            out.append(kept[1])
            continue
        calls = calls_of(m)
        if calls:
            paired.update((c.id, c) for c in calls)
            if full:
                out.append(ChatMessage("assistant", m.content, block=block, tokens=m.token_count, tool_calls=calls))
            elif m.content.strip():
                out.append(ChatMessage("assistant", m.content, block=block, tokens=m.token_count))
            continue
        if m.role == "tool":
            call_id = str(m.metadata.get("tool_call_id") or "")
            call = paired.get(call_id)
            name = str(m.metadata.get("tool_name") or "tool")
            if full and call is not None:
                out.append(ChatMessage("tool", m.content, block=block, tokens=m.token_count, tool_call_id=call_id,
                                       tool_name=name, tool_error=bool(m.metadata.get("tool_error"))))
            else:
                arguments = json.dumps(call.arguments, ensure_ascii=False) if call is not None else ""
                out.append(ChatMessage("tool", f"{name}({_cut(arguments)}) -> {_cut(m.content)}", block=block,
                                       tokens=m.token_count))
            continue
        chat = ChatMessage(_ROLES.get(m.role, "user"), m.content, block=block, tokens=m.token_count)
        if len(_plain) >= PLAIN_KEPT:
            _plain.popitem(last=False)
        _plain[m.id, block] = (m, chat)
        out.append(chat)
    return out
