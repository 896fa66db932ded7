"""The fake provider's tool-call answers (tests/fakes/model_server.py, behaviour `calls_tool`), in the shapes the
providers' recordings show (tests/fakes/recorded_shapes.py): OpenAI's OPENAI_TOOL_CALLS_JSON (a message with
`tool_calls`, finish_reason "tool_calls") and OPENAI_TOOL_CALLS_STREAM (the call's id and name in the first
chunk, its arguments in fragments, then finish_reason "tool_calls"); Anthropic's ANTHROPIC_TOOL_ONLY_JSON (a
`tool_use` block, stop_reason "tool_use") and ANTHROPIC_TOOL_USE_STREAM (text, then a tool_use block whose input
comes as `input_json_delta` fragments)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

from tests.fakes.model_behaviours import Behaviour

_ids = itertools.count(1)


def wants_text(body: dict[str, Any]) -> bool:
    """The request forbids tool calls (`tool_choice` "none", either provider's spelling) or offers no tools."""
    choice = body.get("tool_choice")
    return not body.get("tools") or choice == "none" or (isinstance(choice, dict) and choice.get("type") == "none")


def _fragments(arguments: str) -> list[str]:
    return [arguments[i:i + 7] for i in range(0, len(arguments), 7)] or [""]


def openai_message(b: Behaviour) -> tuple[dict[str, Any], str]:
    """(the assistant message with its call, the finish reason)."""
    call = {"id": f"call_fake{next(_ids)}", "type": "function",
            "function": {"name": b.tool, "arguments": b.arguments or "{}"}}
    return {"role": "assistant", "content": b.text or None, "tool_calls": [call], "refusal": None}, "tool_calls"


def openai_deltas(b: Behaviour) -> Iterator[tuple[dict[str, Any], str | None]]:
    """The (delta, finish_reason) of each chunk."""
    if b.text:
        yield {"role": "assistant", "content": b.text}, None
    yield ({"role": "assistant", "content": None, "tool_calls": [{
        "index": 0, "id": f"call_fake{next(_ids)}", "type": "function",
        "function": {"name": b.tool, "arguments": ""}}], "refusal": None}, None)
    for part in _fragments(b.arguments or "{}"):
        yield {"tool_calls": [{"index": 0, "function": {"arguments": part}}]}, None
    yield {}, "tool_calls"


def anthropic_content(b: Behaviour) -> list[dict[str, Any]]:
    text = [{"type": "text", "text": b.text}] if b.text else []
    return [*text, {"type": "tool_use", "id": f"toolu_fake{next(_ids)}", "name": b.tool,
                    "input": json.loads(b.arguments or "{}")}]


def anthropic_events(b: Behaviour) -> Iterator[tuple[str, dict[str, Any]]]:
    """The (event name, data) between message_start and message_delta."""
    index = 0
    if b.text:
        yield "content_block_start", {"type": "content_block_start", "index": 0,
                                      "content_block": {"type": "text", "text": ""}}
        yield "content_block_delta", {"type": "content_block_delta", "index": 0,
                                      "delta": {"type": "text_delta", "text": b.text}}
        yield "content_block_stop", {"type": "content_block_stop", "index": 0}
        index = 1
    yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": {
        "type": "tool_use", "id": f"toolu_fake{next(_ids)}", "name": b.tool, "input": {}}}
    for part in ["", *_fragments(b.arguments or "{}")]:
        yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                      "delta": {"type": "input_json_delta", "partial_json": part}}
    yield "content_block_stop", {"type": "content_block_stop", "index": index}
