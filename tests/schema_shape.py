"""The shape of a migrated schema, read from the database itself, in terms both dialects share.

`sqlite_shape(conn)` and `await postgres_shape(conn)` read tables, columns, indexes, constraints, views and
triggers into one `Shape`; `differences(sqlite, postgres, allowed)` lists what does not match, one line each.
Used by tests/test_schema_parity.py.

What "the same" means across the two dialects (each rule is the house's spelling, see migrations/*/0001):
- types compare by family (integer, text, timestamp, boolean, json, real, blob, vector). SQLite has no timestamp,
  boolean, json or vector type: a pgvector vector or halfvec column is a BLOB in SQLite (float16 bytes); a
  Postgres timestamp or json column is TEXT in SQLite (fixed-width UTC ISO text, JSON
  text), a boolean is INTEGER with CHECK (col IN (0, 1)) (that check is the spelling, not a constraint of its
  own), and `false`/`true` defaults are 0/1;
- an identity column (Postgres) is an INTEGER PRIMARY KEY AUTOINCREMENT (SQLite): both never reuse an id;
- indexes compare by table, column list, uniqueness, predicate and access method (names are ignored);
  indexes that back a PRIMARY KEY or UNIQUE constraint count as the constraint, not as an index;
- expressions (checks, predicates, defaults) compare after lowercasing, dropping casts and parentheses and
  spelling `x = ANY (ARRAY[a, b])` as `x IN (a, b)`.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field
from typing import Any

#: How SQLite spells each Postgres type family (the family SQLite's type affinity gives the declared type).
SQLITE_SPELLING = {"integer": "integer", "text": "text", "timestamp": "text", "boolean": "integer",
                   "json": "text", "real": "real", "blob": "blob", "vector": "blob"}
PG_FAMILIES = {"smallint": "integer", "integer": "integer", "bigint": "integer", "text": "text", "character varying":
               "text", "timestamp with time zone": "timestamp", "timestamp without time zone": "timestamp", "date":
               "timestamp", "boolean": "boolean", "json": "json", "jsonb": "json", "real": "real",
               "double precision": "real", "numeric": "real", "bytea": "blob",
               "halfvec": "vector", "vector": "vector"}
PG_ON_DELETE = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}


@dataclass(frozen=True)
class Column:
    family: str
    not_null: bool
    default: str | None


@dataclass(frozen=True)
class Index:
    table: str
    columns: tuple[str, ...]
    unique: bool
    predicate: str | None
    method: str

    def __str__(self) -> str:
        where = f" WHERE {self.predicate}" if self.predicate else ""
        kind = "unique index" if self.unique else "index"
        using = "" if self.method == "btree" else f" USING {self.method}"
        return f"{kind} {self.table}({', '.join(self.columns)}){using}{where}"


@dataclass
class Table:
    columns: dict[str, Column] = field(default_factory=dict)
    primary_key: tuple[str, ...] = ()
    uniques: set[tuple[str, ...]] = field(default_factory=set)
    #: (columns, referenced table, referenced columns, ON DELETE)
    foreign_keys: set[tuple[tuple[str, ...], str, tuple[str, ...], str]] = field(default_factory=set)
    checks: set[str] = field(default_factory=set)


@dataclass
class Shape:
    tables: dict[str, Table] = field(default_factory=dict)
    #: index name -> index (only indexes made by CREATE INDEX)
    indexes: dict[str, Index] = field(default_factory=dict)
    #: "view NAME", "trigger NAME"
    others: set[str] = field(default_factory=set)


def norm(expr: str | None) -> str | None:
    """An expression as both dialects can be compared: see the module docstring."""
    if expr is None:
        return None
    text = re.sub(r"::[a-z_ ]+(\[\])?", "", expr.lower())
    text = re.sub(r"= any \(array\[(.*?)\]\)", r"in (\1)", text)
    text = re.sub(r"[()]", " ", text)
    return re.sub(r"\s+", " ", text).strip() or None


def _booleans(text: str | None, booleans: set[str]) -> str | None:
    """A boolean column tested as `b`, `b = true` or `b = 1` reads `b`; as false or 0, `not b`."""
    if text is None:
        return None
    for b in booleans:
        text = re.sub(rf"\b{b} = (1|true)\b", b, text)
        text = re.sub(rf"\b{b} = (0|false)\b", f"not {b}", text)
    return text


# -- SQLite --------------------------------------------------------------------------------------------------

def _affinity(declared: str) -> str:
    d = declared.upper()
    if "INT" in d:
        return "integer"
    if any(word in d for word in ("CHAR", "CLOB", "TEXT")):
        return "text"
    if "BLOB" in d or not d:
        return "blob"
    if any(word in d for word in ("REAL", "FLOA", "DOUB")):
        return "real"
    return "numeric"


def _checks(create_sql: str) -> set[str]:
    """The bodies of every CHECK (...) in a CREATE TABLE statement."""
    sql = re.sub(r"--[^\n]*", "", create_sql)
    found: set[str] = set()
    for match in re.finditer(r"\bCHECK\s*\(", sql, re.IGNORECASE):
        depth, start = 1, match.end()
        for pos in range(start, len(sql)):
            depth += {"(": 1, ")": -1}.get(sql[pos], 0)
            if depth == 0:
                found.add(str(norm(sql[start:pos])))
                break
    return found


def sqlite_shape(conn: sqlite3.Connection, skip: set[str]) -> Shape:
    """The shape of a SQLite database; tables named in `skip` are listed but not read."""
    shape = Shape()
    objects = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name").fetchall()
    for kind, name, _table, sql in objects:
        if kind in ("view", "trigger"):
            shape.others.add(f"{kind} {name}")
        elif kind == "table":
            shape.tables[name] = Table() if name in skip else _sqlite_table(conn, name, sql)
    for kind, name, table, sql in objects:
        if kind == "index" and sql is not None and table not in skip:  # sql NULL: a constraint's own index
            cols = tuple(r[2] for r in conn.execute(f"PRAGMA index_info({name})"))
            unique = bool(conn.execute(f"SELECT \"unique\" FROM pragma_index_list('{table}') WHERE name = ?",
                                       (name,)).fetchone()[0])
            where = re.search(r"\bWHERE\b(.*)$", sql, re.IGNORECASE | re.DOTALL)
            shape.indexes[name] = Index(table, cols, unique, norm(where.group(1)) if where else None, "btree")
    return shape


def _sqlite_table(conn: sqlite3.Connection, name: str, sql: str) -> Table:
    table = Table(checks=_checks(sql))
    info = conn.execute(f"PRAGMA table_xinfo({name})").fetchall()  # cid, name, type, notnull, default, pk, hidden
    pk = sorted((r for r in info if r[5]), key=lambda r: r[5])
    table.primary_key = tuple(r[1] for r in pk)
    rowid = pk[0][1] if len(pk) == 1 and pk[0][2].upper() == "INTEGER" else None
    for _cid, col, declared, notnull, default, _pk, _hidden in info:
        if col == rowid:  # an alias of the rowid: never NULL; AUTOINCREMENT never reuses an id
            ident = "identity" if re.search(r"\bAUTOINCREMENT\b", sql, re.IGNORECASE) else "rowid"
            table.columns[col] = Column("integer", True, ident)
        else:
            table.columns[col] = Column(_affinity(declared), bool(notnull), norm(default))
    for _seq, index, _unique, origin, _partial in conn.execute(f"PRAGMA index_list({name})"):
        if origin == "u":
            table.uniques.add(tuple(r[2] for r in conn.execute(f"PRAGMA index_info({index})")))
    fks: dict[int, list[Any]] = {}
    for fk_id, _seq, ref, src, dst, _upd, on_delete, _match in conn.execute(f"PRAGMA foreign_key_list({name})"):
        fks.setdefault(fk_id, []).append((ref, src, dst, on_delete))
    for parts in fks.values():
        ref, on_delete = parts[0][0], parts[0][3]
        dst = tuple(p[2] for p in parts)
        if None in dst:  # REFERENCES t without columns: t's primary key
            dst = tuple(r[1] for r in sorted(
                (r for r in conn.execute(f"PRAGMA table_info({ref})") if r[5]), key=lambda r: r[5]))
        table.foreign_keys.add((tuple(p[1] for p in parts), ref, dst, on_delete.upper()))
    return table


# -- Postgres ------------------------------------------------------------------------------------------------

PG_COLUMNS = """
SELECT c.relname, a.attname, format_type(a.atttypid, NULL), a.attnotnull, pg_get_expr(d.adbin, d.adrelid),
       a.attidentity::text, a.attgenerated::text
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY c.relname, a.attnum"""
PG_NAMES = ("ARRAY(SELECT a.attname FROM unnest({keys}) WITH ORDINALITY u(n, o) JOIN pg_attribute a "
            "ON a.attrelid = {rel} AND a.attnum = u.n ORDER BY u.o)")
PG_CONSTRAINTS = f"""
SELECT c.relname, k.contype::text, {PG_NAMES.format(keys="k.conkey", rel="k.conrelid")}, r.relname,
       {PG_NAMES.format(keys="k.confkey", rel="k.confrelid")}, k.confdeltype::text, pg_get_constraintdef(k.oid)
FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_class r ON r.oid = k.confrelid
WHERE n.nspname = 'public' AND k.contype IN ('p', 'u', 'f', 'c')"""
PG_INDEXES = """
SELECT t.relname, x.relname, i.indisunique, am.amname, pg_get_expr(i.indpred, i.indrelid),
       ARRAY(SELECT pg_get_indexdef(i.indexrelid, k, true) FROM generate_series(1, i.indnkeyatts) k ORDER BY k)
FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace JOIN pg_am am ON am.oid = x.relam
WHERE n.nspname = 'public' AND NOT EXISTS (
    SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid AND k.conrelid = i.indrelid
    AND k.contype IN ('p', 'u', 'x'))"""
PG_OTHERS = """
SELECT 'view ' || viewname FROM pg_views WHERE schemaname = 'public'
UNION ALL SELECT 'trigger ' || t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND NOT t.tgisinternal"""


async def postgres_shape(conn: Any, skip: set[str]) -> Shape:
    """The shape of the `public` schema of an asyncpg connection's database."""
    shape = Shape(others={r[0] for r in await conn.fetch(PG_OTHERS)})
    for rel, col, sqltype, notnull, default, identity, generated in await conn.fetch(PG_COLUMNS):
        table = shape.tables.setdefault(rel, Table())
        if rel in skip:
            continue
        family = PG_FAMILIES.get(sqltype, sqltype)
        if identity or (default or "").startswith("nextval("):
            text: str | None = "identity"
        elif generated:
            text = f"generated {norm(default)}"
        else:
            text = norm(default)
            if family == "boolean":
                text = {"false": "0", "true": "1"}.get(str(text), text)
        table.columns[col] = Column(family, notnull, text)
    for rel, kind, cols, ref, ref_cols, on_delete, definition in await conn.fetch(PG_CONSTRAINTS):
        if rel in skip:
            continue
        table = shape.tables[rel]
        if kind == "p":
            table.primary_key = tuple(cols)
        elif kind == "u":
            table.uniques.add(tuple(cols))
        elif kind == "f":
            table.foreign_keys.add((tuple(cols), ref, tuple(ref_cols), PG_ON_DELETE[on_delete]))
        else:
            table.checks.add(str(norm(re.sub(r"^CHECK", "", definition))))
    for rel, name, unique, method, predicate, cols in await conn.fetch(PG_INDEXES):
        if rel not in skip:
            shape.indexes[name] = Index(rel, tuple(cols), unique, norm(predicate), method)
    return shape


# -- comparing -----------------------------------------------------------------------------------------------

def differences(lite: Shape, pg: Shape, allowed: set[tuple[str, str, str]]) -> list[str]:
    """Every way the two shapes differ, one line each, sorted; `allowed` holds (dialect, kind, name) entries
    ("sqlite" | "postgres" | "both", "table" | "column" | "index" | "view" | "trigger", name or table.column)
    that are left out."""

    def ok(dialect: str, kind: str, name: str) -> bool:
        return (dialect, kind, name) in allowed or ("both", kind, name) in allowed

    out: list[str] = []
    for dialect, mine, theirs in (("sqlite", lite, pg), ("postgres", pg, lite)):
        out += [f"table {t}: {dialect} only" for t in mine.tables.keys() - theirs.tables.keys()
                if not ok(dialect, "table", t)]
        out += [f"{o}: {dialect} only" for o in mine.others - theirs.others if not ok(dialect, *o.split(" ", 1))]
    for name in lite.tables.keys() & pg.tables.keys():
        if not ok("both", "table", name):
            out += _table_differences(name, lite.tables[name], pg.tables[name], ok)
    booleans = {name: {c for c, col in t.columns.items() if col.family == "boolean"} for name, t in pg.tables.items()}

    def keys(shape: Shape, dialect: str) -> dict[Index, str]:
        return {Index(i.table, i.columns, i.unique, _booleans(i.predicate, booleans.get(i.table, set())), i.method):
                name for name, i in shape.indexes.items() if not ok(dialect, "index", name)}

    lite_idx, pg_idx = keys(lite, "sqlite"), keys(pg, "postgres")
    out += [f"{i} ({lite_idx[i]}): sqlite only" for i in lite_idx.keys() - pg_idx.keys()]
    out += [f"{i} ({pg_idx[i]}): postgres only" for i in pg_idx.keys() - lite_idx.keys()]
    return sorted(out)


def _table_differences(name: str, lite: Table, pg: Table, ok: Any) -> list[str]:
    out: list[str] = []
    cols = [c for c in {**lite.columns, **pg.columns} if not ok("both", "column", f"{name}.{c}")]
    for col in cols:
        a, b = lite.columns.get(col), pg.columns.get(col)
        where = f"column {name}.{col}"
        if b is None and not ok("sqlite", "column", f"{name}.{col}"):
            out.append(f"{where}: sqlite only")
        elif a is None and not ok("postgres", "column", f"{name}.{col}"):
            out.append(f"{where}: postgres only")
        elif a is not None and b is not None:
            spelt = SQLITE_SPELLING.get(b.family)
            if a.family != spelt:
                out.append(f"{where}: postgres {b.family} (spelt {spelt} in SQLite), sqlite {a.family}")
            if a.not_null != b.not_null:
                out.append(f"{where}: NOT NULL in {'sqlite' if a.not_null else 'postgres'} only")
            if a.default != b.default:
                out.append(f"{where}: default {a.default!r} in sqlite, {b.default!r} in postgres")
    if lite.primary_key != pg.primary_key:
        out.append(f"table {name}: primary key {lite.primary_key} in sqlite, {pg.primary_key} in postgres")
    for what, a_set, b_set in (("unique", lite.uniques, pg.uniques), ("foreign key", lite.foreign_keys,
                                                                     pg.foreign_keys)):
        out += [f"table {name}: {what} {x} in sqlite only" for x in a_set - b_set]
        out += [f"table {name}: {what} {x} in postgres only" for x in b_set - a_set]
    # a boolean's CHECK (b IN (0, 1)) in SQLite is how SQLite spells the type
    spelling = {f"{c} in 0, 1" for c, col in pg.columns.items() if col.family == "boolean"}
    out += [f"column {name}.{s.split()[0]}: boolean without CHECK ({s.split()[0]} IN (0, 1)) in sqlite"
            for s in spelling - lite.checks]
    out += [f"table {name}: check ({x}) in sqlite only" for x in lite.checks - pg.checks - spelling]
    out += [f"table {name}: check ({x}) in postgres only" for x in pg.checks - lite.checks]
    return out
