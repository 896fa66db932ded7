"""Exception roots of the core.

HiloError
 ├── ConfigError            a setting is missing or wrong: the message says what to set
 ├── InputError             a person's input was refused (too long, empty): `key` names the catalogue text
 ├── NotFound               a user, conversation or message that does not exist or is not the caller's
 └── ServiceUnavailable     an outside service the daemon needs (the Telegram Bot API, ...) cannot be reached or
                            failed: the message says which and what to check

Model errors live in `bot.models.base` (ModelError and its subclasses); store errors in `memory.store`.
"""

from __future__ import annotations


class HiloError(Exception):
    """Root of every error hilo raises on purpose."""


class ConfigError(HiloError):
    """A setting is missing or wrong. The message tells the operator what to set."""


class InputError(HiloError):
    """A person's input was refused. `key` is the message-catalogue key of what to tell them."""

    def __init__(self, key: str, detail: str = "", **params: object) -> None:
        super().__init__(detail or key)
        self.key = key
        self.params = params


class NotFound(HiloError):
    """The thing asked for does not exist, or does not belong to the caller (never say which)."""


class ServiceUnavailable(HiloError):
    """An outside service cannot be reached or answered an error. The message says which and what to check."""
