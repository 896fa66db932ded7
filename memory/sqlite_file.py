"""Is the SQLite file the connection opened still the file at its path?

A SQLite connection keeps its file open: when the file is deleted (or another file is moved to its path) while
hilo runs, every write goes on into the unlinked inode and is lost at the next start, which finds no file (and
creates an empty database) or the other file. So `SqliteStore` compares, at each transaction, the device and
inode the connection opened with what the path names now (one stat): a difference is `StoreUnavailable`, said
to the operator once with the path. hilo never reopens or recreates the file mid-run; when the same file comes
back to its path (moved back), the store goes on. The -wal file is checked the same way: SQLite deletes it only
when the last connection closes, so while hilo runs a missing or other -wal means someone removed it (what it
holds and was not checkpointed yet would be lost, and other processes would write another one). The -shm is an
index SQLite rebuilds from the -wal: not checked.
"""

from __future__ import annotations

import os

#: (st_dev, st_ino)
FileIdentity = tuple[int, int]

FILE_FIX = ("Put the database file back at its path (a backup, or the file that was moved), then restart hilo; "
            "hilo does not create a new, empty database while it runs")

#: SQLite errors that may pass by themselves (a full disk, a read-only file or mount, an I/O error): the store is
#: unavailable, not broken, and the next transaction tries again.
TRANSIENT = ("database or disk is full", "readonly database", "disk I/O error", "unable to open database file")


def file_identity(path: str) -> FileIdentity | None:
    """The device and inode of `path` (None: an in-memory database, or no such file)."""
    if path == ":memory:" or path.startswith("file::memory:"):
        return None
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


def file_problem(path: str, opened: FileIdentity) -> str | None:
    """"missing" when no file is at `path`, "replaced" when another file is, None when it is the one opened."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return "missing"
    return None if (found.st_dev, found.st_ino) == opened else "replaced"
