"""Issue 13 item 7, the retention policy (HILO_RETENTION_DAYS): a surface's messages older than its days are
deleted by the `retention` job with what is derived from them (vectors, search terms, episodes left empty), other
surfaces and newer messages stay, memories stay, and the counts are logged and kept in `retention_runs`. On every
backend, through the jobs seam (bot/job_list.py's registry, as `hilo serve` runs it)."""

from __future__ import annotations

from typing import Any

import pytest

from bot import job_list, retention
from bot.config import Settings
from bot.jobs import JobContext
from kernel.errors import ConfigError
from tests.backends import Backend, TestClock
from tests.schema_walk import traces
from tests.test_linking import msg, pipeline


async def said(store: Any, surface: str, sender: str, ext: str, text: str, clock: TestClock) -> None:
    await pipeline(store).handle(msg(surface, sender, ext, text, received_at=clock()))


async def test_old_messages_of_a_surface_go_with_what_was_derived_from_them(
    store: Any, backend: Backend, clock: TestClock,
) -> None:
    await said(store, "web", "v1", "w1", "the oldweb marmalade recipe", clock)
    await said(store, "telegram", "7", "t1", "the oldtelegram marmalade story", clock)
    user_id = await store.identity_user("web", "v1")
    await store.remember(user_id, "likes marmalade", 3)
    old_ids = [r[0] for r in backend.select("SELECT id FROM messages ORDER BY id")]
    assert await store.write_vectors("test", [(i, [1.0, 0.0]) for i in old_ids]) == len(old_ids)
    clock.advance(8 * 86400)
    await said(store, "web", "v2", "w2", "the newweb marmalade recipe", clock)  # another person: no recall

    settings = Settings.from_mapping({"HILO_RETENTION_DAYS": "web=7,telegram=30"})
    job = job_list.registry(settings, store)["retention"]
    assert job.every == retention.EVERY_SECONDS
    assert await job.run(JobContext("retention", "r1")) is True

    left = backend.select("SELECT id, surface FROM messages ORDER BY id")
    assert [s for _, s in left] == ["telegram", "telegram", "web", "web"]  # the old web exchange went
    # its search terms with it (SQLite's FTS vocabulary, Postgres' search column), the others' stay
    assert traces(backend, -1, ["oldweb"]) == {}
    assert "messages" in traces(backend, -1, ["oldtelegram"])
    assert backend.count("message_vectors") == 2  # the telegram exchange's vectors
    assert backend.select("SELECT content FROM memories") == [("likes marmalade",)]
    [run] = await store.retention_runs()
    assert (run["surface"], run["days"], run["messages"], run["vectors"]) == ("web", 7, 2, 2)
    assert run["episodes"] == 1  # the old web episode had no message left
    assert await job.run(JobContext("retention", "r2")) is False  # nothing more to delete
    assert len(await store.retention_runs()) == 1


async def test_large_backlogs_go_a_batch_at_a_time(store: Any, backend: Backend, clock: TestClock,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retention, "BATCH", 3)
    for i in range(4):
        await said(store, "whatsapp", "+1", f"SM{i}", f"message {i}", clock)
    clock.advance(2 * 86400)
    assert await retention.run(store, retention.parse("1"), "r") == {"whatsapp": (8, 0, 1)}
    assert backend.count("messages") == 0
    assert [r["messages"] for r in await store.retention_runs()] == [2, 3, 3]  # newest first


def test_the_policy_reads_one_number_or_one_per_surface() -> None:
    assert Settings.from_mapping({}).retention_days == ()
    assert dict(retention.parse("30")) == {"cli": 30, "web": 30, "telegram": 30, "whatsapp": 30}
    assert retention.parse(" telegram=30, whatsapp=90,web=7 ") == (("telegram", 30), ("web", 7), ("whatsapp", 90))
    for bad in ("sms=3", "web=soon", "0", "web=-1"):
        with pytest.raises(ConfigError, match="HILO_RETENTION_DAYS"):
            retention.parse(bad)
    assert "retention" not in {j.name for j in job_list.registry(Settings(), None)}  # type: ignore[arg-type]
