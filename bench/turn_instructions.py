"""Instructions per web turn: a measure of the turn's CPU that this noisy machine cannot blur.

Requests per second on two shared vCPUs move 20-50% between rounds of the same code (docs/architecture.md,
stop 44), so a change worth 3% cannot be seen in them. Instructions can: the web turn runs in process (the real
app over SQLite with the echo model, called through raw ASGI messages: no HTTP client, no uvicorn) under valgrind's
callgrind, once with `--turns` turns after the set-up and once with `--turns-short`; the difference per turn is the
turn's own work, start-up and set-up cancelled out, on every thread together (the event loop's, the store's).
It counts user-space instructions only: system calls (the WAL's writes, the hops' wake-ups) are not in it.

    python -m bench.turn_instructions                      # this checkout (~1.5 min; needs valgrind)
    python -m bench.turn_instructions --src /tmp/hilo-base # another checkout's, to compare
    python -m bench.turn_instructions --drive --turns 300  # the turns alone, without callgrind (a harness check)

16 visitors, each with 6 turns of set-up, then the turns round-robin (turns 7 to 22 of each conversation at the
default sizes: what bench/web_load.py's visitors live through). PYTHONHASHSEED=0, the same texts in every run,
tiktoken loaded before the turns measured: two runs of one checkout agree within ~2%.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VISITORS = 16
SETUP_TURNS = 6


async def post_json(app: Any, path: str, body: bytes = b"", token: str | None = None) -> dict[str, Any]:
    """POST `body` to `path` as one ASGI request; the JSON answer (200 expected). bench/web_turn.py calls its apps
    this way too: an HTTP client in process (httpx.ASGITransport) left ~25 objects of cyclic garbage a request,
    whose collection (2-6 ms) landed in the timed turns of the rows between. It lives here, not in a module of its
    own: this file runs against older checkouts (`--src`), whose bench/ has no newer module to import."""
    sent: list[dict[str, Any]] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # never a disconnect: the app answers first
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"host", b"127.0.0.1:8080"), (b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": headers,
             "client": ("127.0.0.1", 5555), "server": ("127.0.0.1", 8080)}
    await app(scope, receive, send)
    data = b"".join(m.get("body", b"") for m in sent[1:])
    if sent[0]["status"] != 200:
        raise RuntimeError(f"{path} answered {sent[0]['status']}: {data[:200]!r}")
    answer: dict[str, Any] = json.loads(data)
    return answer


def _settle(tokens: Any) -> None:
    """kernel.tokens.settle(); in an older checkout, without it, the same wait for the loading thread."""
    if hasattr(tokens, "settle"):
        tokens.settle()
    elif getattr(tokens, "_promotion", None) is not None:
        tokens._promotion.join()


async def drive(turns: int) -> int:
    """The set-up, then `turns` web turns; the turns answered."""
    from bench.procs import hilo_env
    from bench.web_load_gen import user_line

    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(hilo_env(Path(tmp) / "hilo.db"))
        from bot.app import create_app
        from bot.config import Settings
        from kernel import log, tokens

        log.configure("warning")
        app = create_app(Settings.from_env(dotenv_path=os.path.join(tmp, ".env")))
        rng = random.Random(3)
        answered = 0
        async with app.router.lifespan_context(app):
            visitors: list[list[Any]] = [[(await post_json(app, "/api/session"))["session"], None]
                                         for _ in range(VISITORS)]

            async def turn(i: int) -> None:
                visitor = visitors[i % VISITORS]
                body = json.dumps({"text": user_line("en", rng), "conversation_id": visitor[1]}).encode()
                visitor[1] = (await post_json(app, "/api/messages", body, visitor[0]))["conversation_id"]

            for i in range(VISITORS * SETUP_TURNS):
                await turn(i)
            # the set-up counted enough to start loading tiktoken: the turns measured all count through it
            await asyncio.to_thread(_settle, tokens)
            for i in range(turns):
                await turn(i)
                answered += 1
        return answered


def _callgrind(src: Path, turns: int, out: Path) -> dict[int, int]:
    """Instructions of each thread (by callgrind's number) of one run of `drive(turns)` under callgrind."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONHASHSEED="0", PYTHONPATH=str(src))
    # this file runs as a script, the app and bench's helpers imported from `src` (an older checkout has no copy)
    subprocess.run(["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}",
                    sys.executable, str(Path(__file__).resolve()), "--drive", "--turns", str(turns)],
                   env=env, cwd=src, check=True, capture_output=True)
    counts: dict[int, int] = {}
    for part in out.parent.glob(out.name + "-*"):
        summary = re.search(r"^summary: (\d+)", part.read_text(errors="replace"), re.MULTILINE)
        counts[int(part.name.rsplit("-", 1)[1])] = int(summary.group(1)) if summary else 0
    return counts


def measure(src: Path, turns: int, short: int) -> dict[str, Any]:
    """Instructions per turn: the difference of two runs, every thread's together (threads are numbered in the
    order they start, which varies from run to run)."""
    # once without callgrind first: a checkout's first start builds the tokenizer's cached index (hundreds of
    # millions of instructions), which would land in whichever measured run came first
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--drive", "--turns", "1"],
                   env={**env, "PYTHONPATH": str(src)}, cwd=src, check=True, capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        runs = [sum(_callgrind(src, n, Path(tmp) / f"cg{n}").values()) for n in (short, turns)]
    return {"src": str(src), "turns": turns, "turns_short": short,
            "instructions_per_turn": round((runs[1] - runs[0]) / (turns - short))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--src", type=Path, default=ROOT, help="the hilo checkout to measure")
    p.add_argument("--turns", type=int, default=250)
    p.add_argument("--turns-short", type=int, default=50)
    p.add_argument("--drive", action="store_true", help="run the turns here, without callgrind")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "turn_instructions.json")
    args = p.parse_args(argv)
    if args.drive:
        print(asyncio.run(drive(args.turns)), "turns answered")
        return 0
    result = measure(args.src.resolve(), args.turns, args.turns_short)
    print(f"{result['src']}: {result['instructions_per_turn'] / 1e3:,.0f}k instructions per web turn")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
