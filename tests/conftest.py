"""Shared fixtures. Loopback fakes live in tests/fakes/; nothing here reaches the network."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memory.open import open_store

pytest_plugins = ["tests.fakes.model_server"]


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A fresh SQLite database file for the test."""
    return f"sqlite:///{tmp_path / 'hilo.db'}"


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Any]:
    """The real SQLite store on `db_url`, open (migrated), closed after the test. The store contract suite
    overrides it with one parametrized over every backend."""
    st = open_store(db_url)
    await st.open()
    yield st
    await st.close()
