"""Every exception hilo defines derives from HiloError, so a caller can catch the root (issue 10, item 7)."""

from __future__ import annotations

import importlib
import inspect

from kernel.errors import HiloError
from tests.hilo_modules import names as _modules


def test_the_walk_sees_every_package() -> None:
    names = _modules()
    assert {"kernel.errors", "memory.store", "surfaces.web_auth", "bot.models.base"} <= set(names)


def test_every_exception_defined_in_hilo_derives_from_hilo_error() -> None:
    strays: list[str] = []
    seen = 0
    for name in _modules():
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != name or not issubclass(cls, BaseException):
                continue
            seen += 1
            if not issubclass(cls, HiloError):
                strays.append(f"{name}.{cls.__qualname__}")
    assert seen > 10
    assert strays == [], f"not under HiloError: {', '.join(sorted(strays))}"
