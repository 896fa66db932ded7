"""Shared fixtures. Loopback fakes live in tests/fakes/; nothing here reaches the network.

`store` is the real store on every backend of tests/backends.py: a test that asks for it runs once per
backend (`[sqlite]`, `[postgres]`), on a fresh database, with a `clock` it can move.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memory.store import Store
from tests.backends import BACKENDS, Backend, TestClock

pytest_plugins = ["tests.fakes.model_server", "tests.fakes.postgres"]


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A fresh SQLite database file for the test."""
    return f"sqlite:///{tmp_path / 'hilo.db'}"


@pytest.fixture
def clock() -> TestClock:
    """The stores' "now" (tests/backends.py): `clock.advance(seconds)` moves it forward."""
    return TestClock()


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path, clock: TestClock) -> Backend:
    """One backend's fresh database; its stores run on `clock`."""
    return BACKENDS[request.param](tmp_path, clock)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    """The backend's real store, open (migrated), closed after the test."""
    s = backend.make()
    await s.open()
    yield s
    await s.close()
