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


class InspectedFact(TypedDict):
    id: int
    content: str
    token_count: int
    created_at: str


class Inspection(TypedDict):
    user: InspectedUser
    identities: list[InspectedIdentity]
    conversations: list[InspectedConversation]
    facts: list[InspectedFact]
    model_calls: list[Row]
    deliveries: list[Row]
    identity_audit: list[Row]
