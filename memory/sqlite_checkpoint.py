"""WAL checkpoints off the turn's path: a thread of their own, on a connection of their own.

SQLite in WAL mode appends every commit to the -wal file and copies it back into the database in a checkpoint.
By default the commit that takes the WAL past 1,000 pages runs that checkpoint itself, before it returns: on the
store's one worker thread, inside a turn (copy ~4 MB, then fsync, synchronous=NORMAL). Measured on 1,000 people x
1,000 messages: with the garbage collector's walks gone (bot/daemon.py settle_heap), those commits were the rest
of the slowest ingests (10-15 ms instead of ~1 ms, about one turn in thirty).

Here the store's connection checkpoints only past SAFETY_PAGES (a WAL that the thread could not keep small) and
this thread runs `PRAGMA wal_checkpoint(PASSIVE)` at most every INTERVAL seconds after a write: PASSIVE neither
waits for nor blocks the store's readers and writers (they go on appending; the next write after a complete
checkpoint starts the WAL over), and the sqlite3 module releases the GIL while it copies. Several processes on
one file each run one: a checkpoint that finds another running is skipped (busy), never waited for.
"""

from __future__ import annotations

import sqlite3
import threading

from kernel import log

logger = log.get("hilo.store")

#: Seconds between two checkpoints at most (while writes come): about SQLite's own rhythm under a steady load.
INTERVAL = 1.0
#: The store's connection still checkpoints by itself past this many WAL pages (~40 MB at 4 KiB pages): only a
#: checkpointer that cannot keep up (a long read holding old frames) gets there.
SAFETY_PAGES = 10_000


class Checkpointer:
    """`nudge()` after each write transaction; `close()` stops the thread (the store's own connection, closed
    last, checkpoints what is left). `checkpoints` counts the PASSIVE checkpoints that copied pages;
    `done` is set after each checkpoint that left the whole WAL copied (tests wait for it)."""

    def __init__(self, path: str, interval: float = INTERVAL) -> None:
        self.path, self.interval = path, interval
        self.checkpoints = 0
        self.done = threading.Event()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            # a read now opens the -wal the store's connection writes, and the connection keeps it open: opened at
            # the first checkpoint instead, a -wal moved away meanwhile came back as a new, empty file at the path
            self._conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()
        except BaseException:
            self._conn.close()
            raise
        self._thread = threading.Thread(target=self._run, name="hilo-sqlite-checkpoint", daemon=True)
        self._thread.start()

    def nudge(self) -> None:
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join()
        self._conn.close()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            if self._stop.is_set():
                return
            self._wake.clear()
            self._checkpoint()
            # at most one checkpoint per interval: writes meanwhile set _wake again, read after the pause
            if self._stop.wait(self.interval):
                return

    def _checkpoint(self) -> None:
        try:
            busy, log_pages, copied = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:  # the next write nudges again; the store's connection has its safety net
            logger.warning("store.checkpoint_failed", error=type(exc).__name__)
            return
        if copied > 0:
            self.checkpoints += 1
        if not busy and copied == log_pages:
            self.done.set()
