"""`hilo import` streamed and resumable: a real `hilo import` subprocess killed halfway (SIGKILL), then run again,
stores every line exactly once; a bad line at the end of a large file stops there with what came before stored."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from memory import importer

REPO = Path(__file__).resolve().parent.parent
LINES = 6 * importer.BATCH  # six transactions: a kill after the first commit leaves most of the file to do


def _line(i: int) -> dict[str, str]:
    row = {"user": f"p{i % 7}", "surface": ("telegram", "whatsapp", "web")[i % 3], "role": ("user", "assistant")[i % 2],
           "content": f"line {i} about {('tea', 'trains', 'tomatoes')[i % 3]}",
           "created_at": f"2026-0{1 + i // 10_000}-01T{i % 24:02d}:{i % 60:02d}:00Z"}
    if i % 4:  # one line in four without external_id: its key is derived from what it says
        row["external_id"] = f"x-{i}"
    if row["surface"] == "web":
        row["conversation"] = f"c{i // 500}"
    row["content"] += f" #{i}"  # every line distinct, so "stored once" is checkable by content
    return row


def _env(db: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HILO_", "OPENAI_", "ANTHROPIC_"))}
    env.update(HILO_DATABASE_URL=f"sqlite:///{db}", PYTHONPATH=str(REPO))
    return env


def _stored(db: Path) -> int:
    if not db.exists():
        return 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])
    except sqlite3.OperationalError:  # the schema is not migrated yet
        return 0
    finally:
        conn.close()


def test_an_import_killed_halfway_then_run_again_stores_every_line_once(tmp_path: Path) -> None:
    path, db = tmp_path / "history.jsonl", tmp_path / "hilo.db"
    path.write_text("".join(json.dumps(_line(i)) + "\n" for i in range(LINES)))
    proc = subprocess.Popen([sys.executable, "-m", "bot.cli", "import", str(path)], cwd=tmp_path, env=_env(db),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while (done := _stored(db)) == 0 and proc.poll() is None:  # wait for the first committed batch
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.communicate(timeout=60)
    killed_at = _stored(db)
    assert done > 0 and killed_at < LINES, "the import was not stopped halfway"
    assert killed_at % importer.BATCH == 0  # whole transactions, nothing half-stored
    again = subprocess.run([sys.executable, "-m", "bot.cli", "import", str(path)], cwd=tmp_path, env=_env(db),
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"imported {LINES - killed_at} messages, skipped {killed_at} already stored\n"
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT content, external_id, token_count FROM messages").fetchall()
    conn.close()
    assert sorted(r[0] for r in rows) == sorted(_line(i)["content"] for i in range(LINES))
    assert len({r[1] for r in rows}) == LINES and all(r[2] > 0 for r in rows)
    third = subprocess.run([sys.executable, "-m", "bot.cli", "import", str(path)], cwd=tmp_path, env=_env(db),
                           capture_output=True, text=True, timeout=300)
    assert third.stdout == f"imported 0 messages, skipped {LINES} already stored\n"


def test_a_bad_line_at_the_end_of_a_large_file_keeps_every_line_before_it(tmp_path: Path) -> None:
    good = 2 * importer.BATCH + 7
    path, db = tmp_path / "history.jsonl", tmp_path / "hilo.db"
    path.write_text("".join(json.dumps(_line(i)) + "\n" for i in range(good)) + '{"user": "p1", "surface": "fax"}\n')
    proc = subprocess.run([sys.executable, "-m", "bot.cli", "import", str(path)], cwd=tmp_path, env=_env(db),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"line {good + 1}:" in proc.stderr and f"the {good} lines before it are stored" in proc.stderr
    assert _stored(db) == good


def test_a_line_that_is_not_utf8_stops_there_naming_it_and_a_missing_file_is_named(tmp_path: Path) -> None:
    """Bytes that are no UTF-8 in a line stop the import at that line (the lines before it stored, as a bad line
    does: each line is decoded apart, so the error names its own line); a missing file is named, no traceback."""
    path, db = tmp_path / "history.jsonl", tmp_path / "hilo.db"
    lines = [json.dumps(_line(i)).encode() for i in range(300)]
    lines[250] = lines[250].replace(b" #250", b" #\xff\xfe250")
    path.write_bytes(b"\n".join(lines) + b"\n")
    proc = subprocess.run([sys.executable, "-m", "bot.cli", "import", str(path)], cwd=tmp_path, env=_env(db),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "line 251: not UTF-8 text" in proc.stderr, proc.stderr
    assert "the 250 lines before it are stored" in proc.stderr and _stored(db) == 250
    gone = subprocess.run([sys.executable, "-m", "bot.cli", "import", str(tmp_path / "nope.jsonl")], cwd=tmp_path,
                          env=_env(db), capture_output=True, text=True, timeout=300)
    assert gone.returncode != 0 and "cannot read" in gone.stderr and "nope.jsonl" in gone.stderr
    assert "Traceback" not in gone.stderr + proc.stderr
