"""`hilo serve` as a real child process (`python -m bot.cli serve`), for tests of what an operator sees.

The child gets the test's environment without any hilo, model, Telegram or Twilio setting (plus what the test
gives), this checkout on PYTHONPATH, and `--port 0` unless told otherwise: the port it took is read from its
`daemon.started` line. Threads read its stdout and stderr line by line, so a test waits for a line (an event),
never for a time.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
_OWN = ("HILO_", "OPENAI_", "ANTHROPIC_", "TELEGRAM_", "TWILIO_")


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OWN) and k != "DATABASE_URL"}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra or {})
    return env


def _url_of(line: str) -> str | None:
    """The URL of a `daemon.started` line, in either log format."""
    if line.startswith("{"):
        record = json.loads(line)
        return str(record["url"]) if record.get("event") == "daemon.started" else None
    if "daemon.started" not in line:
        return None
    match = re.search(r"\burl=(\S+)", line)
    return match.group(1) if match else None


class ServeProcess:
    """One `hilo serve`. `lines` / `out` / `err` so far; `wait_for(predicate)`; `wait_started()`;
    `terminate()` (SIGTERM) and `wait()`."""

    def __init__(self, cwd: Path, env: Mapping[str, str] | None = None, *, args: Sequence[str] = ("--port", "0"),
                 prefix: Sequence[str] = ()) -> None:
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "bot.cli", "serve", *args], cwd=cwd, env=clean_env(env),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._readers = [threading.Thread(target=self._read, args=(stream, into), daemon=True)
                         for stream, into in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for reader in self._readers:
            reader.start()
        self.url = ""

    def _read(self, stream: object, into: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            into.append(line.rstrip("\n"))
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    @property
    def lines(self) -> list[str]:
        """Every line of stdout and stderr so far (stdout first)."""
        return [*self.out, *self.err]

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 60.0) -> str:
        """The first line (from now on) that satisfies `predicate`; AssertionError when the process ends first."""
        deadline = time.monotonic() + timeout
        ended = 0
        while ended < 2:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("no such line in time; so far:\n" + "\n".join(self.lines)) from None
            if line is None:
                ended += 1
            elif predicate(line):
                return line
        raise AssertionError(f"hilo serve ended (status {self.proc.wait()}):\n" + "\n".join(self.lines))

    def wait_started(self, timeout: float = 60.0) -> str:
        """The URL of its `daemon.started` line."""
        self.url = str(_url_of(self.wait_for(lambda line: _url_of(line) is not None, timeout)))
        return self.url

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float = 60.0) -> int:
        """Its exit status, once it ended and both streams were read to the end."""
        status = self.proc.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout=timeout)
        return status

    def kill(self) -> None:
        """End it (if it still runs) and close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@contextmanager
def serving(cwd: Path, env: Mapping[str, str] | None = None, *, args: Sequence[str] = ("--port", "0"),
            ) -> Iterator[ServeProcess]:
    """A started `hilo serve` (its URL in `.url`); killed at the end if it is still running."""
    daemon = ServeProcess(cwd, env, args=args)
    try:
        daemon.wait_started()
        yield daemon
    finally:
        daemon.kill()


def model_env(database_url: str, model_base_url: str, **extra: str) -> dict[str, str]:
    """The environment of a `hilo serve` on `database_url` whose model is the fake provider at `model_base_url`
    (OpenAI's SDK, one attempt a call), logging JSON lines, with web rate limits out of the way."""
    return {"HILO_DATABASE_URL": database_url, "HILO_SECRET_KEY": "k" * 43, "HILO_LOG_FORMAT": "json",
            "HILO_MODEL": "openai:m1", "OPENAI_API_KEY": "x", "OPENAI_BASE_URL": model_base_url + "/v1",
            "HILO_RATE_LIMIT_IP": "10000", **extra}


async def stop_within(daemon: ServeProcess, seconds: float) -> int:
    """SIGTERM, then its exit status once it ended; AssertionError (with its lines) when it did not within
    `seconds` (as a supervisor would then kill it)."""
    import asyncio

    daemon.terminate()
    try:
        return await asyncio.to_thread(daemon.wait, seconds)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"hilo serve did not stop within {seconds} s:\n" + "\n".join(daemon.lines)) from None
