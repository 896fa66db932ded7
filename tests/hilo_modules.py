"""Every module of hilo's packages, for tests that check a rule across all of them (tests/test_errors.py,
tests/test_secret_fields.py)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kernel", "bot", "memory", "surfaces")


def names() -> list[str]:
    found: list[str] = []
    for package in PACKAGES:
        found.append(package)
        for info in pkgutil.walk_packages([str(ROOT / package)], prefix=f"{package}."):
            found.append(info.name)
    return found


def modules() -> list[ModuleType]:
    return [importlib.import_module(name) for name in names()]
