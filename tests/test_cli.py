"""The CLI contract (README, "Command line"), run as a real process against a real SQLite file."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.config import Settings
from bot.models.factory import build_chain
from bot.pipeline import Pipeline
from kernel import catalog
from memory.open import open_store
from surfaces import cli as cli_surface
from tests.fakes.full_disk import PAGE_SIZED_TEXT, disk_full

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def hilo(tmp_path: Path):  # type: ignore[no-untyped-def]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HILO_", "OPENAI_", "ANTHROPIC_"))}
    env.pop("DATABASE_URL", None)
    env["HILO_DATABASE_URL"] = f"sqlite:///{tmp_path / 'hilo.db'}"
    env["PYTHONPATH"] = str(REPO)

    def run(*args: str, stdin: str | None = None, code: int = 0) -> str:
        proc = subprocess.run([sys.executable, "-m", "bot.cli", *args], cwd=tmp_path, env=env, input=stdin,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == code, proc.stderr
        return proc.stdout if code == 0 else proc.stderr

    return run


def test_chat_on_telegram_then_context_on_whatsapp_shows_it_cross_surface(hilo) -> None:  # type: ignore[no-untyped-def]
    reply = hilo("chat", "--user", "alice", "--surface", "telegram", "I live in Valencia")
    assert reply.startswith("[echo")
    ctx = json.loads(hilo("context", "--user", "alice", "--surface", "whatsapp", "--json", "where do I live?"))
    cross = [i for i in ctx["items"] if i["block"] == "cross_surface"]
    assert [i["surface"] for i in cross] == ["telegram", "telegram"]  # what alice said, and the reply
    assert any("I live in Valencia" in m["content"] for m in ctx["messages"])
    assert ctx["messages"][-1] == {"role": "user", "content": "where do I live?"}
    assert set(ctx["tokens"]) >= {"total", "budget", "system", "memory", "cross_surface", "conversation",
                                  "new_message"}
    assert ctx["tokens"]["total"] <= ctx["tokens"]["budget"]


def test_context_writes_nothing_and_at_looks_back(hilo) -> None:  # type: ignore[no-untyped-def]
    hilo("chat", "--user", "alice", "--surface", "telegram", "I live in Valencia")
    before = hilo("inspect", "--user", "alice", "--json")
    hilo("context", "--user", "alice", "--surface", "whatsapp", "where do I live?")
    assert hilo("inspect", "--user", "alice", "--json") == before
    past = json.loads(hilo("context", "--user", "alice", "--surface", "whatsapp", "--json",
                           "--at", "2000-01-01T00:00:00Z", "where do I live?"))
    assert [i["block"] for i in past["items"]] == ["system", "new_message"]


def test_context_batch_mode_prints_one_json_per_line(hilo) -> None:  # type: ignore[no-untyped-def]
    hilo("chat", "--user", "bob", "--surface", "cli", "my dog is called Rufo")
    out = hilo("context", "--user", "bob", "--surface", "cli", "-", stdin="first\nsecond\n\nthird\n")
    lines = [json.loads(line) for line in out.splitlines()]
    assert [x["messages"][-1]["content"] for x in lines] == ["first", "second", "third"]


def test_commands_without_a_model_import_no_provider_sdk(tmp_path: Path) -> None:
    code = (
        "import sys; from bot.cli import main; "
        f"main(['context', '--db', 'sqlite:///{tmp_path / 'x.db'}', '--user', 'u', '--surface', 'cli', 'hi']); "
        "print('SDKS', 'openai' in sys.modules, 'anthropic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "SDKS False False" in out.stdout, out.stderr


def test_forget_leaves_nothing(hilo) -> None:  # type: ignore[no-untyped-def]
    hilo("chat", "--user", "alice", "--surface", "telegram", "I live in Valencia")
    hilo("remember", "--user", "alice", "alice is vegetarian")
    assert "Valencia" in hilo("inspect", "--user", "alice")
    assert "deleted" in hilo("forget", "--user", "alice")
    assert json.loads(hilo("inspect", "--user", "alice", "--json")) is None
    ctx = json.loads(hilo("context", "--user", "alice", "--surface", "whatsapp", "--json", "Valencia vegetarian"))
    assert [i["block"] for i in ctx["items"]] == ["system", "new_message"]


def test_remember_feeds_the_memory_block(hilo) -> None:  # type: ignore[no-untyped-def]
    hilo("remember", "--user", "carol", "carol prefers Spanish")
    ctx = json.loads(hilo("context", "--user", "carol", "--surface", "web", "--json", "hola"))
    facts = [i for i in ctx["items"] if i["kind"] == "fact"]
    assert len(facts) == 1 and facts[0]["block"] == "memory"


def test_memory_lists_and_forget_memory_forgets_one(hilo) -> None:  # type: ignore[no-untyped-def]
    assert "(fact 1, m1)" in hilo("remember", "--user", "erin", "erin works at Acme")
    hilo("remember", "--user", "erin", "erin has a dog called Rex")
    listed = json.loads(hilo("memory", "--user", "erin", "--json"))
    assert [(m["id"], m["content"], m["source"], m["confidence"]) for m in listed] == [
        ("m2", "erin has a dog called Rex", "stated", 1.0), ("m1", "erin works at Acme", "stated", 1.0)]
    assert "m1 " in hilo("memory", "--user", "erin") and "2 memories of erin" in hilo("memory", "--user", "erin")
    assert "forgot m1 of erin" in hilo("forget", "--user", "erin", "--memory", "m1")
    assert [m["id"] for m in json.loads(hilo("memory", "--user", "erin", "--json"))] == ["m2"]
    assert json.loads(hilo("inspect", "--user", "erin", "--json")) is not None  # the person stays
    ctx = json.loads(hilo("context", "--user", "erin", "--surface", "cli", "--json", "where does erin work?"))
    [memory] = [i for i in ctx["items"] if i["kind"] == "fact"]
    assert memory["memory_id"] == 2 and set(memory["scores"]) == {
        "pool", "memory", "relevance", "importance", "confidence", "recency", "frequency"}


def test_remember_and_forget_typed_in_hilo_chat(hilo) -> None:  # type: ignore[no-untyped-def]
    assert "(m1)" in hilo("chat", "--user", "hana", "/remember my bike is red")
    assert [m["content"] for m in json.loads(hilo("memory", "--user", "hana", "--json"))] == ["my bike is red"]
    assert "- m1: my bike is red" in hilo("chat", "--user", "hana", "/memory")
    assert "Forgotten (m1)" in hilo("chat", "--user", "hana", "/forget bike")
    assert json.loads(hilo("memory", "--user", "hana", "--json")) == []


def test_forget_memory_of_someone_else_fails_clearly(hilo) -> None:  # type: ignore[no-untyped-def]
    hilo("remember", "--user", "finn", "finn likes tea")
    hilo("remember", "--user", "gwen", "gwen likes coffee")
    out = hilo("forget", "--user", "gwen", "--memory", "m1", code=1)
    assert "gwen has no memory m1" in out
    assert [m["id"] for m in json.loads(hilo("memory", "--user", "finn", "--json"))] == ["m1"]
    assert "not a memory id" in hilo("forget", "--user", "gwen", "--memory", "tea", code=2)


def test_import_twice_stores_each_message_once(hilo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lines = [
        {"user": "dana", "surface": "telegram", "role": "user", "content": f"message {i}",
         "created_at": f"2026-11-01T10:{i:02d}:00Z", "external_id": f"tg-{i}"}
        for i in range(50)
    ] + [{"user": "dana", "surface": "web", "role": "assistant", "content": "web reply",
          "created_at": "2026-11-01T11:00:00Z", "external_id": "w-1", "conversation": "support-1"}]
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert "imported 51 messages, skipped 0" in hilo("import", str(path))
    assert "imported 0 messages, skipped 51" in hilo("import", str(path))
    data = json.loads(hilo("inspect", "--user", "dana", "--json"))
    contents = [m["content"] for c in data["conversations"] for m in c["messages"]]
    assert len(contents) == 51 and len(set(contents)) == 51


def test_import_names_the_bad_line_keeps_what_came_before_and_goes_on_once_fixed(hilo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.jsonl"
    good = {"user": "eve", "surface": "telegram", "role": "user", "content": "hi", "created_at": "2026-11-01T10:00:00Z"}
    after = {**good, "content": "after", "created_at": "2026-11-01T10:05:00Z"}
    path.write_text("\n".join(json.dumps(x) for x in (good, {**good, "role": "robot"}, after)) + "\n")
    err = hilo("import", str(path), code=1)
    assert "line 2" in err and "role" in err and "the 1 lines before it are stored" in err
    stored = json.loads(hilo("inspect", "--user", "eve", "--json"))
    assert [m["content"] for c in stored["conversations"] for m in c["messages"]] == ["hi"]
    path.write_text("\n".join(json.dumps(x) for x in (good, {**good, "role": "assistant"}, after)) + "\n")
    assert "imported 2 messages, skipped 1" in hilo("import", str(path))  # a line without external_id: once
    stored = json.loads(hilo("inspect", "--user", "eve", "--json"))
    assert sorted(m["content"] for c in stored["conversations"] for m in c["messages"]) == ["after", "hi", "hi"]


def test_migrate_is_idempotent(hilo) -> None:  # type: ignore[no-untyped-def]
    first = hilo("migrate")
    assert "applied 0001" in first
    assert "up to date" in hilo("migrate")


def test_a_wrong_setting_stops_with_what_to_set(hilo) -> None:  # type: ignore[no-untyped-def]
    err = hilo("migrate", "--db", "mysql://nope", code=2)
    assert "HILO_DATABASE_URL" in err or "sqlite:///" in err


def test_operator_link_and_unlink(hilo) -> None:  # type: ignore[no-untyped-def]
    hilo("chat", "--user", "frank", "--surface", "cli", "my dog is called Rufo")
    assert "linked telegram:99 to frank" in hilo("link", "--user", "frank", "--surface", "telegram", "--sender", "99")
    data = json.loads(hilo("inspect", "--user", "frank", "--json"))
    assert [(i["surface"], i["external_user_id"]) for i in data["identities"]] == [("telegram", "99")]
    assert [a["action"] for a in data["identity_audit"]] == ["linked"]
    assert "no user" in hilo("link", "--user", "ghost", "--surface", "telegram", "--sender", "1", code=1)
    assert "only identity" in hilo("unlink", "--surface", "telegram", "--sender", "99", code=1)


@pytest.fixture
async def sqlite_store(db_url: str) -> AsyncIterator[Any]:
    """A SQLite store: disk_full caps the pages of a SQLite file (a full disk on Postgres is the server's)."""
    store = open_store(db_url)
    await store.open()
    yield store
    await store.close()


async def test_chat_on_a_full_disk_says_store_unavailable_and_the_repl_goes_on(
    sqlite_store: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SQLite really answering "database or disk is full" (a StoreError) while `hilo chat` ingests a line."""
    store = sqlite_store
    settings = Settings()
    pipeline = Pipeline(settings, store, build_chain(settings))
    async with disk_full(store):
        assert await cli_surface.one_turn(pipeline, "alice", "cli", PAGE_SIZED_TEXT) == 1
        err = capsys.readouterr().err
        assert catalog.t("store_unavailable", "en") in err and "database or disk is full" in err
        monkeypatch.setattr("sys.stdin", io.StringIO(PAGE_SIZED_TEXT + "\n"))
        assert await cli_surface.repl(pipeline, "alice", "cli") == 0  # the REPL reads on after it
    assert await store.inspect("alice") is None  # nothing half-stored
    monkeypatch.setattr("sys.stdin", io.StringIO("and now?\n"))
    assert await cli_surface.repl(pipeline, "alice", "cli") == 0
    assert "and now?" in capsys.readouterr().out


def test_a_command_parsed_alone_is_parsed_and_explained_as_among_all_of_them() -> None:
    # bot/cli.py builds only the subparser of the command on the line (start-up time): it must be the same one
    import argparse

    from bot import cli

    def subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        [action] = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        return dict(action.choices)

    every = subparsers(cli.parser())
    assert list(every) == list(cli.COMMANDS)
    for name, full in every.items():
        alone = subparsers(cli.parser([name, "--user", "ana"]))
        assert list(alone) == [name]
        assert alone[name].format_help() == full.format_help(), name
        assert alone[name].get_default("fn") is not None
    assert list(subparsers(cli.parser(["--help", "context"]))) == list(cli.COMMANDS)
    assert list(subparsers(cli.parser(["contex"]))) == list(cli.COMMANDS)  # argparse names the choices


def test_a_reader_that_goes_away_gets_no_traceback(tmp_path: Path) -> None:
    """`hilo context ... | head`: the reader of stdout closes it before the command writes; the command ends with
    the shell's code for a closed pipe (141) and says nothing on stderr, as git and the coreutils do."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HILO_", "OPENAI_", "ANTHROPIC_"))}
    env.pop("DATABASE_URL", None)
    env.update(HILO_DATABASE_URL=f"sqlite:///{tmp_path / 'hilo.db'}", PYTHONPATH=str(REPO))
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command starts: its first write meets a closed pipe
    try:
        proc = subprocess.run([sys.executable, "-m", "bot.cli", "context", "--user", "ana", "--surface", "web",
                               "hello"], cwd=tmp_path, env=env, stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=60)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, "")
