"""`hilo backup FILE`: a consistent copy of the SQLite database, taken while hilo runs, checked, then put in place.

Copying hilo.db with `cp` while hilo runs is not a backup. The turns committed since the last checkpoint are in
hilo.db-wal, not in hilo.db, so the copy lacks them; and a copy read while a checkpoint writes pages into the file
can hold half of one transaction and half of another. SQLite's online backup API reads the database as one read
transaction sees it, the -wal's commits included, and in WAL mode that read waits for no writer and blocks none:
`hilo serve` goes on answering while it runs (a checkpoint meanwhile stops short of the copy's snapshot).

The copy is written to FILE.partial beside FILE (mode 0600: it holds every person's messages), made a plain
rollback-journal file (one file, no -wal beside it), checked with `PRAGMA quick_check`, flushed to disk, and only
then renamed over FILE. So FILE is always a whole, checked copy: the one before (a rotation such as
`hilo-$(date +%a).db`) stays until the new one is complete, and a failed run leaves no partial file. Two runs
to the same FILE at once: the second is refused (a lock on FILE.partial), not interleaved with the first.

The source must exist (`mode=rw`: a missing file is an error, not a new empty database at a path a cron job got
wrong) and hold hilo's schema; nothing is written to it (when the copy's connection is the last one to close,
SQLite folds the -wal into the file, as any connection's close does). Postgres has its own tool: pg_dump.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from kernel.errors import StoreError
from memory.sqlite_file import TRANSIENT, not_a_database

#: How long the copy waits for a lock (a checkpoint's, a crash's recovery) before it gives up.
BUSY_TIMEOUT_S = 5.0
PARTIAL = ".partial"
PG_DUMP = ("hilo backup copies a SQLite database; for Postgres use pg_dump, e.g. pg_dump --format=custom "
           "--file=hilo.dump \"$HILO_DATABASE_URL\" (pg_restore puts it back; Supabase also keeps daily backups)")


@dataclass(frozen=True, slots=True)
class BackupReport:
    """What a backup wrote: the file, its size, and what it holds."""

    path: Path
    size_bytes: int
    messages: int
    people: int
    schema: str
    seconds: float


def backup(source: str, dest: str) -> BackupReport:
    """Copy the SQLite database at `source` to `dest` (see the module's docstring); StoreError says what failed."""
    started = time.monotonic()
    src_path, dest_path = Path(source), Path(dest)
    _check_paths(src_path, dest_path)
    partial = dest_path.with_name(dest_path.name + PARTIAL)
    try:
        with _claimed(partial):
            return _copy(src_path, dest_path, partial, started)
    except OSError as exc:  # creating, flushing or renaming the copy: a read-only folder, a full disk, a symlink
        raise StoreError(_unwritable(dest_path, exc.strerror or str(exc))) from exc


def _unwritable(dest: Path, why: str) -> str:
    return (f"could not write the backup {dest} ({why}): check that its folder is writable for this user and has "
            "room for a copy of the database; no backup was written")


@contextlib.contextmanager
def _claimed(partial: Path) -> Iterator[None]:
    """`partial` created (0600) or emptied (a run killed before its rename left it: never a backup), and held
    against a second run to the same file until the rename."""
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(f"another hilo backup to {partial.name.removesuffix(PARTIAL)} is running: wait for it, "
                             "or name another file") from None
        os.ftruncate(fd, 0)
        os.fchmod(fd, 0o600)
        yield
    finally:
        os.close(fd)


def _copy(src_path: Path, dest_path: Path, partial: Path, started: float) -> BackupReport:
    try:
        with (contextlib.closing(_open_source(src_path)) as src,
              contextlib.closing(sqlite3.connect(partial, isolation_level=None)) as copy):
            try:
                src.backup(copy)  # every page in one step: one read transaction, one snapshot
            except sqlite3.DatabaseError as exc:
                if any(kind in str(exc) for kind in TRANSIENT):  # the copy's side (the source is only read)
                    raise StoreError(_unwritable(dest_path, str(exc))) from exc
                raise StoreError(_unreadable(src_path, exc)) from exc
            report = _check_copy(copy, src_path)
        _flush(partial)
        os.replace(partial, dest_path)
        _flush(dest_path.parent)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return BackupReport(dest_path, dest_path.stat().st_size, *report, time.monotonic() - started)


def _check_paths(src: Path, dest: Path) -> None:
    if str(src) == ":memory:" or str(src).startswith("file::memory:"):
        raise StoreError("an in-memory database has nothing to back up: set HILO_DATABASE_URL (or --db) to the file")
    if not src.is_file():
        raise StoreError(f"no database at {src.resolve()}: set HILO_DATABASE_URL (or --db) to hilo's database file "
                         "(a relative sqlite:/// path is read from the working directory)")
    if dest.is_dir():
        raise StoreError(f"{dest} is a directory: name the backup file, e.g. {dest / 'hilo-backup.db'}")
    if not dest.parent.is_dir():
        raise StoreError(f"{dest.parent.resolve()} does not exist: create it first (mkdir -p {dest.parent})")
    if dest.exists() and os.path.samefile(src, dest):
        raise StoreError(f"{dest} is the database itself: name another file")
    for suffix in ("-wal", "-shm", "-journal"):
        if dest.name == src.name + suffix and os.path.samefile(src.parent, dest.parent):
            raise StoreError(f"{dest} is the database's own {suffix[1:]} file: name another file")


def _open_source(path: Path) -> sqlite3.Connection:
    uri = f"file:{quote(str(path.resolve()))}?mode=rw"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=BUSY_TIMEOUT_S)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {path.resolve()} ({exc}): check that this user may read and write it and "
                         "its directory (SQLite needs both for a database in WAL mode)") from exc
    try:
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'")
        if found.fetchone() is None:
            raise StoreError(f"{path.resolve()} is not hilo's database (it has no schema_migrations table): set "
                             "HILO_DATABASE_URL (or --db) to hilo's database file")
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise StoreError(_unreadable(path, exc)) from exc
    except StoreError:
        conn.close()
        raise
    return conn


def _unreadable(path: Path, exc: sqlite3.DatabaseError) -> str:
    if isinstance(exc, sqlite3.OperationalError):  # locked past the timeout, an I/O error: it may pass
        return f"could not read {path.resolve()} ({exc}): try again"
    return f"{path.resolve()} cannot be copied ({exc}): it {not_a_database(exc)}"


def _check_copy(copy: sqlite3.Connection, src: Path) -> tuple[int, int, str]:
    """Make the copy one self-contained file and check it; (messages, people, newest migration)."""
    try:
        copy.execute("PRAGMA journal_mode = DELETE")  # the source's WAL flag came with its header
        problems = [row[0] for row in copy.execute("PRAGMA quick_check")]
        if problems == ["ok"]:
            messages = copy.execute("SELECT count(*) FROM messages").fetchone()[0]
            people = copy.execute("SELECT count(*) FROM users").fetchone()[0]
            schema = copy.execute("SELECT max(name) FROM schema_migrations").fetchone()[0]
            return int(messages), int(people), str(schema)
    except sqlite3.DatabaseError as exc:
        problems = [str(exc)]
    found = " ".join("; ".join(problems[:3]).split())  # one line: quick_check's own lines joined
    raise StoreError(f"the copy of {src.resolve()} failed its check ({found}): the database itself "
                     "is damaged (PRAGMA integrity_check on it says where); no backup was written")


def _flush(path: Path) -> None:
    """fsync a file, or a directory (so a rename in it survives a power cut)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
