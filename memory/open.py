"""`open_store(url)`: the Store for a database URL (HILO_DATABASE_URL, `--db`).

    sqlite:///hilo.db            a file relative to the working directory
    sqlite:////var/lib/hilo.db   an absolute path (four slashes)
    sqlite:///:memory:           a private in-memory database (tests)
    postgres://..., postgresql://...   not in this build yet

The store is returned unopened: the caller owns its lifecycle (`await store.open()` ... `await store.close()`).
"""

from __future__ import annotations

from urllib.parse import unquote

from bot.errors import ConfigError
from memory.store import Store

SQLITE_PREFIX = "sqlite:///"


def sqlite_path(url: str) -> str:
    """The file path of a sqlite:/// URL (query strings are not supported)."""
    if not url.startswith(SQLITE_PREFIX):
        raise ConfigError(f"{url!r} is not a SQLite URL: write sqlite:///relative/path.db or sqlite:////abs/path.db")
    path = unquote(url[len(SQLITE_PREFIX):])
    if not path or "?" in path:
        raise ConfigError(
            f"database URL {url!r} has no usable path: write sqlite:///hilo.db (relative) or "
            "sqlite:////var/lib/hilo/hilo.db (absolute)"
        )
    return path


def open_store(url: str) -> Store:
    """The Store for `url` (not opened yet)."""
    url = url.strip()
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        from memory.sqlite_store import SqliteStore

        return SqliteStore(sqlite_path(url))
    if scheme in ("postgres", "postgresql"):
        raise ConfigError(
            "Postgres support is not in this build yet: use HILO_DATABASE_URL=sqlite:///hilo.db "
            "(or --db sqlite:///hilo.db)"
        )
    raise ConfigError(f"unsupported database URL {url!r}: use sqlite:///hilo.db")
