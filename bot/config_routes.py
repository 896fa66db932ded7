"""HILO_MODEL_ROUTES: a model per request, by deterministic rules on the message (issue 15 item 6).

    HILO_MODEL_ROUTES='[{"name": "quick", "model": "openai:gpt-4o-mini", "max_chars": 160},
                        {"name": "deep", "model": "anthropic:claude-sonnet-4", "min_chars": 800},
                        {"name": "code", "model": "openai:gpt-4.1", "keywords": ["python", "sql", "código"]},
                        {"name": "photos", "model": "openai:gpt-4o", "images": true}]'

Inline JSON, or the path of a JSON file (a list, or {"routes": [...]}) or a TOML file (`[[routes]]` tables).
Each route names a model (`provider:model`, as HILO_MODEL) and, optionally, its `fallbacks` (a list; by default
HILO_FALLBACK_MODELS): the chain that answers the turns it matches, retried and circuit-broken like the default
one. A route matches the message being answered when every condition it states holds: `min_chars` / `max_chars`
(its length), `keywords` (any of these words, whole, case- and accent-insensitive), `images` (true: the message
brings a photo the model sees, bot/vision.py; false: it does not), `tools` (true: the calls of a turn after one
of its tools ran, when the model reads tool results and answers from them; false: the calls before). The first
route that matches wins; a message no route matches goes to HILO_MODEL and its fallbacks. No model is called to
choose: a rule costs microseconds. Each model call records the route that chose it (model_calls.route).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot import config_file
from kernel.errors import ConfigError
from memory.search_terms import WORD, fold

if TYPE_CHECKING:
    from bot.config import ModelSpec

SETTING = "HILO_MODEL_ROUTES"
EXAMPLE = '[{"name": "quick", "model": "openai:gpt-4o-mini", "max_chars": 160}]'
KEYS = frozenset({"name", "model", "fallbacks", "min_chars", "max_chars", "keywords", "images", "tools"})
CONDITIONS = ("min_chars", "max_chars", "keywords", "images", "tools")


@dataclass(frozen=True, slots=True)
class Route:
    """One rule: its name (recorded with each call), the chain it sends matching messages to, its conditions."""

    name: str
    models: tuple[ModelSpec, ...]
    min_chars: int | None = None
    max_chars: int | None = None
    keywords: frozenset[str] = frozenset()
    images: bool | None = None
    #: True: only the calls after a tool of the turn ran; False: only those before; None: either
    tools: bool | None = None

    def matches(self, text: str, images: bool = False, *, tool_ran: bool = False) -> bool:
        """Whether the call meets every condition this route states: `text` is the message being answered,
        `images` whether it brings a photo, `tool_ran` whether a tool of its turn ran already (the call reads
        its result)."""
        if self.images is not None and images != self.images:
            return False
        if self.tools is not None and tool_ran != self.tools:
            return False
        if self.min_chars is not None and len(text) < self.min_chars:
            return False
        if self.max_chars is not None and len(text) > self.max_chars:
            return False
        return not self.keywords or not self.keywords.isdisjoint(WORD.findall(fold(text)))


def every_model(models: Iterable[ModelSpec], routes: Iterable[Route]) -> tuple[ModelSpec, ...]:
    """The default chain's models and the routes', each once, in order of appearance: what providers are built,
    keys checked and circuit breakers kept for."""
    return tuple(dict.fromkeys([*models, *(m for r in routes for m in r.models)]))


def routes_from(env: Mapping[str, str], parse: Callable[..., ModelSpec],
                fallbacks: tuple[ModelSpec, ...]) -> tuple[Route, ...]:
    """HILO_MODEL_ROUTES as routes (none when unset). `parse`: ModelSpec.parse; `fallbacks`: HILO_FALLBACK_MODELS,
    a route's chain after its model when it names none. ConfigError, naming the setting and the route, when
    malformed."""
    raw = env.get(SETTING, "").strip()
    if not raw:
        return ()
    data = config_file.load(raw, SETTING, EXAMPLE)
    if isinstance(data, dict) and set(data) == {"routes"}:
        data = data["routes"]
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{SETTING} must be a list of routes, e.g. {EXAMPLE}")
    routes = [_route(i, entry, parse, fallbacks) for i, entry in enumerate(data, 1)]
    names = [r.name for r in routes]
    if len(set(names)) != len(names):
        raise ConfigError(f"{SETTING}: two routes share a name ({', '.join(sorted(names))}): give each its own")
    return tuple(routes)


def _route(i: int, entry: Any, parse: Callable[..., ModelSpec], fallbacks: tuple[ModelSpec, ...]) -> Route:
    where = f"{SETTING}, route {i}"
    if not isinstance(entry, dict) or not isinstance(entry.get("model"), str):
        raise ConfigError(f'{where}: each route is an object with a "model", e.g. {EXAMPLE}')
    unknown = sorted(set(entry) - KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; a route has {', '.join(sorted(KEYS))}")
    if not any(key in entry for key in CONDITIONS):
        raise ConfigError(f"{where}: no condition; state at least one of {', '.join(CONDITIONS)} (a message no "
                          "route matches goes to HILO_MODEL)")
    name = entry.get("name", f"route{i}")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", name):
        raise ConfigError(f"{where}: name {name!r} must be 1-40 letters, digits, '_', '.' or '-'")
    chain = entry.get("fallbacks")
    if chain is not None and not (isinstance(chain, list) and all(isinstance(m, str) for m in chain)):
        raise ConfigError(f'{where}: "fallbacks" must be a list of models such as ["openai:gpt-4o"]')
    models = (parse(entry["model"], setting=SETTING),
              *(fallbacks if chain is None else tuple(parse(m, setting=SETTING) for m in chain)))
    bounds = {key: entry.get(key) for key in ("min_chars", "max_chars")}
    for key, value in bounds.items():
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ConfigError(f"{where}: {key} must be a whole number of characters, 0 or more")
    words = entry.get("keywords", [])
    if "keywords" in entry and not words:
        raise ConfigError(f'{where}: "keywords" is empty; list the words, e.g. ["python", "sql"], or leave it out')
    if not (isinstance(words, list) and all(isinstance(w, str) and WORD.fullmatch(fold(w.strip())) for w in words)):
        raise ConfigError(f'{where}: "keywords" must be a list of single words, e.g. ["python", "sql"]')
    images = entry.get("images")
    if images is not None and not isinstance(images, bool):
        raise ConfigError(f'{where}: "images" must be true (messages with a photo) or false (without one)')
    tools = entry.get("tools")
    if tools is not None and not isinstance(tools, bool):
        raise ConfigError(f'{where}: "tools" must be true (the calls after a tool ran) or false (those before)')
    return Route(name, models, bounds["min_chars"], bounds["max_chars"], frozenset(fold(w.strip()) for w in words),
                 images, tools)
