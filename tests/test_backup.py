"""`hilo backup FILE` (memory/sqlite_backup.py): a consistent copy of the SQLite database while hilo runs, with the
commits still in the -wal, never an uncommitted write, checked before it replaces the copy before; and clear
refusals (Postgres, a missing or foreign file, a damaged database, a bad destination) that leave nothing behind."""

from __future__ import annotations

import fcntl
import os
import re
import resource
import shlex
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from tests.fakes.postgres import SERVER, client_tool, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)
from tests.fakes.serve_process import REPO, clean_env, serving


def hilo(cwd: Path, db: Path | str, *args: str, code: int = 0, max_file_bytes: int | None = None) -> str:
    """`hilo ARGS` on the database `db` (a path, or a URL); its stdout, or its stderr when it must fail.
    `max_file_bytes`: no file it writes may grow past that (RLIMIT_FSIZE: the kernel refuses the write, as a full
    disk does)."""
    url = db if isinstance(db, str) else f"sqlite:///{db}"

    def small_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails (EFBIG) instead of the process dying
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))

    proc = subprocess.run([sys.executable, "-m", "bot.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=clean_env({"HILO_DATABASE_URL": url}), timeout=60,
                          preexec_fn=small_disk if max_file_bytes else None)
    assert proc.returncode == code, proc.stdout + proc.stderr
    if code:
        assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr  # one line, no trace
    return proc.stdout if code == 0 else proc.stderr


def rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute(sql).fetchall()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """hilo's database with one person's turn in it."""
    path = tmp_path / "hilo.db"
    hilo(tmp_path, path, "chat", "--user", "alice", "--surface", "telegram", "I live in Valencia")
    return path


def test_a_backup_while_hilo_serves_holds_every_answered_turn_and_hilo_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "hilo.db"
    env = {"HILO_DATABASE_URL": f"sqlite:///{path}", "HILO_RATE_LIMIT_IP": "10000"}
    with serving(tmp_path, env) as daemon, httpx.Client(base_url=daemon.url, timeout=30) as client:
        session = client.post("/api/session").json()["session"]
        for n in range(6):
            answer = client.post("/api/messages", json={"text": f"note number {n}: buy oranges"},
                                 headers={"authorization": f"Bearer {session}"})
            assert answer.status_code == 200, answer.text
        said = hilo(tmp_path, path, "backup", "copy.db")
        # the daemon goes on answering, and its next turn is not in the copy
        assert client.post("/api/messages", json={"text": "after the backup"},
                           headers={"authorization": f"Bearer {session}"}).status_code == 200
        served = rows(path, "SELECT role, content FROM messages ORDER BY id")
    copy = tmp_path / "copy.db"
    assert said.startswith("backed up to copy.db: ") and "12 messages of 1 people, schema 0" in said, said
    assert rows(copy, "SELECT role, content FROM messages ORDER BY id") == served[:12]
    assert len(served) == 14 and served[12] == ("user", "after the backup")
    # one self-contained file, readable by its owner only, whole
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert not (tmp_path / "copy.db-wal").exists() and not (tmp_path / "copy.db.partial").exists()
    assert rows(copy, "PRAGMA journal_mode") == [("delete",)] and rows(copy, "PRAGMA integrity_check") == [("ok",)]
    # hilo opens it as its own database: nothing to migrate, the web turns counted
    assert hilo(tmp_path, copy, "migrate").strip() == "the database is up to date"
    assert "web" in hilo(tmp_path, copy, "stats", "--days", "1")


def test_the_copy_holds_the_commits_still_in_the_wal_that_a_file_copy_misses(tmp_path: Path, db: Path) -> None:
    with closing(sqlite3.connect(db, isolation_level=None)) as writer:
        writer.execute("PRAGMA wal_autocheckpoint = 0")  # its commits stay in hilo.db-wal while it is open
        writer.executemany("INSERT INTO rate_counters(key, window_start, hits) VALUES (?, 60, 1)",
                           [(f"k{n}",) for n in range(50)])
        shutil.copyfile(db, tmp_path / "cp.db")  # what `cp hilo.db` takes
        hilo(tmp_path, db, "backup", "copy.db")
        assert rows(tmp_path / "cp.db", "SELECT count(*) FROM rate_counters") == [(0,)]
        assert rows(tmp_path / "copy.db", "SELECT count(*) FROM rate_counters") == [(50,)]


def test_a_backup_waits_for_no_writer_and_takes_only_what_is_committed(tmp_path: Path, db: Path) -> None:
    with closing(sqlite3.connect(db, isolation_level=None)) as writer:
        writer.execute("BEGIN IMMEDIATE")  # holds the write lock through the backup
        writer.execute("INSERT INTO rate_counters(key, window_start, hits) VALUES ('uncommitted', 60, 1)")
        hilo(tmp_path, db, "backup", "during.db")
        writer.execute("COMMIT")
    hilo(tmp_path, db, "backup", "after.db")
    assert rows(tmp_path / "during.db", "SELECT key FROM rate_counters") == []
    assert rows(tmp_path / "after.db", "SELECT key FROM rate_counters") == [("uncommitted",)]
    assert rows(tmp_path / "during.db", "SELECT content FROM messages WHERE role = 'user'") == [("I live in Valencia",)]


def _not_hilo(path: Path) -> None:
    path.unlink()
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")


def _text(path: Path) -> None:
    path.write_text("HILO_MODEL=echo\n")


def _damaged(path: Path) -> None:
    """hilo's database whose first index of `messages` has a root page that is no b-tree page any more: it opens,
    and its pages copy, but the copy fails its check."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode = DELETE")  # its pages in the file
        (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE type = 'index' AND tbl_name = 'messages' "
                               "ORDER BY name LIMIT 1").fetchone()
        (size,) = conn.execute("PRAGMA page_size").fetchone()
    with path.open("r+b") as f:
        f.seek((root - 1) * size)
        f.write(b"\x00")


@pytest.mark.parametrize(("damage", "says"), [
    (_not_hilo, "is not hilo's database"),
    (_text, "cannot be copied .*not a SQLite database"),
    (_damaged, "failed its check .*btreeInitPage.* no backup was written"),
], ids=["another SQLite database", "a text file", "a damaged hilo database"])
def test_a_source_that_cannot_be_backed_up_leaves_the_backup_before_as_it_was(
        tmp_path: Path, db: Path, damage: Callable[[Path], None], says: str) -> None:
    hilo(tmp_path, db, "backup", "copy.db")
    before = (tmp_path / "copy.db").read_bytes()
    damage(db)
    source = db.read_bytes()
    said(hilo(tmp_path, db, "backup", "copy.db", code=1), says)
    assert (tmp_path / "copy.db").read_bytes() == before
    assert db.read_bytes() == source
    assert not (tmp_path / "copy.db.partial").exists()


def said(text: str, pattern: str) -> None:
    assert re.search(pattern, text), text


@pytest.mark.parametrize(("url", "dest", "says"), [
    ("postgresql://hilo:secret@127.0.0.1:1/hilo", "x.db", "for Postgres use pg_dump"),
    ("sqlite:///{tmp}/nowhere.db", "x.db", "no database at .*nowhere.db"),
    ("sqlite:///:memory:", "x.db", "in-memory database has nothing to back up"),
    ("sqlite:///{tmp}/hilo.db", "missing/x.db", "missing does not exist: create it first"),
    ("sqlite:///{tmp}/hilo.db", ".", "is a directory: name the backup file"),
    ("sqlite:///{tmp}/hilo.db", "hilo.db", "is the database itself"),
    ("sqlite:///{tmp}/hilo.db", "hilo.db-wal", "is the database's own wal file"),
    ("sqlite:///{tmp}/hilo.db", "/proc/self/hilo.db", "could not write the backup /proc/self/hilo.db"),
], ids=["postgres", "no file", "in memory", "no folder", "a folder", "the database", "its wal", "unwritable"])
def test_what_cannot_be_a_backup_is_refused_and_nothing_is_written(
        tmp_path: Path, db: Path, url: str, dest: str, says: str) -> None:
    before = sorted(p.name for p in tmp_path.iterdir())
    refused = hilo(tmp_path, url.format(tmp=tmp_path), "backup", dest, code=1)
    said(refused, says)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no new database at a wrong path, no copy
    assert "secret" not in refused


def test_a_disk_too_small_for_the_copy_fails_clearly_and_keeps_the_backup_before(tmp_path: Path, db: Path) -> None:
    hilo(tmp_path, db, "backup", "copy.db")
    before = (tmp_path / "copy.db").read_bytes()
    said(hilo(tmp_path, db, "backup", "copy.db", code=1, max_file_bytes=len(before) // 4),
         r"could not write the backup copy.db \(disk I/O error\): check that its folder is writable .* room")
    assert (tmp_path / "copy.db").read_bytes() == before
    assert not (tmp_path / "copy.db.partial").exists()


@pytest.fixture
def partial_held(tmp_path: Path) -> Iterator[Path]:
    """copy.db.partial locked as a running `hilo backup` to copy.db holds it."""
    partial = tmp_path / "copy.db.partial"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield partial
    finally:
        os.close(fd)


def test_a_second_backup_to_the_same_file_is_refused_while_the_first_runs(
        tmp_path: Path, db: Path, partial_held: Path) -> None:
    said(hilo(tmp_path, db, "backup", "copy.db", code=1), "another hilo backup to copy.db is running")
    assert not (tmp_path / "copy.db").exists() and partial_held.exists()


def test_the_partial_file_of_a_killed_backup_is_taken_over(tmp_path: Path, db: Path) -> None:
    (tmp_path / "copy.db.partial").write_bytes(b"half of a copy")
    hilo(tmp_path, db, "backup", "copy.db")
    assert not (tmp_path / "copy.db.partial").exists()
    assert rows(tmp_path / "copy.db", "PRAGMA integrity_check") == [("ok",)]


def test_the_systemd_unit_writes_the_backup_of_the_day(tmp_path: Path, db: Path) -> None:
    """deploy/hilo-backup.service's command as systemd runs it (%% is %, $$ is $), on this checkout's hilo and a
    folder of the test's: one backup named after the weekday, which `date +%a` gives the shell."""
    unit = (REPO / "deploy" / "hilo-backup.service").read_text()
    (line,) = [x for x in unit.splitlines() if x.startswith("ExecStart=")]
    command = (line.removeprefix("ExecStart=").replace("%%", "%").replace("$$", "$")
               .replace("/opt/hilo/.venv/bin/hilo", f"{sys.executable} -m bot.cli")
               .replace("/var/lib/hilo-backups", str(tmp_path / "backups")))
    (tmp_path / "backups").mkdir()
    env = clean_env({"HILO_DATABASE_URL": f"sqlite:///{db}"})
    day = subprocess.run(["date", "+%a"], env=env, check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run(shlex.split(command), cwd=tmp_path, env=env, check=True, capture_output=True, timeout=60)
    assert [p.name for p in (tmp_path / "backups").iterdir()] == [f"hilo-{day}.db"]
    assert rows(tmp_path / "backups" / f"hilo-{day}.db", "SELECT count(*) FROM messages") == [(2,)]


def test_the_postgres_backup_the_docs_give_restores_a_database_hilo_goes_on_with(tmp_path: Path) -> None:
    """`hilo backup` on Postgres names pg_dump; docs/deploy.md gives the command. Its dump, restored with pg_restore
    into an empty database, is hilo's: nothing to migrate, the person's turn there, and the next turn reads it
    (the sequences came back too: the new rows do not collide with the restored ones)."""
    source, target = SERVER.create_database(), SERVER.create_database()
    hilo(tmp_path, source, "chat", "--user", "alice", "--surface", "telegram", "I live in Valencia")
    said(hilo(tmp_path, source, "backup", "x.db", code=1), r"pg_dump --format=custom --file=hilo.dump")
    subprocess.run([client_tool("pg_dump"), "--format=custom", f"--file={tmp_path / 'hilo.dump'}", source], check=True,
                   capture_output=True, timeout=120)
    subprocess.run([client_tool("pg_restore"), f"--dbname={target}", tmp_path / "hilo.dump"], check=True,
                   capture_output=True, timeout=120)
    assert hilo(tmp_path, target, "migrate").strip() == "the database is up to date"
    assert "I live in Valencia" in hilo(tmp_path, target, "inspect", "--user", "alice")
    reply = hilo(tmp_path, target, "chat", "--user", "alice", "--surface", "telegram", "and now?")
    assert "Context: 4 messages" in reply and "conversation 2" in reply
