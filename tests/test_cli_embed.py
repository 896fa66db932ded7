"""`hilo embed` (the backfill) and the progress of `hilo import`, as a person runs them: real subprocesses, the
real local model, a SQLite file. The paraphrase question is found through its vector only once `hilo embed` ran."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LINES = [("I'm allergic to peanuts", "2026-01-05T10:00:00Z")] + [
    (text, f"2026-02-{day:02d}T10:00:00Z") for day, text in enumerate(
        ["the weather was lovely on the coast", "I finished the quarterly report at work", "my cousin visits in June",
         "we watched a film about pirates", "the train was late again", "I repainted the kitchen blue"], start=1)]
QUESTION = "Which food should I avoid for health reasons?"
Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cli(tmp_path: Path) -> Run:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HILO_", "OPENAI_", "ANTHROPIC_"))}
    env.update(HILO_DATABASE_URL=f"sqlite:///{tmp_path / 'hilo.db'}", PYTHONPATH=str(REPO))

    def run(*args: str, code: int = 0, **extra: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, "-m", "bot.cli", *args], cwd=tmp_path, env={**env, **extra},
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == code, proc.stderr
        return proc

    return run


@pytest.fixture
def history(tmp_path: Path) -> Path:
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps({"user": "ana", "surface": "telegram", "role": "user", "content": text,
                                        "created_at": at, "external_id": f"m{i}"}) + "\n"
                            for i, (text, at) in enumerate(LINES)))
    return path


def recalled(cli: Run) -> list[str | None]:
    out = json.loads(cli("context", "--user", "ana", "--surface", "web", "--json", QUESTION).stdout)
    return [i["external_id"] for i in out["items"] if i["kind"] == "recalled_message"]


def test_hilo_embed_gives_every_message_a_vector_and_the_paraphrase_is_found(cli: Run, history: Path) -> None:
    assert cli("import", str(history)).stdout == f"imported {len(LINES)} messages, skipped 0 already stored\n"
    assert "m0" not in recalled(cli), "no word in common: lexical recall cannot find it"
    done = cli("embed", "--batch", "4")
    assert done.stdout == f"embedded {len(LINES)} messages with local:use-multilingual-v3, 0 had vectors already\n"
    assert done.stderr.splitlines()[-1] == f"embed (local:use-multilingual-v3): {len(LINES)}/{len(LINES)} messages"
    assert "m0" in recalled(cli)
    again = cli("embed", "--user", "ana")
    assert again.stdout == f"embedded 0 messages with local:use-multilingual-v3, {len(LINES)} had vectors already\n"
    assert "m0" not in recalled_with(cli, HILO_EMBEDDER="none"), "HILO_EMBEDDER=none: lexical only"


def recalled_with(cli: Run, **env: str) -> list[str | None]:
    out = json.loads(cli("context", "--user", "ana", "--surface", "web", "--json", QUESTION, **env).stdout)
    return [i["external_id"] for i in out["items"] if i["kind"] == "recalled_message"]


def test_hilo_embed_without_an_embedder_or_a_person_says_what_to_do(cli: Run, history: Path) -> None:
    cli("import", str(history))
    assert "set HILO_EMBEDDER=local or openai" in cli("embed", code=2, HILO_EMBEDDER="none").stderr
    assert "no person with handle 'bob'" in cli("embed", "--user", "bob", code=1).stderr


def test_hilo_import_shows_a_bar_on_a_terminal_and_keeps_its_one_line(tmp_path: Path, history: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HILO_", "OPENAI_", "ANTHROPIC_"))}
    env.update(HILO_DATABASE_URL=f"sqlite:///{tmp_path / 'tty.db'}", PYTHONPATH=str(REPO))
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal 100 columns wide
    try:
        proc = subprocess.run([sys.executable, "-m", "bot.cli", "import", str(history)], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=follower, text=True, timeout=60)
        os.close(follower)
        follower = -1
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed: everything was read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    assert proc.returncode == 0
    assert proc.stdout == f"imported {len(LINES)} messages, skipped 0 already stored\n"
    assert b"import: 100%" in shown and f"{len(LINES)}/{len(LINES)}".encode() in shown, shown


MEMORIES = ["My sister is called Marta", "I have a dog called Rex", "I work at Acme", "I'm vegetarian"]
SIBLING = "what is my sibling named?"  # no word in common with any memory


def memory_scores(cli: Run, question: str) -> dict[int, dict[str, float]]:
    out = json.loads(cli("context", "--user", "ana", "--surface", "web", "--json", question).stdout)
    return {i["memory_id"]: i["scores"] for i in out["items"] if i["kind"] == "fact"}


def test_hilo_embed_gives_memories_vectors_and_a_question_finds_one_by_its_cosine(cli: Run) -> None:
    ids = [int(cli("remember", "--user", "ana", text).stdout.split("(fact ")[1].split(",")[0]) for text in MEMORIES]
    before = memory_scores(cli, SIBLING)
    assert all("cosine" not in s and s["relevance"] == 0 for s in before.values()), before
    done = cli("embed")
    assert done.stdout == ("embedded 0 messages with local:use-multilingual-v3, 0 had vectors already\n"
                           f"embedded {len(MEMORIES)} memories, 0 had vectors already, "
                           "0 merged into a near-duplicate\n")
    assert done.stderr.splitlines()[-1] == (
        f"embed memories (local:use-multilingual-v3): {len(MEMORIES)}/{len(MEMORIES)} memories")
    after = memory_scores(cli, SIBLING)
    sister = after[ids[0]]
    assert sister["cosine"] == max(s["cosine"] for s in after.values())
    assert sister["relevance"] > 0 and sister["pool"] == max(s["pool"] for s in after.values())
    assert all(s["relevance"] < sister["relevance"] for i, s in after.items() if i != ids[0])
