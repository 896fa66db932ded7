"""Shared fixtures. Loopback fakes live in tests/fakes/; nothing here reaches the network.

`store` is the real store on every backend of tests/backends.py: a test that asks for it runs once per
backend (`[sqlite]`, `[postgres]`), on a fresh database, with a `clock` it can move.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from bot.config import Settings
from bot.models.chain import ModelChain
from bot.models.factory import build_chain
from bot.retry import RetryPolicy
from kernel import log
from memory.store import Store
from tests.backends import BACKENDS, Backend, TestClock
from tests.waiting import no_sleep

if TYPE_CHECKING:  # imported by pytest_plugins below, before which it may not be imported
    from tests.fakes.model_server import FakeModelServer

JobChain = Callable[[Mapping[str, str]], tuple[Settings, ModelChain]]

pytest_plugins = ["tests.fakes.model_server", "tests.fakes.postgres"]


@pytest.fixture(autouse=True)
def _log_level_kept() -> Iterator[None]:
    """A test that runs `hilo` in-process (bot.cli.main logs warnings only) leaves the level as it found it. Else a
    later test in the same process whose logger is first used then gets a logger that drops info events for good
    (structlog caches each logger with its level), and `capture_logs` sees none of them: which test fails depended
    on how pytest-xdist spread the tests (test_poll_lease after test_migrate)."""
    before = log.level()
    yield
    if log.level() != before:
        log.configure(logging.getLevelName(before) if before is not None else "info")


#: What hilo writes in its working directory when told nowhere else (HILO_DATA_DIR's default with Postgres, the
#: Postgres secret key; with `sqlite:///hilo.db`, the journal and the record of erasures beside it).
_STRAYS = [Path(__file__).resolve().parent.parent / name
           for name in ("data", ".hilo-secret", "hilo.db", "erasures.jsonl", "inbound.journal")]


@pytest.fixture(autouse=True)
def _in_a_directory_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test runs in its own temporary directory: what hilo writes by default in its working directory (the
    list above: a Settings() built without a data directory, a pipeline over a test's store) lands there, never
    in the checkout, where one test's record of erasures would be the next one's."""
    before = [p for p in _STRAYS if p.exists()]
    monkeypatch.chdir(tmp_path)
    yield
    strays = [p.name for p in _STRAYS if p.exists() and p not in before]
    assert not strays, f"the test wrote {strays} into the checkout"


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


@pytest.fixture
async def job_chain(model_server: FakeModelServer) -> AsyncIterator[JobChain]:
    """Settings from HILO_* `env` (over the fake provider's keys and URLs) and the model chain a background job
    (extraction, summaries) is built with: one attempt, no sleep. The chains are closed after the test."""
    chains: list[ModelChain] = []

    def make(env: Mapping[str, str]) -> tuple[Settings, ModelChain]:
        settings = Settings.from_mapping({
            "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": model_server.base_url + "/v1",
            "ANTHROPIC_API_KEY": "ak-test", "ANTHROPIC_BASE_URL": model_server.base_url, **env})
        chain = build_chain(settings, policy=RetryPolicy(attempts=1, sleep=no_sleep), timeout=5)
        chains.append(chain)
        return settings, chain

    yield make
    for chain in chains:
        await chain.aclose()
