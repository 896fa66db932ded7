"""The tools' settings (issue 15 item 5), read from HILO_* names into Settings' tools block.

HILO_TOOLS chooses the built-in tools (bot/tools/builtin.py): a comma list of `now`, `remember`, `forget`,
`search_memory`, `set_timezone`, `remind`, `list_reminders`, `cancel_reminder`, or `all`; unset or `none`: no
tools (the model is offered none, as before). The tool loop (bot/tools/loop.py) is bounded by HILO_TOOL_STEPS
(rounds of tool calls in one turn), HILO_TOOL_SECONDS (the turn's time for tools and the model calls between
them) and HILO_TOOL_COST_USD (what the turn's model calls may cost before no more tools are offered; 0: no cost
bound); HILO_TOOL_TIMEOUT bounds one call of a tool.
Reminders (bot/reminders.py): HILO_REMINDER_SECONDS (how often the job delivers the due ones) and
HILO_WHATSAPP_REMINDER_TEMPLATE (an approved template for those due outside WhatsApp's 24-hour window).

HILO_HTTP_TOOLS adds the operator's own tools (bot/tools/http_tool.py): a JSON array, or the path of a .json file
holding one (or of a .toml file of [[tools]] tables; bot/config_file.py reads both), of {"name", "description",
"parameters" (the arguments' JSON schema; default: none), "url",
"secret_header" and "secret_env" (optional: the header sent with the value of that environment variable)}.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bot import config_file
from bot.config_costs import number, usd, whole
from kernel.errors import ConfigError

#: The built-in tools, in the order they are offered (bot/tools/builtin.py implements each).
TOOLS = ("now", "remember", "forget", "search_memory", "set_timezone", "remind", "list_reminders", "cancel_reminder")
#: An approved WhatsApp template's Content SID (Twilio's Content API).
_CONTENT_SID = re.compile(r"HX[0-9a-fA-F]{32}")
HTTP_EXAMPLE = '[{"name": "weather", "description": "...", "url": "https://tools.example.com/weather"}]'


#: A tool's name as both providers accept it.
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True, slots=True)
class HttpToolSpec:
    """One operator tool of HILO_HTTP_TOOLS: POSTed to `url` with the call's arguments, `header: secret` sent
    with it when set (the secret is never printed: repr leaves it out)."""

    name: str
    description: str
    url: str
    parameters: dict[str, Any] = field(default_factory=dict, hash=False)
    header: str = ""
    secret: str = field(default="", repr=False)


def http_tools(env: Mapping[str, str]) -> tuple[HttpToolSpec, ...]:
    """HILO_HTTP_TOOLS, checked: a ConfigError says which entry is wrong and how."""
    raw = env.get("HILO_HTTP_TOOLS", "").strip()
    if not raw:
        return ()
    entries = config_file.load(raw, "HILO_HTTP_TOOLS", HTTP_EXAMPLE)
    if isinstance(entries, dict) and set(entries) == {"tools"}:  # a TOML file: [[tools]] tables
        entries = entries["tools"]
    if not isinstance(entries, list):
        raise ConfigError("HILO_HTTP_TOOLS: write a JSON array of tools")
    specs: list[HttpToolSpec] = []
    for i, entry in enumerate(entries):
        specs.append(_http_tool(env, i, entry))
    names = [s.name for s in specs]
    clashes = sorted({n for n in names if names.count(n) > 1 or n in TOOLS})
    if clashes:
        raise ConfigError(f"HILO_HTTP_TOOLS: tool name(s) {', '.join(clashes)} used twice or by a built-in tool")
    return tuple(specs)


def _http_tool(env: Mapping[str, str], i: int, entry: Any) -> HttpToolSpec:
    where = f"HILO_HTTP_TOOLS[{i}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: write an object with name, description and url")
    name, url = str(entry.get("name", "")), str(entry.get("url", ""))
    if not _NAME.fullmatch(name):
        raise ConfigError(f"{where}: name must be 1-64 letters, digits, _ or -")
    if not url.startswith(("https://", "http://")):
        raise ConfigError(f"{where}: url must be an http(s) URL, e.g. https://tools.example.com/{name}")
    parameters = entry.get("parameters") or {"type": "object", "properties": {}}
    if not isinstance(parameters, dict):
        raise ConfigError(f"{where}: parameters must be a JSON schema of type object")
    from bot.tools.registry import validator  # (jsonschema: imported only when there are HTTP tools)

    validator(parameters, where)
    header, secret_env = str(entry.get("secret_header", "")), str(entry.get("secret_env", ""))
    secret = env.get(secret_env, "").strip() if secret_env else ""
    if bool(header) != bool(secret):
        raise ConfigError(f"{where}: secret_header needs secret_env naming a set environment variable (and the "
                          "other way round)")
    return HttpToolSpec(name, str(entry.get("description", "")), url, parameters, header, secret)


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
        "tool_steps": whole(env, "HILO_TOOL_STEPS", 4, 1),
        "tool_seconds": number(env, "HILO_TOOL_SECONDS", 30.0, 1.0),
        "tool_timeout": number(env, "HILO_TOOL_TIMEOUT", 10.0, 0.1),
        "tool_cost_usd": usd(env, "HILO_TOOL_COST_USD"),
        "http_tools": http_tools(env),
        "reminder_seconds": number(env, "HILO_REMINDER_SECONDS", 10.0, 1.0),
        "whatsapp_reminder_template": template(env),
    }


def template(env: Mapping[str, str]) -> str:
    """HILO_WHATSAPP_REMINDER_TEMPLATE, checked: a Content SID ("HX" and 32 hex digits) or empty."""
    sid = env.get("HILO_WHATSAPP_REMINDER_TEMPLATE", "").strip()
    if sid and not _CONTENT_SID.fullmatch(sid):
        raise ConfigError(f"HILO_WHATSAPP_REMINDER_TEMPLATE={sid!r} is not a Content SID: set it to the HX... id of "
                          "an approved template with one variable ({{1}}: the reminder), or leave it unset")
    return sid
