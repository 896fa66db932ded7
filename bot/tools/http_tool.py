"""The operator's own tools (HILO_HTTP_TOOLS, bot/config_tools.py): each is an HTTP endpoint.

A call POSTs `{"tool": name, "arguments": {...}}` as JSON to the tool's URL, with its secret header when one is
configured, through httpx's async client (never blocking the event loop; imported at the first call), within the
registry's time limit (HILO_TOOL_TIMEOUT; bot/tools/registry.py turns a timeout into an error result). Nothing
about the person is sent but the arguments the model wrote in their turn: no user id, no handle, no history. A 2xx
answer's text (at most RESULT_CHARS) is the result; any other status or a transport failure is an error result
naming the status or the failure's class, never the secret or the body.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.config_tools import HttpToolSpec
from bot.tools.registry import Tool, ToolContext, ToolError
from kernel.types import ToolSpec

#: The most of an answer the model reads.
RESULT_CHARS = 4000


def http_tool(spec: HttpToolSpec) -> Tool:
    """The Tool that calls `spec`'s endpoint."""

    async def run(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
        import httpx  # here: commands that call no tool (`hilo context`, `import`) do not load it

        headers = {spec.header: spec.secret} if spec.header else {}
        try:
            async with httpx.AsyncClient(follow_redirects=False) as client:
                answer = await client.post(spec.url, json={"tool": spec.name, "arguments": dict(arguments)},
                                           headers=headers)
        except httpx.HTTPError as exc:
            raise ToolError(f"the tool's service could not be reached ({type(exc).__name__})") from None
        if not answer.is_success:
            raise ToolError(f"the tool's service answered HTTP {answer.status_code}")
        return answer.text[:RESULT_CHARS]

    return Tool(ToolSpec(spec.name, spec.description, dict(spec.parameters)), run)
