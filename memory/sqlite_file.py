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

The file holds every person's messages, so a new one is created 0600 before SQLite opens it (SQLite would make it
0644 less the umask: readable by every local user under a login shell's 022, as PM2 and a terminal run hilo), and
SQLite gives its -wal and -shm the file's mode. An existing file keeps its mode (an operator may have opened it to
a group on purpose): the store says when others may read it (`private_file`).
"""

from __future__ import annotations

import os
import sqlite3

#: (st_dev, st_ino)
FileIdentity = tuple[int, int]

FILE_FIX = ("Put the database file back at its path (a backup, or the file that was moved), then restart hilo; "
            "hilo does not create a new, empty database while it runs")

DAMAGED = "is damaged"


def not_a_database(exc: sqlite3.DatabaseError) -> str:
    """What a DatabaseError other than an OperationalError says of the file: DAMAGED, or another kind of file
    (a text file, an encrypted database)."""
    return DAMAGED if "malformed" in str(exc) else "is not a SQLite database"


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


def private_file(path: str) -> int | None:
    """Create `path` empty with mode 0600 when no file is there; the mode of an existing file that users other than
    its owner may read or write (None: private, just created, in memory, or not creatable here: SQLite's own
    open then says why)."""
    if path == ":memory:" or path.startswith("file:"):
        return None
    target = os.path.realpath(path)  # a symlink's file, which SQLite opens (and creates when missing)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        mode = os.stat(target).st_mode & 0o777
        return mode if mode & 0o077 else None
    except OSError:  # no such directory, a read-only one: sqlite3.connect fails with what to do
        return None
    os.close(fd)
    return None
