"""Servers as subprocesses on 127.0.0.1 for bench/web_load.py and bench/startup_bench.py: the real `hilo serve`
and a bare Starlette + uvicorn app whose one route inserts one row into SQLite; their resident memory.

Both run with the same uvicorn (h11, asyncio loop, no access log). hilo runs with the echo model (what a fresh
install answers with: no model key), HILO_EMBEDDER=none unless asked, and rate limits high enough that the load
is never refused (the limiter's own per-request work still runs).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
#: Variables that would turn on a provider, a surface or metrics: never passed to the servers.
_SCRUB = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "TELEGRAM_BOT_TOKEN", "TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN",
          "HILO_METRICS_PORT", "HILO_METRICS_TOKEN", "HILO_MODEL", "HILO_FALLBACK_MODELS", "DATABASE_URL")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def hilo_env(db: Path, *, embedder: str = "none", src: Path = ROOT, **extra: str) -> dict[str, str]:
    """The environment of a hilo process over SQLite file `db`, running the code in `src`."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode compiled: so do we
    env.update(HILO_DATABASE_URL=f"sqlite:///{db}", HILO_EMBEDDER=embedder, HILO_RATE_LIMIT_VISITOR="1000000000",
               HILO_RATE_LIMIT_IP="1000000000", HILO_LOG_LEVEL="warning", PYTHONPATH=str(src), **extra)
    return env


def compile_tree(src: Path = ROOT) -> None:
    """Bytecode for hilo's packages, as `pip install` writes it (this machine sets PYTHONDONTWRITEBYTECODE, so an
    editable checkout would compile every module at every start: ~80 ms of a `hilo context`)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(src / p) for p in ("bot", "memory", "kernel",
                    "surfaces"))], env=env, check=True, stdout=subprocess.DEVNULL)


def rss_mb(pid: int) -> float:
    """Resident memory of `pid` (VmRSS), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _wait_up(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code < 500:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer within {timeout} s")


@contextlib.contextmanager
def server(argv: list[str], env: Mapping[str, str], port: int, probe: str,
           cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A server process, up (its `probe` path answers) until the block ends; then SIGTERM (SIGKILL after 10 s).
    Its output goes to server-PORT.log in `cwd`."""
    log = (cwd / f"server-{port}.log").open("wb")
    proc = subprocess.Popen(argv, env=dict(env), cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_up(f"http://127.0.0.1:{port}{probe}", proc)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def hilo_serve(db: Path, port: int, *, embedder: str = "none", src: Path = ROOT) -> contextlib.AbstractContextManager[
        subprocess.Popen[bytes]]:
    """`hilo serve` on 127.0.0.1:`port` over `db` (its working directory: db's folder)."""
    return server([sys.executable, "-m", "bot.cli", "serve", "--port", str(port)],
                  hilo_env(db, embedder=embedder, src=src), port, "/healthz", db.parent)


def endpoint_serve(kind: str, db: Path, port: int) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """bench/web_load_gen.py's `bare` endpoint or the seed pattern's (`seed`) on 127.0.0.1:`port` over `db`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    return server([sys.executable, "-m", "bench.web_load_gen", kind, "--port", str(port), "--db", str(db)],
                  env, port, "/healthz", db.parent)
