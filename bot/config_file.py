"""A setting whose value is inline JSON or the path of a JSON or TOML file (HILO_PRICES, HILO_MODEL_ROUTES)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernel.errors import ConfigError


def load(raw: str, setting: str, example: str) -> Any:
    """The parsed value of `setting`: `raw` itself when it starts like JSON ("{" or "["), else the file it names.
    Every failure is a ConfigError naming the setting; `example` is the inline JSON it suggests."""
    if raw.startswith(("{", "[")):
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{setting} is not valid JSON ({exc.msg} at {exc.pos}); write e.g. {example} or the "
                              "path of a JSON or TOML file") from None
    path = Path(raw)
    if not path.is_file():
        raise ConfigError(f"{setting}={raw!r}: no such file; give inline JSON or the path of a .json / .toml file")
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() == ".toml":
            import tomllib  # here, not at the top: such a file is rare, and every command reads the settings

            return tomllib.loads(text)
        return json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{setting}: {raw!r} cannot be read as {path.suffix or 'JSON'} ({type(exc).__name__}: "
                          f"{exc}); fix the file") from None
