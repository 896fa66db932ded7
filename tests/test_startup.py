"""A daemon that cannot start says why in ONE line and exits non-zero, without a traceback, in both log formats;
`daemon.started` comes only once the socket accepts connections, and says where.

Each case runs `hilo serve` as a process against a real obstacle: the fake Bot API refusing the token (401 on
getMe), a closed port, a port another socket holds, a missing or read-only database directory, an embedded
Postgres that is not there or refuses the password.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from memory.open import open_store
from tests.fakes.loopback import free_port
from tests.fakes.postgres import SERVER, postgres_databases, postgres_session  # noqa: F401  (autouse)
from tests.fakes.serve_process import ServeProcess, serving
from tests.fakes.telegram_api import FakeBotApi, bot_api, bot_api_session  # noqa: F401  (fixtures)


@dataclass
class Case:
    env: dict[str, str]
    says: str  # what the one line must say
    secrets: tuple[str, ...] = ()  # what it must never say
    prefix: list[str] = field(default_factory=list)  # run the daemon under this command (setpriv)
    args: list[str] = field(default_factory=lambda: ["--port", "0"])


def _without_root_override() -> list[str]:
    """Root ignores file modes: run the daemon without the capabilities that let it (as a non-root user would)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    assert setpriv, "the read-only test needs setpriv (util-linux) when it runs as root: apt-get install util-linux"
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--"]


def _read_only_dir(tmp: Path, *, with_database: bool) -> Path:
    folder = tmp / "ro"
    folder.mkdir()
    if with_database:  # a database made earlier (migrated, its key generated), then the folder became read-only
        async def make() -> None:
            store = open_store(f"sqlite:///{folder / 'hilo.db'}")
            await store.open()
            await store.close()
        asyncio.run(make())
        (folder / "hilo.secret").write_text("a-key-made-earlier\n")
        (folder / "hilo.db").chmod(0o444)
    folder.chmod(0o555)
    return folder


def telegram_token_refused(tmp: Path, api: FakeBotApi) -> Case:
    token = "999999:not-the-fakes-token"
    return Case({"TELEGRAM_BOT_TOKEN": token, "TELEGRAM_API_BASE_URL": api.base_url},
                "Telegram refused TELEGRAM_BOT_TOKEN", secrets=(token,))


def telegram_unreachable(tmp: Path, api: FakeBotApi) -> Case:
    token = "123456:some-token"
    return Case({"TELEGRAM_BOT_TOKEN": token, "TELEGRAM_API_BASE_URL": f"http://127.0.0.1:{free_port()}"},
                "cannot reach the Telegram Bot API", secrets=(token,))


def database_directory_missing(tmp: Path, api: FakeBotApi) -> Case:
    return Case({"HILO_DATABASE_URL": f"sqlite:///{tmp / 'missing' / 'hilo.db'}"},
                f"{tmp / 'missing'} does not exist")


def database_directory_read_only(tmp: Path, api: FakeBotApi) -> Case:
    folder = _read_only_dir(tmp, with_database=False)
    return Case({"HILO_DATABASE_URL": f"sqlite:///{folder / 'hilo.db'}"}, f"make {folder} writable",
                prefix=_without_root_override())


def database_read_only(tmp: Path, api: FakeBotApi) -> Case:
    folder = _read_only_dir(tmp, with_database=True)
    return Case({"HILO_DATABASE_URL": f"sqlite:///{folder / 'hilo.db'}"},
                f"cannot open the SQLite database {folder / 'hilo.db'}", prefix=_without_root_override())


def postgres_unreachable(tmp: Path, api: FakeBotApi) -> Case:
    return Case({"HILO_DATABASE_URL": f"postgresql://hilo:pw-not-shown@127.0.0.1:{free_port()}/hilo"},
                "cannot connect to the Postgres database", secrets=("pw-not-shown",))


def postgres_password_refused(tmp: Path, api: FakeBotApi) -> Case:
    url = SERVER.password_role("hilo_pw", "the-right-one")
    wrong = url.replace("postgresql://hilo_pw@", "postgresql://hilo_pw:the-wrong-one@", 1)
    return Case({"HILO_DATABASE_URL": wrong}, 'password authentication failed for user "hilo_pw"',
                secrets=("the-wrong-one", "the-right-one"))


CASES: dict[str, Callable[[Path, FakeBotApi], Case]] = {f.__name__: f for f in (
    telegram_token_refused, telegram_unreachable, database_directory_missing, database_directory_read_only,
    database_read_only, postgres_unreachable, postgres_password_refused,
)}


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port another program listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _one_line(daemon: ServeProcess, fmt: str) -> str:
    """The reason given by a daemon that failed to start: its only line of output."""
    try:
        status = daemon.wait(timeout=60)
    finally:
        daemon.kill()  # one that started after all must not outlive the test
    lines = [line for line in daemon.lines if line.strip()]
    assert status != 0, "\n".join(lines)
    assert len(lines) == 1, f"{len(lines)} lines:\n" + "\n".join(lines)
    assert "Traceback" not in lines[0]
    if fmt == "json":
        record = json.loads(lines[0])
        assert record["event"] == "daemon.failed" and record["level"] == "error"
        return str(record["error"])
    assert "daemon.failed" in lines[0]
    return lines[0]


@pytest.mark.parametrize("fmt", ["console", "json"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_daemon_that_cannot_start_says_why_in_one_line(
    name: str, fmt: str, tmp_path: Path, bot_api: FakeBotApi,  # noqa: F811
) -> None:
    case = CASES[name](tmp_path, bot_api)
    daemon = ServeProcess(tmp_path, {**case.env, "HILO_LOG_FORMAT": fmt}, args=case.args, prefix=case.prefix)
    reason = _one_line(daemon, fmt)
    assert case.says in reason
    for secret in case.secrets:
        assert secret not in reason


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_a_port_in_use_is_said_in_one_line(fmt: str, tmp_path: Path, held_port: int) -> None:
    daemon = ServeProcess(tmp_path, {"HILO_LOG_FORMAT": fmt}, args=["--port", str(held_port)])
    reason = _one_line(daemon, fmt)
    assert f"cannot listen on http://127.0.0.1:{held_port}: the port is already in use" in reason
    assert not (tmp_path / "hilo.db").exists()  # said before anything started


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_daemon_started_comes_once_the_socket_answers_and_says_where(fmt: str, tmp_path: Path) -> None:
    with serving(tmp_path, {"HILO_LOG_FORMAT": fmt}) as daemon:
        # the URL is read from the daemon.started line: --port 0 let the system choose the port
        assert daemon.url.startswith("http://127.0.0.1:") and not daemon.url.endswith(":0")
        # right after the line, with no retry: the socket listens already
        assert httpx.get(f"{daemon.url}/healthz", timeout=5).status_code == 200
        daemon.terminate()
        assert daemon.wait() == 0
    assert "daemon.stopped" in daemon.out[-1]
