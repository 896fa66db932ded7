"""Where the wiring finds the surfaces: the `hilo.surfaces` and `hilo.terminal` entry points (pyproject.toml).

Arrows point down only (docs/architecture.md, "Layers"): surfaces import bot/, never the other way round, so
the app and the CLI do not import a surface module. Each surface registers a factory under `hilo.surfaces`
(`name = "module:function"`, called with the Settings, returning the surface or None when it is not
configured); `hilo chat` runs the `chat` entry of `hilo.terminal`. A new surface is one module in surfaces/
and one line in pyproject.toml.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, cast

from kernel.errors import ConfigError

if TYPE_CHECKING:
    from bot.config import Settings
    from bot.pipeline import Pipeline
    from bot.runtime import Surface

SURFACES = "hilo.surfaces"
TERMINAL = "hilo.terminal"
#: (pipeline, handle, surface, the message or None for a REPL) -> exit code
Chat = Callable[["Pipeline", str, str, str | None], Awaitable[int]]
SurfaceFactory = Callable[["Settings"], "Surface | None"]


def _entry(group: str, name: str) -> EntryPoint:
    found = entry_points(group=group, name=name)
    if not found:
        raise ConfigError(f"no {group!r} entry point named {name!r}: hilo is not installed from this checkout. "
                          "Install it (pip install -e .) and run again")
    return next(iter(found))


def enabled_surfaces(settings: Settings) -> list[Surface]:
    """The configured surfaces: the web first (it is always on), then the others by name."""
    _entry(SURFACES, "web")  # without it hilo was not installed: say so instead of serving nothing
    surfaces: list[Surface] = []
    for ep in sorted(entry_points(group=SURFACES), key=lambda ep: (ep.name != "web", ep.name)):
        surface = cast(SurfaceFactory, ep.load())(settings)
        if surface is not None:
            surfaces.append(surface)
    return surfaces


def chat() -> Chat:
    """The terminal surface's chat (`hilo chat`)."""
    return cast(Chat, _entry(TERMINAL, "chat").load())
