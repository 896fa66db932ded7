"""The README's commands, exactly as written, in a fresh clone: what a new user does first.

The committed repository is cloned into a temporary directory; the README's first command (venv, install from
PyPI, `hilo serve`) runs there as a process until its `daemon.started` line; then every line of every other
`bash` block of the README runs, as written, in one bash shell in the clone (so a line that activates the venv
holds for the lines after it), each checked for exit status 0 and for what the README says it shows. The
shell then checks `import telegram, twilio, asyncpg` (a plain install has the surfaces hilo exists for). Then
the daemon gets SIGTERM and must stop cleanly.

Needs the network to PyPI (the pip cache makes it quick) and port 8000 free (the README's commands name it).
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import threading
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
PORT = 8000  # the README's commands name it
BASE = f"http://127.0.0.1:{PORT}"
IMPORTS = 'python -c "import telegram, twilio, asyncpg"'
_MARK = re.compile(r"\n?@@readme-line (\d+) status (\d+)@@\n")


def bash_blocks(text: str) -> list[list[str]]:
    """The lines of each ```bash block (blank lines left out)."""
    return [[line for line in block.splitlines() if line.strip()]
            for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)]


def fresh_env() -> dict[str, str]:
    """This machine's environment as a new user's shell would have it: no hilo settings, no venv active, no
    `hilo` on PATH (HOME and pip's settings stay: the pip cache)."""
    own = ("HILO_", "OPENAI_", "ANTHROPIC_", "TELEGRAM_", "TWILIO_")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(own) and k not in ("DATABASE_URL", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep)
                                  if d and not (Path(d) / "hilo").exists())
    return env


def run_in_one_shell(lines: list[str], cwd: Path, env: dict[str, str]) -> list[tuple[str, int, str]]:
    """Run `lines` one after the other in ONE bash, as written; (line, exit status, output) for each."""
    script = "".join(f"{line}\nprintf '\\n@@readme-line {i} status %d@@\\n' $?\n" for i, line in enumerate(lines))
    done = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300, check=False)
    parts = _MARK.split(done.stdout)  # [out0, i0, status0, out1, i1, status1, ..., rest]
    results = [(lines[int(parts[k + 1])], int(parts[k + 2]), parts[k].strip()) for k in range(0, len(parts) - 1, 3)]
    assert len(results) == len(lines), f"the shell stopped early (status {done.returncode}):\n{done.stdout}"
    return results


def _port_is_free() -> None:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", PORT))
        except OSError:
            raise AssertionError(f"port {PORT} is in use: the README's commands need it; stop what holds it") from None


class _Lines:
    """A process's output, line by line, read by a thread: wait for a line, never for a time."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.seen.append(line.rstrip("\n"))
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, needle: str, timeout: float) -> str:
        while (line := self._queue.get(timeout=timeout)) is not None:
            if needle in line:
                return line
        raise AssertionError(f"ended before {needle!r}:\n" + "\n".join(self.seen[-60:]))

    def to_the_end(self, timeout: float) -> str:
        self._thread.join(timeout=timeout)
        return "\n".join(self.seen)


def _claims(results: list[tuple[str, int, str]]) -> None:
    """What the README says its examples show."""
    by_command = {line.split("#")[0].strip(): output for line, _, output in results}

    def output_of(prefix: str) -> str:
        found = [out for command, out in by_command.items() if command.startswith(prefix)]
        assert len(found) == 1, f"the README has no single example starting {prefix!r}: {list(by_command)}"
        return found[0]

    answer = json.loads(output_of("curl -s -X POST http://127.0.0.1:8000/api/messages"))
    assert answer["status"] == "ok"
    assert answer["reply"].startswith("[echo")  # the offline dry-run model
    assert output_of('hilo chat --user alice --surface telegram "I live in Valencia"').startswith("[echo")
    context = json.loads(output_of("hilo context --user alice --surface whatsapp --json"))
    cross = [item for item in context["items"] if item["block"] == "cross_surface"]
    assert cross and {item["surface"] for item in cross} == {"telegram"}
    assert any("I live in Valencia" in m["content"] for m in context["messages"])
    assert output_of("hilo forget --user alice && hilo inspect --user alice --json").splitlines()[-1] == "null"
    backup = output_of("hilo backup backup.db")  # before the forget: alice's turn and the curl's
    assert backup.startswith("backed up to backup.db: ") and " 4 messages of 2 people" in backup, backup
    stats = [line.split() for line in output_of("hilo stats --days 2").splitlines()[2:]]
    assert [row[2] for row in stats if row[1] == "telegram"] == ["1"]  # alice's one turn (turns column)


def test_the_readme_first_command_then_every_example_in_a_fresh_clone(tmp_path: Path) -> None:
    clone = tmp_path / "hilo"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=60)
    blocks = bash_blocks((clone / "README.md").read_text())
    setup, examples = blocks[0], [line for block in blocks[1:] for line in block]
    assert len(setup) == 2 and setup[1].startswith("scripts/test.sh"), "two set-up commands: the daemon, the tests"
    assert examples, "the README shows command-line examples"
    _port_is_free()
    env = fresh_env()
    daemon = subprocess.Popen(["bash", "-c", setup[0]], cwd=clone, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    output = _Lines(daemon)
    try:
        started = output.wait_for("daemon.started", timeout=300)  # pip installs first
        page = httpx.get(BASE + "/", timeout=10)  # "Open http://127.0.0.1:8000 for the chat widget's demo page"
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        results = run_in_one_shell([*examples, IMPORTS], clone, env)
        for line, status, out in results:
            assert status == 0, f"{line!r} exited {status}:\n{out}"
        _claims(results)
        assert f"url={BASE}" in started  # the daemon says where it listens
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGTERM)  # bash and the hilo it started (Ctrl-C would send SIGINT)
        daemon.wait(timeout=60)
        log = output.to_the_end(timeout=60)
        if daemon.stdout is not None:
            daemon.stdout.close()
    assert "daemon.stopped" in log  # hilo drained and closed (the pipe's end: it exited)
