"""The record of erasures kept outside the database (bot/erasures.py): each `hilo forget` and `/forget yes` is noted
first, in HILO_DATA_DIR/erasures.jsonl, and a start of `hilo serve` forgets again whoever a restored backup brought
back, and nobody who came back by themselves since."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from bot import erasures as erasures_module
from bot.erasures import Erasures, digests
from kernel.types import utcnow
from memory.store import Store
from tests.backends import TestClock
from tests.fakes.postgres import SERVER, client_tool, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)
from tests.fakes.serve_process import ServeProcess, clean_env, serving


def hilo(cwd: Path, url: str, *args: str, code: int = 0) -> str:
    """`hilo ARGS` on the database `url`, its data directory `cwd`/data: its stdout, or its stderr when it must
    fail (one line, no traceback)."""
    proc = subprocess.run([sys.executable, "-m", "bot.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=clean_env({"HILO_DATABASE_URL": url, "HILO_DATA_DIR": str(cwd / "data")}), timeout=60)
    assert proc.returncode == code, proc.stdout + proc.stderr
    if code:
        assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    return proc.stdout if code == 0 else proc.stderr


def started_and_stopped(cwd: Path, url: str) -> list[dict[str, object]]:
    """`hilo serve` started on `url` (JSON logs) and stopped: its log records."""
    daemon = ServeProcess(cwd, {"HILO_DATABASE_URL": url, "HILO_DATA_DIR": str(cwd / "data"),
                                "HILO_LOG_FORMAT": "json"})
    try:
        daemon.wait_started()
        daemon.terminate()
        assert daemon.wait() == 0, "\n".join(daemon.lines)
    finally:
        daemon.kill()
    return [json.loads(line) for line in daemon.lines if line.startswith("{")]


def events(records: list[dict[str, object]], name: str) -> list[dict[str, object]]:
    return [r for r in records if r["event"] == name]


def restore(db: Path) -> None:
    """The restore docs/deploy.md gives: backup.db beside it in place of the database `db`, no -wal or -shm of the
    database before."""
    for leftover in (db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        leftover.unlink(missing_ok=True)
    shutil.copyfile(db.with_name("backup.db"), db)


def said_by(cwd: Path, url: str, handle: str) -> list[str]:
    record = json.loads(hilo(cwd, url, "inspect", "--user", handle, "--json"))
    if record is None:
        return []
    return [m["content"] for c in record["conversations"] for m in c["messages"] if m["role"] == "user"]


def test_a_restored_sqlite_backup_does_not_bring_a_forgotten_person_back(tmp_path: Path) -> None:
    db = tmp_path / "hilo.db"
    url = f"sqlite:///{db}"
    hilo(tmp_path, url, "chat", "--user", "alice", "--surface", "telegram", "my phone is 600 123 456")
    hilo(tmp_path, url, "chat", "--user", "bob", "--surface", "whatsapp", "I live in Valencia")
    hilo(tmp_path, url, "backup", "backup.db")
    # `hilo chat` speaks as a handle, with no identity on a platform (the walk test below matches those)
    identities = [(i["surface"], i["external_user_id"])
                  for i in json.loads(hilo(tmp_path, url, "inspect", "--user", "alice", "--json"))["identities"]]
    assert "deleted" in hilo(tmp_path, url, "forget", "--user", "alice")
    record = tmp_path / "data" / "erasures.jsonl"
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    text = record.read_text()
    # the digests of the handle and of each identity, never the identifiers
    assert json.loads(text)["ids"] == digests("alice", identities) == digests("alice", [])
    assert "alice" not in text
    restore(db)
    assert said_by(tmp_path, url, "alice") == ["my phone is 600 123 456"]  # the backup brought her back

    logs = started_and_stopped(tmp_path, url)
    assert said_by(tmp_path, url, "alice") == []
    assert said_by(tmp_path, url, "bob") == ["I live in Valencia"]
    assert [(e["people"], e["entries"]) for e in events(logs, "erasures.reapplied")] == [(1, 1)]
    assert [e["handle"] for e in events(logs, "person.forgotten")] == ["alice"]
    # the next start finds nobody to forget, and says nothing of it
    assert events(started_and_stopped(tmp_path, url), "erasures.reapplied") == []
    # a backup holding the mark of what was applied by then, and an erasure after it: restored, bob goes too
    hilo(tmp_path, url, "backup", "backup.db")
    hilo(tmp_path, url, "forget", "--user", "bob")
    restore(db)
    assert said_by(tmp_path, url, "bob") == ["I live in Valencia"]
    logs = started_and_stopped(tmp_path, url)
    assert said_by(tmp_path, url, "bob") == [] and said_by(tmp_path, url, "alice") == []
    assert [(e["people"], e["entries"]) for e in events(logs, "erasures.reapplied")] == [(1, 2)]


def test_hilo_migrate_after_a_restore_forgets_again_before_anything_else_reads(tmp_path: Path) -> None:
    db = tmp_path / "hilo.db"
    url = f"sqlite:///{db}"
    hilo(tmp_path, url, "chat", "--user", "alice", "--surface", "telegram", "/remember my address is Calle Mayor 5")
    hilo(tmp_path, url, "chat", "--user", "bob", "--surface", "telegram", "hello")
    hilo(tmp_path, url, "backup", "backup.db")
    hilo(tmp_path, url, "forget", "--user", "alice", "--memory", "m1")
    hilo(tmp_path, url, "forget", "--user", "bob")
    restore(db)
    assert hilo(tmp_path, url, "migrate").splitlines() == [
        "the database is up to date",
        "applied again 2 erasures of the record of erasures (people or memories a restore brought back)"]
    assert memories_of(tmp_path, url, "alice") == [] and said_by(tmp_path, url, "bob") == []
    assert hilo(tmp_path, url, "migrate").strip() == "the database is up to date"


def test_someone_who_came_back_after_their_erasure_keeps_what_they_said_since(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hilo.db'}"
    hilo(tmp_path, url, "chat", "--user", "alice", "--surface", "telegram", "before")
    hilo(tmp_path, url, "forget", "--user", "alice")
    hilo(tmp_path, url, "chat", "--user", "alice", "--surface", "telegram", "I am back")
    logs = started_and_stopped(tmp_path, url)
    assert said_by(tmp_path, url, "alice") == ["I am back"]
    assert events(logs, "erasures.reapplied") == []


def test_a_persons_own_forget_is_noted_before_anything_is_deleted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hilo.db'}"
    hilo(tmp_path, url, "chat", "--user", "alice", "--surface", "telegram", "hello")
    hilo(tmp_path, url, "backup", "backup.db")
    hilo(tmp_path, url, "chat", "--user", "alice", "--surface", "telegram", "/forget yes")
    assert said_by(tmp_path, url, "alice") == []
    [line] = (tmp_path / "data" / "erasures.jsonl").read_text().splitlines()
    assert json.loads(line)["ids"][0] == digests("alice", [])[0]
    restore(tmp_path / "hilo.db")
    started_and_stopped(tmp_path, url)
    assert said_by(tmp_path, url, "alice") == []


def test_an_erasure_that_cannot_be_noted_deletes_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hilo.db'}"
    hilo(tmp_path, url, "chat", "--user", "alice", "--surface", "telegram", "hello")
    (tmp_path / "data" / "erasures.jsonl").mkdir(parents=True)  # where the record goes: not a file it can append to
    err = hilo(tmp_path, url, "forget", "--user", "alice", code=1)
    assert "erasures.jsonl cannot be written" in err and "nothing was forgotten" in err, err
    assert said_by(tmp_path, url, "alice") == ["hello"]


def test_a_record_that_cannot_be_read_stops_the_start_in_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hilo.db'}"
    hilo(tmp_path, url, "migrate")
    (tmp_path / "data" / "erasures.jsonl").mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-m", "bot.cli", "serve", "--port", "0"], cwd=tmp_path, timeout=60,
                          capture_output=True, text=True,
                          env=clean_env({"HILO_DATABASE_URL": url, "HILO_DATA_DIR": str(tmp_path / "data")}))
    assert proc.returncode != 0
    failed = [line for line in proc.stderr.splitlines() + proc.stdout.splitlines() if "daemon.failed" in line]
    assert len(failed) == 1 and "cannot read the record of erasures" in failed[0], proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_line_cut_by_a_crash_is_skipped_and_said_and_the_others_apply(tmp_path: Path) -> None:
    db = tmp_path / "hilo.db"
    url = f"sqlite:///{db}"
    for who in ("alice", "bob", "carol"):
        hilo(tmp_path, url, "chat", "--user", who, "--surface", "telegram", f"I am {who}")
    hilo(tmp_path, url, "backup", "backup.db")
    hilo(tmp_path, url, "forget", "--user", "alice")
    record = tmp_path / "data" / "erasures.jsonl"
    cut = '{"at": "2026-12-07T22:4'
    with record.open("a") as fh:
        fh.write('{"at": 1765147200, "ids": ["handle:00"]}\n')  # hand-written, not a line of this record
        fh.write(cut)  # bob's line, cut by a crash: his erasure never began
    hilo(tmp_path, url, "forget", "--user", "carol")  # the next line starts on a line of its own
    restore(db)
    logs = started_and_stopped(tmp_path, url)
    assert said_by(tmp_path, url, "alice") == [] and said_by(tmp_path, url, "carol") == []
    assert said_by(tmp_path, url, "bob") == ["I am bob"]
    assert [(e["line"], e["bytes"]) for e in events(logs, "erasures.line_unreadable")] == [(2, 40), (3, len(cut))]
    assert [(e["people"], e["entries"]) for e in events(logs, "erasures.reapplied")] == [(2, 2)]


def test_a_restored_postgres_dump_does_not_bring_a_forgotten_person_back(tmp_path: Path) -> None:
    source, target = SERVER.create_database(), SERVER.create_database()
    hilo(tmp_path, source, "chat", "--user", "alice", "--surface", "telegram", "my phone is 600 123 456")
    hilo(tmp_path, source, "chat", "--user", "bob", "--surface", "telegram", "I live in Valencia")
    dump = tmp_path / "hilo.dump"
    subprocess.run([client_tool("pg_dump"), "--format=custom", f"--file={dump}", source], check=True,
                   capture_output=True, timeout=120)
    hilo(tmp_path, source, "forget", "--user", "alice")
    subprocess.run([client_tool("pg_restore"), f"--dbname={target}", dump], check=True, capture_output=True,
                   timeout=120)
    assert said_by(tmp_path, target, "alice") == ["my phone is 600 123 456"]
    logs = started_and_stopped(tmp_path, target)
    assert said_by(tmp_path, target, "alice") == [] and said_by(tmp_path, target, "bob") == ["I live in Valencia"]
    assert [e["people"] for e in events(logs, "erasures.reapplied")] == [1]


async def test_the_walk_finds_everyone_listed_across_pages_by_handle_or_identity(
        store: Store, clock: TestClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(erasures_module, "PAGE", 2)  # five people: three pages
    handles = []
    for n in range(5):
        await store.identity_user("telegram", f"tg{n}", create=True)
        handles.append(await store.identity_handle("telegram", f"tg{n}"))
    record = Erasures(tmp_path / "erasures.jsonl")
    created = utcnow()
    # tg1 by its identity, tg4 by its handle alone; tg2 was "erased" before it existed (so it came back since)
    await record.note("someone-else", [("telegram", "tg1")])
    await record.note(str(handles[4]), [])
    await record.note(str(handles[2]), [("telegram", "tg2")], at=created - timedelta(hours=1))
    forgotten: list[str] = []

    async def forget(handle: str) -> None:
        forgotten.append(handle)
        assert await store.erase(handle) is not None

    assert await record.reapply(store, forget) == 2
    assert forgotten == [handles[1], handles[4]]
    assert await store.identities_of(str(handles[1])) is None
    assert await store.identities_of(str(handles[2])) == [("telegram", "tg2")]
    # applied up to its newest erasure: the next start reads the mark and walks nobody
    name, entries = record.read()
    assert await store.erasures_through(name) == max(e.at for e in entries)
    clock.advance(-3600)
    await store.identity_user("telegram", "tg1", create=True)  # created before its erasure, as a restore brings it
    clock.advance(3600)
    assert await record.reapply(store, forget) == 0 and len(forgotten) == 2  # not looked for
    await record.note("someone-new", [])  # a newer erasure: the next start walks everyone again, and finds it
    assert await record.reapply(store, forget) == 1
    assert await store.identity_handle("telegram", "tg1") is None



def memories_of(cwd: Path, url: str, handle: str) -> list[str]:
    return [m["content"] for m in json.loads(hilo(cwd, url, "memory", "--user", handle, "--all", "--json"))]


def test_a_memory_forgotten_after_a_backup_stays_forgotten_when_it_is_restored(tmp_path: Path) -> None:
    db = tmp_path / "hilo.db"
    url = f"sqlite:///{db}"
    for fact in ("my address is Calle Mayor 5", "I like tea"):
        hilo(tmp_path, url, "chat", "--user", "alice", "--surface", "telegram", f"/remember {fact}")
    hilo(tmp_path, url, "backup", "backup.db")
    assert hilo(tmp_path, url, "forget", "--user", "alice", "--memory", "m1").strip() == "forgot m1 of alice"
    [line] = (tmp_path / "data" / "erasures.jsonl").read_text().splitlines()
    assert "Calle" not in line and json.loads(line)["memory"] == [1, 1]  # the user's id and the memory's: no text
    restore(db)
    assert memories_of(tmp_path, url, "alice") == ["I like tea", "my address is Calle Mayor 5"]
    logs = started_and_stopped(tmp_path, url)
    assert memories_of(tmp_path, url, "alice") == ["I like tea"]
    assert json.loads(hilo(tmp_path, url, "inspect", "--user", "alice", "--json"))["user"]["handle"] == "alice"
    assert [(e["people"], e["memories"]) for e in events(logs, "erasures.reapplied")] == [(0, 1)]


def test_the_widgets_forget_is_noted_and_one_that_cannot_be_noted_is_a_503_that_deletes_nothing(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hilo.db'}"
    env = {"HILO_DATABASE_URL": url, "HILO_DATA_DIR": str(tmp_path / "data"), "HILO_RATE_LIMIT_IP": "10000"}
    with serving(tmp_path, env) as daemon, httpx.Client(base_url=daemon.url, timeout=30) as client:
        auth = {"authorization": f"Bearer {client.post('/api/session').json()['session']}"}
        for fact in ("I live in Valencia", "I like tea"):
            said = client.post("/api/messages", json={"text": f"/remember {fact}"}, headers=auth)
            assert said.status_code == 200, said.text
        ids = {m["content"]: m["id"] for m in client.get("/api/memories", headers=auth).json()["memories"]}
        assert client.delete(f"/api/memories/{ids['I live in Valencia']}", headers=auth).status_code == 200
        record = tmp_path / "data" / "erasures.jsonl"
        [line] = record.read_text().splitlines()
        assert json.loads(line)["memory"][1] == int(ids["I live in Valencia"][1:])
        record.rename(tmp_path / "data" / "kept.jsonl")
        record.mkdir()  # the record cannot be appended to now
        refused = client.delete(f"/api/memories/{ids['I like tea']}", headers=auth)
        assert refused.status_code == 503 and refused.headers["retry-after"] == "5", refused.text
        assert [m["content"] for m in client.get("/api/memories", headers=auth).json()["memories"]] == ["I like tea"]


async def test_a_memory_stored_after_its_erasure_under_the_same_id_is_kept(store: Store, tmp_path: Path) -> None:
    """A restore sets the ids back: a memory stored since may have the id of one forgotten after the backup."""
    user_id = await store.identity_user("telegram", "tg1", create=True)
    assert user_id is not None
    kept = await store.remember(user_id, "I like tea", 3)
    gone = await store.remember(user_id, "my address is Calle Mayor 5", 6)
    record = Erasures(tmp_path / "erasures.jsonl")
    await record.note_memory(user_id, kept.id, at=kept.created_at - timedelta(seconds=1))  # before it was stored
    await record.note_memory(user_id, gone.id)

    async def nobody(handle: str) -> None:
        raise AssertionError(handle)

    assert await record.reapply(store, nobody) == 1
    assert [m.content for m in await store.memories(user_id)] == ["I like tea"]
