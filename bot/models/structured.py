"""Structured output: an answer that is one JSON object following a schema (memory extraction, bot/extract.py).

    schema = OutputSchema("record_memories", "What to remember", {"type": "object", ...})
    result = await chain.complete_json(messages, schema)    # ChainResult; result.text is the JSON object's text

Each provider asks for it the way its API does: OpenAI (and compatible servers) with `response_format` of type
`json_schema` (strict), Anthropic with one tool whose `input_schema` is the schema and `tool_choice` forcing it
(the tool's input is the answer). The text handed back is the JSON as the model wrote it: the caller validates
it (a model may still send what the schema forbids). A provider without structured output (echo) is skipped by
the chain; the retry policy, records and circuit breakers are the chain's, as for a turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from bot.models.base import Chain, ChainResult, Completion
from kernel.types import ChatMessage


@dataclass(frozen=True, slots=True)
class OutputSchema:
    """A JSON Schema for the answer. `name`: letters, digits and `_` (a tool's or a response format's name);
    `schema`: an object schema that OpenAI's strict mode accepts (every property required, none extra)."""

    name: str
    description: str
    schema: Mapping[str, Any] = field(hash=False)


@runtime_checkable
class StructuredProvider(Protocol):
    """A ModelProvider that can answer with JSON following a schema."""

    async def complete_json(self, model: str, messages: Sequence[ChatMessage], schema: OutputSchema, *,
                            timeout: float) -> Completion:
        """One completion whose text is the JSON object; a ModelError subclass on failure (never retries)."""


@runtime_checkable
class StructuredChain(Protocol):
    """What a background job asks of the chain for JSON answers (bot.models.chain.ModelChain)."""

    async def complete_json(self, messages: Sequence[ChatMessage], schema: OutputSchema) -> ChainResult:
        """The first JSON answer of the chain's models that can give one; AllModelsFailed when none did (or
        none can)."""


def background_chain(chain: Chain | None) -> StructuredChain | None:
    """The chain a background job asks for JSON answers: a sibling of the turns' ModelChain (the same models
    and retry policy, circuit breakers of its own), or a test's own StructuredChain; None when no model of it
    can answer with structured output (echo only) or there is no chain."""
    from bot.models.chain import ModelChain

    if isinstance(chain, ModelChain):
        return chain.sibling() if chain.structured() else None
    return chain if isinstance(chain, StructuredChain) else None
