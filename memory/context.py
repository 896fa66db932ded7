"""Context assembly: a priority window under a token budget (docs/architecture.md, "Context assembly").

`assemble` is a pure function of the rows `Store.load_context` gathered: no I/O, and no stored message is
re-tokenized (their cached `token_count` is used; only fixed header and label text is counted).

Blocks, in the order the model reads them:
1. system         the system prompt, always;
2. memory         memories (ranked by memory/memory_score.py), then recalled messages as episodes (data,
                  not instructions): the facts one system message, the recalled messages another (without
                  the block's header, which the first one carries);
3. cross_surface  the person's latest messages on other surfaces, oldest first, one system message;
4. conversation   the current conversation: the last 2 exchanges always, then older exchanges the pool chose;
                  tool calls and results ride with their exchange: in full in the last 2, compact in older ones
                  (memory/tool_rows.py);
5. new_message    the message being answered, always, last.

Budget, in the order it is spent:
- `avail` = budget - system - new message. If negative, `over_budget` is set, the total exceeds the
  budget and every other block is empty: the system prompt and the new message are never dropped.
- The last two exchanges of the conversation are reserved first (when even they do not fit, the newest
  of their messages that fit, contiguous).
- The cross-surface window: its newest messages, contiguous, up to its cap (`shares.cross_surface * avail`,
  and what the reservation left).
- Everything else is ONE ranked pool (memory/context_pool.py): facts, recalled messages and older exchanges
  of the conversation compete for the rest, greedy in score order, skipping what does not fit; older exchanges
  only behind a complete reservation, whole and contiguous. No fixed share: the pool spends the whole rest
  while a candidate that fits remains.
So tokens["total"] == sum of item tokens + block and episode headers <= budget, unless over_budget.
Prompt caching: the system prompt and the facts change seldom, everything after them with every question; the
message that ends that stable prefix carries `cache_break` (the facts' message, else the system prompt's), where
the Anthropic provider puts its cache_control; OpenAI caches a repeated prefix by itself.
Rendering (memory/context_render.py): one header line per episode (date, how long ago, surface), then
`- me: "..."` / `- you: "..."` per turn, every content quoted on its own line.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kernel.tokens import MESSAGE_OVERHEAD
from kernel.types import ChatMessage
from memory import context_pool
from memory.context_pool import Pool, message_cost, recall_limit
from memory.context_render import (
    CROSS_SURFACE_HEADER,
    MEMORY_HEADER,
    Timeline,
    fixed_tokens,
    header_tokens,
    render_block,
    render_text,
    turn_line,
)
from memory.memory_score import MemoryWeights, score_memories
from memory.store import ContextRows, StoredMessage
from memory.tool_rows import chat_messages, is_tool_message

__all__ = ["AssembledContext", "BlockShares", "ContextItem", "assemble", "recall_limit", "render_text"]

BLOCKS = ("system", "memory", "cross_surface", "conversation", "new_message")


@dataclass(frozen=True, slots=True)
class BlockShares:
    """The cap of the cross-surface window, as a fraction of the budget left after system + new message.
    Memory has no share: it competes in the pool for whatever the always-kept parts and this window left."""

    cross_surface: float = 0.20

    def __post_init__(self) -> None:
        if not 0 <= self.cross_surface <= 1:
            raise ValueError(f"the cross-surface share must be in [0, 1], got {self}")


@dataclass(frozen=True, slots=True)
class ContextItem:
    """One item of the window. `preview` is for the printout only and is not part of the JSON.
    `scores`: how the pool ranked it ({"pool": s}; a recalled message also carries its retrieval components:
    "bm25", "lexical", "episode", "neighbour", "date", "fused", memory/retrieval.py); empty for what is always
    kept and the cross-surface window."""

    block: str
    kind: str
    tokens: int
    message_id: int | None = None
    external_id: str | None = None
    surface: str | None = None
    created_at: datetime | None = None
    source_external_ids: tuple[str, ...] = ()
    preview: str = ""
    scores: Mapping[str, float] = field(default_factory=dict)
    #: A memory's id (an item of kind "fact" is a memory of any kind: fact, preference, event...).
    memory_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "block": self.block,
            "kind": self.kind,
            "tokens": self.tokens,
            "message_id": self.message_id,
            "external_id": self.external_id,
            "surface": self.surface,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "source_external_ids": list(self.source_external_ids),
            "scores": dict(self.scores),
            "memory_id": self.memory_id,
        }


#: A message's item as assembly leaves it: (block, kind, message, cost, pool score, retrieval components). A turn
#: never reads the items of the hundreds of messages it sends (`hilo context` does): each is built when `items` is
#: first read (0.58 of assembly's 2.16 ms p50 at 1,000 people x 1,000 messages went to building them).
_Pending = tuple[str, str, StoredMessage, int, "float | None", "Mapping[str, float] | None"]


def _item(part: ContextItem | _Pending) -> ContextItem:
    if isinstance(part, ContextItem):
        return part
    block, kind, m, cost, score, components = part
    scores = {**(components or {}), "pool": score} if score is not None else {}
    return ContextItem(block, kind, cost, m.id, m.external_id, m.surface, m.created_at, _sources(m), m.content,
                       scores)


@dataclass(frozen=True)
class AssembledContext:
    """The model's input and how it was spent.

    messages: what the provider sends, in order (each ChatMessage names its block).
    items: one per system prompt, fact, recalled/cross-surface/conversation message and new message (built from
        `parts` when first read).
    tokens: {"total", "budget", "system", "memory", "cross_surface", "conversation", "new_message"}; a
        block's tokens are its items' plus its header (memory, cross_surface); total is their sum.
    over_budget: system prompt + new message alone exceed the budget (total > budget, other blocks empty).
    """

    messages: list[ChatMessage]
    tokens: dict[str, int]
    over_budget: bool = False
    parts: tuple[ContextItem | _Pending, ...] = ()

    @functools.cached_property
    def items(self) -> list[ContextItem]:
        return [_item(p) for p in self.parts]

    def memory_ids(self) -> list[int]:
        """The memories this context carries (their use is counted when the turn is kept: Store.finish_turn)."""
        return [p.memory_id for p in self.parts if isinstance(p, ContextItem) and p.memory_id is not None]

    def recalled_tokens(self) -> int:
        """What the recalled messages of the memory block cost (their lines and what they add to its headers)."""
        return sum(p[3] for p in self.parts if not isinstance(p, ContextItem) and p[1] == "recalled_message")

    def header_tokens(self) -> dict[str, int]:
        """Per block, the tokens not carried by an item (the data blocks' headers)."""
        return {b: self.tokens[b] - sum(i.tokens for i in self.items if i.block == b) for b in BLOCKS}

    def to_json(self) -> dict[str, Any]:
        """The `hilo context --json` object."""
        return {
            "messages": [{"role": m.role, "content": m.content} for m in self.messages],
            "items": [item.to_json() for item in self.items],
            "tokens": dict(self.tokens),
        }


@dataclass(slots=True)
class _Block:
    items: list[ContextItem | _Pending] = field(default_factory=list)
    messages: list[ChatMessage] = field(default_factory=list)
    tokens: int = 0


def assemble(
    rows: ContextRows,
    *,
    system_prompt: str,
    new_text: str,
    new_tokens: int,
    budget: int,
    surface: str,
    shares: BlockShares | None = None,
    now: datetime | None = None,
    memory_weights: MemoryWeights | None = None,
) -> AssembledContext:
    """Fit `rows` into `budget` tokens by block priority (see the module docstring for the rules).

    new_tokens: the cached token count of `new_text`. surface: the surface of the new message (messages
    of that surface never count as cross-surface). now: the time of the turn; when given, data lines say
    how long ago each message was, and the new message's item carries it as created_at. memory_weights: how
    memories are scored (memory/memory_score.py; the defaults when None).
    """
    shares = shares or BlockShares()
    system_cost = fixed_tokens(system_prompt) + MESSAGE_OVERHEAD
    system = _Block([ContextItem("system", "system_prompt", system_cost, preview=system_prompt)],
                    [ChatMessage("system", system_prompt, block="system")], system_cost)
    new_cost = new_tokens + MESSAGE_OVERHEAD
    new = _Block([ContextItem("new_message", "new_message", new_cost, surface=surface, created_at=now,
                              preview=new_text)],
                 [ChatMessage("user", new_text, block="new_message", tokens=new_tokens)], new_cost)
    avail = budget - system.tokens - new.tokens
    if avail < 0:
        return _build(budget, system, _Block(), _Block(), _Block(), new, over_budget=True)

    exchanges = _exchanges(rows.conversation)
    reserved = [m for exchange in exchanges[-2:] for m in exchange]
    kept = _newest_that_fit(reserved, avail)
    rest = avail - message_cost(kept)

    conversation_ids = {m.id for m in rows.conversation}
    cross = _cross_surface(rows.cross_surface, conversation_ids, surface,
                           min(int(avail * shares.cross_surface), rest), now)
    rest -= cross.tokens

    # A cross-surface message the window had no room for may still be recalled: it competes in the pool.
    seen = (conversation_ids | {p[2].id for p in cross.items if not isinstance(p, ContextItem)}
            if rows.recalled else set())
    recalled: list[StoredMessage] = []
    for m in rows.recalled:
        if m.id not in seen:
            seen.add(m.id)
            recalled.append(m)
    # Older exchanges only behind a complete reservation: the conversation never has a gap.
    older = list(reversed(exchanges[:-2])) if len(kept) == len(reserved) else []
    fact_scores = score_memories(rows.facts, new_text, now or datetime.now(UTC), memory_weights,
                                 rows.memory_cosines)
    pool = context_pool.fill(rows.facts, recalled, older, rest, now, fact_scores, rows.recall_scores)
    conversation = _conversation([m for exchange, _ in pool.older for m in exchange], kept, pool)
    memory = _memory(pool, rows.recall_scores)
    if not pool.facts:  # the stable prefix is the system prompt alone
        system.messages = [ChatMessage("system", system_prompt, block="system", cache_break=True)]
    return _build(budget, system, memory, cross, conversation, new, over_budget=False)


def _exchanges(messages: Sequence[StoredMessage]) -> list[list[StoredMessage]]:
    """Group a conversation into exchanges: a user message and everything after it up to the next one
    (replies, tool calls, tool results). Messages before the first user message form their own group."""
    groups: list[list[StoredMessage]] = []
    for m in messages:
        if m.role == "user" or not groups:
            groups.append([m])
        else:
            groups[-1].append(m)
    return groups


def _newest_that_fit(messages: list[StoredMessage], limit: int) -> list[StoredMessage]:
    """The longest suffix of `messages` whose cost fits in `limit`."""
    spent, start = 0, len(messages)
    while start > 0 and spent + messages[start - 1].token_count + MESSAGE_OVERHEAD <= limit:
        start -= 1
        spent += messages[start].token_count + MESSAGE_OVERHEAD
    return messages[start:]


def _sources(m: StoredMessage) -> tuple[str, ...]:
    # A summary of several messages names them in metadata; an ordinary message has none.
    sources = m.metadata.get("source_external_ids") or ()
    return tuple(str(s) for s in sources) if isinstance(sources, (list, tuple)) else ()


def _message_item(block: str, kind: str, m: StoredMessage, cost: int, score: float | None = None,
                  components: Mapping[str, float] | None = None) -> _Pending:
    return (block, kind, m, cost, score, components)


def _memory(pool: Pool, recall_scores: Mapping[int, Mapping[str, float]]) -> _Block:
    """Facts (as stored), then the recalled messages as a timeline of episodes: chosen by rank, shown by date,
    so a question and its answer end up next to each other."""
    if not pool.memory_tokens:
        return _Block()
    items: list[ContextItem | _Pending] = []
    for p in pool.facts:
        assert p.fact is not None
        f = p.fact
        items.append(ContextItem("memory", "fact", p.cost, created_at=f.created_at,
                                 source_external_ids=f.source_external_ids, preview=f.content,
                                 scores={"pool": p.score, **(p.parts or {})}, memory_id=f.id))
    facts = [p.line for p in pool.facts]
    lines: list[str] = []
    for header, p in pool.recalled.rendered():
        assert p.message is not None
        lines += [header, p.line] if header else [p.line]
        items.append(_message_item("memory", "recalled_message", p.message, p.cost, p.score,
                                   recall_scores.get(p.message.id, {})))
    # The facts first, in a message of their own that ends the stable prefix (cache_break): they change seldom,
    # the recalled messages with every question (context_pool: the second message's overhead is paid)
    messages = [ChatMessage("system", render_block(MEMORY_HEADER, facts), block="memory", cache_break=True)]
    if facts and lines:
        messages.append(ChatMessage("system", "\n".join(lines), block="memory"))
    elif lines:
        messages = [ChatMessage("system", render_block(MEMORY_HEADER, lines), block="memory")]
    return _Block(items, messages, pool.memory_tokens)


def _cross_surface(messages: Sequence[StoredMessage], exclude: set[int], surface: str, cap: int,
                   now: datetime | None) -> _Block:
    """The newest messages of other surfaces that fit (contiguous: a window, not a sample), oldest first."""
    if not messages:
        return _Block()
    spent = header_tokens(CROSS_SURFACE_HEADER)
    seen = set(exclude)
    timeline: Timeline[tuple[str, _Pending]] = Timeline(now)
    for m in sorted(messages, key=lambda m: (m.created_at, m.id), reverse=True):
        if m.id in seen or m.surface == surface or is_tool_message(m):  # tool use stays in its conversation
            continue
        seen.add(m.id)
        line, cost = turn_line(m.role, m.content, m.token_count)
        headers = timeline.header_delta(m)
        if spent + cost + headers > cap:
            break
        spent += cost + headers
        timeline.add(m, (line, _message_item("cross_surface", "cross_surface_message", m, cost)))
    if not len(timeline):
        return _Block()
    lines: list[str] = []
    items: list[ContextItem | _Pending] = []
    for header, (line, item) in timeline.rendered():
        lines += [header, line] if header else [line]
        items.append(item)
    return _Block(items, [ChatMessage("system", render_block(CROSS_SURFACE_HEADER, lines),
                                      block="cross_surface")], spent)


def _conversation(older: list[StoredMessage], kept: list[StoredMessage], pool: Pool) -> _Block:
    scores = {m.id: score for exchange, score in pool.older for m in exchange} if older else {}
    messages = [*older, *kept]
    items: list[ContextItem | _Pending] = [
        _message_item("conversation", "message", m, m.token_count + MESSAGE_OVERHEAD, scores.get(m.id))
        for m in messages]
    chat = [*chat_messages(older, full=False, block="conversation"),
            *chat_messages(kept, full=True, block="conversation")]
    return _Block(items, chat, sum(m.token_count for m in messages) + MESSAGE_OVERHEAD * len(messages))


def _build(budget: int, system: _Block, memory: _Block, cross: _Block, conversation: _Block, new: _Block,
           *, over_budget: bool) -> AssembledContext:
    blocks = dict(zip(BLOCKS, (system, memory, cross, conversation, new), strict=True))
    counts = {name: b.tokens for name, b in blocks.items()}
    return AssembledContext(
        messages=[m for b in blocks.values() for m in b.messages],
        tokens={"total": sum(counts.values()), "budget": budget, **counts},
        over_budget=over_budget,
        parts=tuple(i for b in blocks.values() for i in b.items),
    )
