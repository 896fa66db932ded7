"""Plain `hilo inspect --user U` shows what `--json` shows: every section, deliveries and the link audit included.

A person with a conversation, a fact, a model call, two deliveries (one sent, one failed) and linking audit
rows (a code issued, an operator link), stored through the real SQLite store; then the CLI as a process.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bot.config import Settings
from bot.pipeline import Pipeline
from kernel.types import InboundMessage
from memory.open import open_store
from memory.store import Delivery
from tests.fakes.serve_process import clean_env


async def _a_person(url: str) -> None:
    store = open_store(url)
    await store.open()
    try:
        from bot.models.factory import build_chain

        settings = Settings(database_url=url)
        chain = build_chain(settings)
        pipeline = Pipeline(settings, store, chain)
        msg = InboundMessage(surface="telegram", sender="42", external_id="42:1", text="I live in Valencia",
                             received_at=datetime.now(UTC))
        out = await pipeline.handle(msg)
        await chain.aclose()
        user_id = await store.identity_user("telegram", "42")
        assert user_id is not None
        await store.remember(user_id, "alice is vegetarian", 5)
        await store.record_delivery(Delivery(user_id, out.reply_id, "telegram", "42", "sent", provider_ref="tg-77"))
        await store.record_delivery(Delivery(user_id, out.reply_id, "telegram", "42", "failed", part=2, parts=2,
                                             error="Forbidden: bot was blocked by the user", attempts=3))
        await store.issue_link_code("telegram", "42", "0" * 64, datetime.now(UTC) + timedelta(minutes=10))
        handle = await store.identity_handle("telegram", "42")
        assert handle is not None
        await store.link_identity(handle, "whatsapp", "whatsapp:+34600000000", "operator")
    finally:
        await store.close()


def _hilo(tmp_path: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "bot.cli", *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env=clean_env({"HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}"}))
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_plain_inspect_shows_every_section_of_json_inspect(tmp_path: Path) -> None:
    asyncio.run(_a_person(f"sqlite:///{tmp_path / 'hilo.db'}"))
    data = json.loads(_hilo(tmp_path, "inspect", "--user", "telegram:42", "--json"))
    text = _hilo(tmp_path, "inspect", "--user", "telegram:42")
    assert data["deliveries"] and data["identity_audit"]  # the person really has them
    assert "telegram -> 42 part 1/1: sent (tg-77)" in text
    assert "telegram -> 42 part 2/2: failed after 3 attempts: Forbidden: bot was blocked by the user" in text
    assert "code_issued telegram:42 by person" in text
    assert "linked whatsapp:whatsapp:+34600000000 by operator" in text  # the operator's link
    for section in data:  # a section added to --json one day shows here too
        if section != "user":
            assert f"{section.replace('_', ' ')} ({len(data[section])})" in text, f"no {section!r} in:\n{text}"
    assert "identity whatsapp:whatsapp:+34600000000" in text
    assert "fact: alice is vegetarian" in text
    assert "I live in Valencia" in text


def test_inspect_returns_the_typed_record_and_json_prints_it_field_for_field(tmp_path: Path) -> None:
    import typing

    from memory import store as contract

    inspection = getattr(contract, "Inspection", None)
    assert inspection is not None, "memory.store has no Inspection record"
    assert typing.get_type_hints(contract.Store.inspect)["return"] == inspection | None
    asyncio.run(_a_person(f"sqlite:///{tmp_path / 'hilo.db'}"))
    out = _hilo(tmp_path, "inspect", "--user", "telegram:42", "--json")
    data = json.loads(out)
    fields = typing.get_type_hints(inspection)
    assert list(data) == list(fields)  # the sections, in the record's order
    for section in ("user", "identities", "conversations", "memories"):
        record = fields[section]
        record = typing.get_args(record)[0] if typing.get_origin(record) is list else record
        rows = data[section] if isinstance(data[section], list) else [data[section]]
        assert rows, section
        assert all(list(row) == list(typing.get_type_hints(record)) for row in rows), section
    assert out == json.dumps(data, indent=2, ensure_ascii=False) + "\n"  # printed as it always was
