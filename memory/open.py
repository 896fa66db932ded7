"""`open_store(url)`: the Store for a database URL (HILO_DATABASE_URL, `--db`).

    sqlite:///hilo.db            a file relative to the working directory
    sqlite:////var/lib/hilo.db   an absolute path (four slashes)
    sqlite:///:memory:           a private in-memory database (tests)
    postgresql://user:pass@host:5432/hilo   Postgres (asyncpg; `postgres://` too). URL options of hilo's own:
        ?statement_cache_size=0 for Supabase's transaction pooler (automatic on *.pooler.supabase.com:6543),
        pool_min_size / pool_max_size; see memory/dialect_pg.py

The store is returned unopened: the caller owns its lifecycle (`await store.open()` ... `await store.close()`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from urllib.parse import unquote

from kernel.errors import ConfigError
from kernel.text import url_shown
from memory.store import Store

SQLITE_PREFIX = "sqlite:///"
POSTGRES_SCHEMES = ("postgres", "postgresql")


def scheme_of(url: str) -> str:
    """A database URL's scheme, lowercase: "sqlite", "postgresql", ..."""
    return url.strip().split(":", 1)[0].lower()


def sqlite_path(url: str) -> str:
    """The file path of a sqlite:/// URL (query strings are not supported)."""
    if not url.startswith(SQLITE_PREFIX):
        raise ConfigError(f"{url_shown(url)!r} is not a SQLite URL: write sqlite:///relative/path.db or sqlite:////abs/path.db")
    path = unquote(url[len(SQLITE_PREFIX):])
    if not path or "?" in path:
        raise ConfigError(
            f"database URL {url!r} has no usable path: write sqlite:///hilo.db (relative) or "
            "sqlite:////var/lib/hilo/hilo.db (absolute)"
        )
    return path


def open_store(url: str, *, clock: Callable[[], datetime] | None = None) -> Store:
    """The Store for `url` (not opened yet). `clock`: "now" for the store (aware UTC; default the real clock)."""
    url = url.strip()
    scheme = scheme_of(url)
    if scheme == "sqlite":
        from memory.dialect_sqlite import SqliteStore

        return SqliteStore(sqlite_path(url), clock=clock)
    if scheme in POSTGRES_SCHEMES:
        try:
            from memory.dialect_pg import PostgresStore
        except ImportError as exc:  # asyncpg is a dependency: only a broken install lacks it
            if exc.name != "asyncpg":
                raise
            raise ConfigError(
                f"Postgres needs asyncpg ({exc}): reinstall hilo with `pip install -e .` (it installs asyncpg), "
                "or use HILO_DATABASE_URL=sqlite:///hilo.db"
            ) from exc
        return PostgresStore(url, clock=clock)
    raise ConfigError(
        f"unsupported database URL {url_shown(url)!r}: use sqlite:///hilo.db or postgresql://user:password@host:5432/dbname"
    )
