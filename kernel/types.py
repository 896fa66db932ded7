"""The data that crosses module boundaries: what a surface hands in, what the pipeline hands back, and the
store's records a surface names (StoredMessage, Ingested, Delivery; memory.store re-exports them).

Every surface normalizes its raw input once, at the edge, into one frozen `InboundMessage`; platform extras
ride in `metadata`. Nothing past the surface knows what a Telegram update or a Twilio form looks like.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from kernel.text import has_nul, without_nul, without_nul_in

Role = Literal["system", "user", "assistant", "tool"]
#: What an answer that arrived amounts to (bot.models.base.outcome_of); model_calls.outcome records it, and the
#: failed calls' outcomes ("rate_limited", "server_error", "timeout", "connection", "error", "circuit_open").
AnswerOutcome = Literal["ok", "refused", "cut", "tool_calls", "empty"]
SURFACES = ("cli", "web", "telegram", "whatsapp")
#: Surfaces whose person has exactly one conversation with hilo (a chat, a phone number, a terminal).
SINGLETON_SURFACES = frozenset({"cli", "telegram", "whatsapp"})


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """One message from a person, as every surface hands it to the pipeline.

    surface: "cli" | "web" | "telegram" | "whatsapp".
    sender: the person's id on that surface (Telegram user id, WhatsApp number, web visitor id, CLI handle).
    external_id: the surface's id of this message; (surface, external_id) is unique, so redeliveries drop.
    conversation_ref: on the web, the conversation id (None starts a new one); on singleton surfaces, None
        for the person's one conversation there, or the name of a shared place (a Telegram group,
        "group:-100123") for the person's own conversation in it.
    metadata: platform extras. `audience: "group"` marks a message read by others too: its context holds
        only that conversation (never the person's memory or other surfaces).
    handle: when set, the message belongs to the user with this handle (CLI, import) instead of the
        identity (surface, sender).

    `text` and `metadata` come out without NUL characters: they are dropped here, for every surface, because
    Postgres cannot store them; the rest of the text stays.
    """

    surface: str
    sender: str
    external_id: str
    text: str
    received_at: datetime = field(default_factory=utcnow)
    conversation_ref: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    handle: str | None = None
    language: str | None = None
    #: the caller's address on the web (rate limits, link-code lockouts); never stored
    client_ip: str | None = None
    #: photos the model sees with this message, on its own turn only (bot/vision.py sets them once downloaded);
    #: never stored (the message keeps a reference and, once the model described it, the description)
    images: tuple[ImagePart, ...] = ()

    def __post_init__(self) -> None:
        # Every surface's input passes here once: a NUL (which Postgres cannot store, in text or jsonb) goes,
        # the rest stays. Checked before anything is copied: almost no message holds one. Ids are not
        # altered (two ids must never become one): each surface refuses an id it cannot store.
        if "\x00" in self.text:
            object.__setattr__(self, "text", without_nul(self.text))
        if has_nul(self.metadata):
            object.__setattr__(self, "metadata", without_nul_in(self.metadata))


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    """What the pipeline hands back to the surface to deliver.

    status: "ok" (a model answered; `metadata["outcome"]` says how: "ok", "refused", "cut", "tool_calls" or
    "empty", and `text` is never empty: see bot.answers), "failed" (every model failed: `text` is the localized
    apology and the person's message is stored), "duplicate" (a redelivery: nothing to send), "command" (a
    command such as /link was answered: nothing was stored as a message, no model was called).
    `metadata["queued"]` is True when the reply (or apology) was queued in the outbox with it (bot/outbox.py):
    the surface then sends nothing itself.
    """

    surface: str
    recipient: str
    text: str
    status: Literal["ok", "failed", "duplicate", "command"]
    conversation_id: int | None = None
    user_id: int | None = None
    message_id: int | None = None
    reply_id: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model asked for: the provider's call id, the tool's name and its arguments (a JSON object)."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True, slots=True)
class ImagePart:
    """A photo sent to a model beside a message's text: its MIME type (image/jpeg, image/png, image/webp,
    image/gif) and bytes. Providers send it in their own format (base64); it is never logged nor stored here."""

    mime: str
    data: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as models are offered it: a name (letters, digits, `_`), what it does, and its arguments' JSON
    schema (an object schema)."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of the model's input. `block` names the context block it came from (providers ignore it);
    `tokens`, the content's tokens when the assembler knows them already (a stored message's count), else None.
    `cache_break`: the context's stable prefix (the system prompt, the person's facts) ends with this message:
    a provider that caches prompts on request marks it there (Anthropic's cache_control).
    Tool use (bot/tools): an assistant message carries the `tool_calls` it made; a "tool" message is one call's
    result, paired with it by `tool_call_id` (`tool_error`: the tool failed and `content` says how). A "tool"
    message without a `tool_call_id` is a compact result of an older exchange: providers send it as data."""

    role: Role
    content: str
    block: str = ""
    tokens: int | None = field(default=None, compare=False)
    cache_break: bool = field(default=False, compare=False)
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    tool_name: str = ""
    tool_error: bool = False
    #: photos sent with this (user) message: the new message of a turn a photo arrived on (bot/vision.py)
    images: tuple[ImagePart, ...] = ()


@dataclass(frozen=True, slots=True)
class ModelCallRecord:
    """One call to one model: a row of model_calls."""

    model: str
    provider: str
    tokens_in: int
    tokens_out: int
    latency_ms: int
    outcome: str  # an AnswerOutcome, or "rate_limited" | "server_error" | "timeout" | "connection" | "error" |
    #               "circuit_open" for a call that failed
    fallback_from: str | None = None
    error: str | None = None
    #: what the call cost in USD (bot/prices.py's table; 0 for a failed or skipped call, an unpriced model)
    cost_usd: float = 0.0
    #: of tokens_in, those the provider read from its prompt cache (billed at its cached-input price)
    tokens_cached: int = 0
    #: the HILO_MODEL_ROUTES rule that chose the call's chain (None: the default chain, HILO_MODEL)
    route: str | None = None


@dataclass(frozen=True, slots=True)
class StoredMessage:
    id: int
    conversation_id: int
    user_id: int
    surface: str
    role: str
    content: str
    token_count: int
    external_id: str | None
    created_at: datetime
    metadata: dict[str, Any] = field(default_factory=dict)
    #: For an assistant message, the id of the user message it answers.
    reply_to: int | None = None


@dataclass(frozen=True, slots=True)
class Ingested:
    """What `ingest` did: the user, the conversation and the stored message of this turn."""

    user_id: int
    handle: str
    conversation_id: int
    message: StoredMessage
    created_user: bool = False
    #: A redelivery of a message whose turn never ran (the process died before calling the model).
    resumed: bool = False


@dataclass(frozen=True, slots=True)
class Delivery:
    """One part of a reply as sent to a surface. status: "sent" | "failed" (and later provider statuses)."""

    user_id: int
    message_id: int | None
    surface: str
    recipient: str
    status: str
    part: int = 1
    parts: int = 1
    provider_ref: str | None = None
    error: str | None = None
    attempts: int = 1



@dataclass(frozen=True, slots=True)
class Outgoing:
    """What a turn's reply is to be sent as, queued in the outbox inside finish_turn's transaction: the
    surface, the recipient on it (a chat id, a phone number), the parts in order, and the provider's message
    id the first part answers (Telegram groups) or None."""

    surface: str
    recipient: str
    parts: tuple[str, ...]
    reply_to: str | None = None
    #: an approved WhatsApp template's Content SID: the part is sent as that template, its text the variable
    #: {{1}} (a reminder outside the 24-hour window); None: free-form text
    template: str | None = None


@dataclass(frozen=True, slots=True)
class OutboxItem:
    """One queued part (a `deliveries` row of status pending/sending) as the outbox sender claimed it.
    `attempts` counts the sends tried so far, this one included."""

    id: int
    user_id: int
    message_id: int | None
    surface: str
    recipient: str
    part: int
    parts: int
    text: str
    reply_to: str | None
    attempts: int
    template: str | None = None

#: The kinds of memory (a closed set: the `memories.kind` CHECK of migration 0016 lists the same).
MEMORY_KINDS = ("fact", "preference", "event", "plan", "relationship")
#: Where a memory came from, and the confidence each source gets unless told otherwise: stated by the person
#: (`/remember`, `hilo remember`, the widget) 1.0; inferred by the model (extraction) 0.7; observed 0.5.
SOURCE_CONFIDENCE = {"stated": 1.0, "inferred": 0.7, "observed": 0.5}


@dataclass(frozen=True, slots=True)
class Memory:
    """Something hilo knows about a person (a row of `memories`). `short_id` ("m12") is how people name it.

    key: an optional slot ("employer", "city"): a newer memory of the same kind and key supersedes this one.
    terms: its index terms (lexical matching: merge, /forget by words, relevance to a new message).
    ended_at: superseded (then `superseded_by` names the newer memory) or expired: kept, never in the context.
    """

    id: int
    user_id: int
    kind: str
    key: str | None
    content: str
    token_count: int
    terms: tuple[str, ...]
    importance: float
    confidence: float
    source: str
    source_message_ids: tuple[int, ...]
    source_external_ids: tuple[str, ...]
    created_at: datetime
    updated_at: datetime
    last_accessed_at: datetime | None = None
    access_count: int = 0
    expires_at: datetime | None = None
    ended_at: datetime | None = None
    superseded_by: int | None = None

    @property
    def short_id(self) -> str:
        return f"m{self.id}"


@dataclass(frozen=True, slots=True)
class MemoryDraft:
    """A memory to add (`Store.add_memory`). confidence None: the source's (SOURCE_CONFIDENCE). token_count
    None: counted by the store. supersedes: the id of a memory of the same person this one replaces (the
    extractor's word for a contradiction), whatever its key."""

    content: str
    kind: str = "fact"
    key: str | None = None
    importance: float = 0.5
    source: str = "stated"
    confidence: float | None = None
    source_message_ids: tuple[int, ...] = ()
    token_count: int | None = None
    expires_at: datetime | None = None
    supersedes: int | None = None


@dataclass(frozen=True, slots=True)
class MemoryAdded:
    """What `Store.add_memory` did. outcome: "added" (a new memory), "merged" (into a near-duplicate, `memory`
    is that one, updated), "superseded" (a new memory; `previous` is the one it ended)."""

    memory: Memory
    outcome: str
    previous: Memory | None = None
