"""Every row of every table of a test database that refers to a person: read through the database's own
catalogue (sqlite_master with pragma_table_info, Postgres' information_schema), never a hand list, so a table a
later migration adds is walked the day it exists. SQLite's virtual tables and their shadow tables are walked too
(the full-text vocabulary lists the terms the index still holds); on Postgres every row is read as its JSON text
(`to_jsonb`), so vectors and full-text columns are searched as the text they print as.

A row refers to the person when a `user_id` column holds their id, or when any text of it contains one of the
`needles` (their handle, their identities' ids, a word only they said)."""

from __future__ import annotations

import json
from typing import Any

from tests.backends import Backend


def catalogue(backend: Backend) -> dict[str, list[str]]:
    if backend.name == "sqlite":
        rows = backend.select("SELECT m.name, c.name FROM sqlite_master m JOIN pragma_table_info(m.name) c "
                              "WHERE m.type = 'table' ORDER BY m.name, c.cid")
    else:
        rows = backend.select("SELECT table_name, column_name FROM information_schema.columns "
                              "WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position")
    tables: dict[str, list[str]] = {}
    for table, column in rows:
        tables.setdefault(table, []).append(column)
    return tables


def rows_of(backend: Backend, table: str, columns: list[str]) -> list[dict[str, Any]]:
    if backend.name == "sqlite":
        return [dict(zip(columns, r, strict=True)) for r in backend.select(f'SELECT * FROM "{table}"')]
    return [json.loads(r[0]) for r in backend.select(f'SELECT to_jsonb(t)::text FROM "{table}" t')]


def traces(backend: Backend, user_id: int, needles: list[str]) -> dict[str, list[dict[str, Any]]]:
    """{table: the rows that refer to the person}, only tables with such rows."""
    found: dict[str, list[dict[str, Any]]] = {}
    for table, columns in catalogue(backend).items():
        for row in rows_of(backend, table, columns):
            texts = [str(v) for v in row.values() if v is not None and not isinstance(v, bytes)]
            if row.get("user_id") == user_id or any(n in t for n in needles for t in texts):
                found.setdefault(table, []).append(row)
    return found
