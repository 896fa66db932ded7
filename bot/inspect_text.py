"""`hilo inspect --user U` for people: every section of the `--json` read-out, one line per row.

A section this module does not know yet (a future table) is still shown, its rows as compact JSON, so the
plain read-out never hides what `--json` holds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

from memory.inspection import Inspection, Row


def _identity(r: Row) -> str:
    return f"identity {r['surface']}:{r['external_user_id']} (since {r['created_at']})"


def _memory(r: Row) -> str:
    ended = ""
    if r.get("ended_at"):
        by = f" by m{r['superseded_by']}" if r.get("superseded_by") else ""
        ended = f", ended {r['ended_at']}{by}"
    return (f"{r['short_id']} {r['kind']}: {r['content']} ({r['source']}, confidence {r['confidence']:.1f}, "
            f"importance {r['importance']:.1f}, used {r['access_count']}x{ended})")


def summary_line(r: Row) -> str:
    """One episode summary (`hilo inspect`, `hilo summaries`)."""
    return (f"episode {r['id']} [{r['started_at']} .. {r['ended_at']}, {r['surface']}, {r['message_count']} "
            f"messages]: {r['summary']} ({r['summary_model']}, {r['summary_at']})")


def _call(r: Row) -> str:
    fallback = f", fallback from {r['fallback_from']}" if r.get("fallback_from") else ""
    error = f": {r['error']}" if r.get("error") else ""
    model = r["model"] if r["model"] == r["provider"] else f"{r['provider']}:{r['model']}"
    if r.get("purpose") not in (None, "turn"):  # a background job's call: extract, summary
        model = f"{model} ({r['purpose']})"
    cost = f", {r['cost_usd']:.6f} USD" if r.get("cost_usd") else ""  # priced calls only (bot/prices.py)
    return (f"[{r['created_at']}] {model} {r['outcome']}{error}, {r['tokens_in']} -> "
            f"{r['tokens_out']} tokens{cost}, {r['latency_ms']} ms{fallback}")


def _delivery(r: Row) -> str:
    line = f"[{r['created_at']}] {r['surface']} -> {r['recipient']} part {r['part']}/{r['parts']}: {r['status']}"
    if r.get("attempts", 1) > 1:
        line += f" after {r['attempts']} attempts"
    if r.get("error"):
        line += f": {r['error']}"
    if r.get("provider_ref"):
        line += f" ({r['provider_ref']})"
    return line


def _audit(r: Row) -> str:
    detail = f" ({r['detail']})" if r.get("detail") else ""
    return f"[{r['created_at']}] {r['action']} {r['surface']}:{r['external_user_id']} by {r['actor']}{detail}"


def _message(m: Row) -> str:
    text = m["content"].replace("\n", "\n" + " " * 8)  # further lines stay under it (the caller indents by 4)
    return f"  [{m['created_at']}] {m['role']}: {text}"


def _conversation(r: Row) -> list[str]:
    messages = r.get("messages", [])
    title = f" {r['title']!r}" if r.get("title") else ""
    lines = [f"conversation {r['id']}{title} on {r['surface']} ({len(messages)} messages)"]
    lines += [_message(m) for m in messages]
    return lines


_ROWS: dict[str, Callable[[Row], str]] = {
    "identities": _identity, "memories": _memory, "summaries": summary_line, "model_calls": _call,
    "deliveries": _delivery, "identity_audit": _audit,
}


def render(handle: str, data: Inspection | None) -> str:
    """The read-out of `Store.inspect(handle)`."""
    if data is None:
        return f"nothing is stored about {handle}"
    user = data["user"]
    lines = [f"user {user['handle']} (id {user['id']}, since {user['created_at']})"]
    for section, value in data.items():
        if section == "user":
            continue
        rows = cast(list[Any], value)  # every section but `user` is a list of rows
        lines.append(f"  {section.replace('_', ' ')} ({len(rows)})")
        for row in rows:
            if section == "conversations":
                lines += [f"    {line}" for line in _conversation(row)]
            elif section in _ROWS:
                lines.append(f"    {_ROWS[section](row)}")
            else:
                lines.append(f"    {json.dumps(row, ensure_ascii=False, default=str)}")
    return "\n".join(lines)
