"""The inspection record: everything stored about a person, as `Store.inspect` returns it and `hilo inspect
--json` prints it (JSON-ready: timestamps are fixed-width UTC text on every backend). Part of the store contract
(memory.store re-exports it). The section order here is the order of the JSON."""

from __future__ import annotations

from typing import Any, TypedDict

#: One row of a section read straight from its table (model calls, deliveries, the link audit): column -> value.
Row = dict[str, Any]


class InspectedUser(TypedDict):
    id: int
    handle: str
    created_at: str


class InspectedIdentity(TypedDict):
    surface: str
    external_user_id: str
    created_at: str


class InspectedConversation(TypedDict):
    id: int
    surface: str
    title: str | None
    singleton: bool
    external_ref: str | None
    created_at: str
    updated_at: str
    messages: list[Row]


class InspectedMemory(TypedDict):
    """A row of `memories` (kernel.types.Memory) and its short id ("m12")."""

    short_id: str
    id: int
    kind: str
    key: str | None
    content: str
    token_count: int
    importance: float
    confidence: float
    source: str
    source_message_ids: list[int]
    source_external_ids: list[str]
    created_at: str
    updated_at: str
    last_accessed_at: str | None
    access_count: int
    expires_at: str | None
    ended_at: str | None
    superseded_by: int | None


class Inspection(TypedDict):
    user: InspectedUser
    identities: list[InspectedIdentity]
    conversations: list[InspectedConversation]
    memories: list[InspectedMemory]
    #: episode summaries written by the model (memory/sql_summaries.py SUMMARY_KEYS)
    summaries: list[Row]
    model_calls: list[Row]
    deliveries: list[Row]
    identity_audit: list[Row]
