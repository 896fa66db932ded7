"""A tool call's arguments as a provider streams or sends them: JSON text (OpenAI's `arguments`, Anthropic's
streamed `input_json_delta` fragments), read the same way for both."""

from __future__ import annotations

import json
from typing import Any


def arguments_of(raw: str | None) -> dict[str, Any]:
    """A call's arguments, as the model wrote them (JSON text); {} when they are not a JSON object (the tool's
    schema check then tells the model what is missing)."""
    try:
        parsed = json.loads(raw or "{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
