"""A secret is never printed: every dataclass field of hilo whose name says it holds a key, a token, a secret or a
password is left out of its class's repr (`field(repr=False)`), as the settings' and HTTP tools' are. A repr reaches
people's screens and logs by ways no code review sees: a REPL, a failing test's output, an error message."""

from __future__ import annotations

import dataclasses
import inspect
import re

from tests.hilo_modules import modules

SECRET = re.compile(r"(^|_)(api_key|secret_key|secret|token|password)$")


def test_the_rule_sees_the_fields_it_is_about() -> None:
    names = {f.name for m in modules() for _, cls in inspect.getmembers(m, dataclasses.is_dataclass)
             for f in dataclasses.fields(cls)}
    assert {"openai_api_key", "twilio_auth_token", "secret_key", "admin_token", "secret", "new_token"} <= names
    assert not SECRET.search("key") and not SECRET.search("token_count")  # a memory's key, a count: not secrets


def test_no_secret_field_is_in_a_repr() -> None:
    shown = sorted({f"{cls.__module__}.{cls.__qualname__}.{f.name}"
                    for m in modules() for _, cls in inspect.getmembers(m, dataclasses.is_dataclass)
                    for f in dataclasses.fields(cls) if SECRET.search(f.name) and f.repr})
    assert shown == []
