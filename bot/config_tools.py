"""The tools' settings (issue 15 item 5), read from HILO_* names into Settings' tools block.

HILO_TOOLS chooses the built-in tools (bot/tools/builtin.py): a comma list of `now`, `remember`, `forget`,
`search_memory`, or `all`; unset or `none`: no tools (the model is offered none, as before). The tool loop
(bot/tools/loop.py) is bounded by HILO_TOOL_STEPS (rounds of tool calls in one turn), HILO_TOOL_SECONDS (the
turn's time for tools and the model calls between them) and HILO_TOOL_COST_USD (what the turn's model calls may
cost before no more tools are offered; 0: no cost bound); HILO_TOOL_TIMEOUT bounds one call of a tool.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.config_costs import _number, _usd
from kernel.errors import ConfigError

#: The built-in tools, in the order they are offered (bot/tools/builtin.py implements each).
TOOLS = ("now", "remember", "forget", "search_memory")


def tool_names(raw: str) -> tuple[str, ...]:
    """HILO_TOOLS as tool names (checked, in TOOLS order)."""
    names = {n.strip().lower() for n in raw.split(",") if n.strip()}
    if names in (set(), {"none"}):
        return ()
    if names == {"all"}:
        return TOOLS
    unknown = sorted(names - set(TOOLS))
    if unknown:
        raise ConfigError(f"HILO_TOOLS: unknown tool(s) {', '.join(unknown)}: write a comma list of "
                          f"{', '.join(TOOLS)}, or all, or none")
    return tuple(n for n in TOOLS if n in names)


def tools_from(env: Mapping[str, str]) -> dict[str, Any]:
    """Settings' tools fields from the environment."""
    return {
        "tools": tool_names(env.get("HILO_TOOLS", "")),
        "tool_steps": int(_number(env, "HILO_TOOL_STEPS", 4, 1)),
        "tool_seconds": _number(env, "HILO_TOOL_SECONDS", 30.0, 1.0),
        "tool_timeout": _number(env, "HILO_TOOL_TIMEOUT", 10.0, 0.1),
        "tool_cost_usd": _usd(env, "HILO_TOOL_COST_USD"),
    }
