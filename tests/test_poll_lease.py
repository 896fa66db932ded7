"""The Telegram poller's lease (bot/poll_lease.py) against what no StoreError is: a driver's surprise or a bug in a
store call. Before, such an error went up out of `acquire` (the polling loop ended: this process never polled
again) and out of `renew` (the lease keeper ended untracked while the poller went on polling under a lease
nobody renewed: once it lapsed, a second process could poll beside it). On both backends."""

from __future__ import annotations

from typing import Any

import pytest
import structlog.testing

from bot.poll_lease import NAME, PollLease


def _broken_once(real: Any, raised: list[str]) -> Any:
    async def call(*args: Any, **kwargs: Any) -> Any:
        if not raised:
            raised.append("raised")
            raise RuntimeError("not a StoreError")
        return await real(*args, **kwargs)
    return call


async def test_acquire_outlives_an_error_its_claim_did_not_expect(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    raised: list[str] = []
    monkeypatch.setattr(store, "claim_job", _broken_once(store.claim_job, raised))
    lease = PollLease(store, ttl=0.3)
    with structlog.testing.capture_logs() as logs:
        await lease.acquire()
    assert raised == ["raised"]
    assert [e["event"] for e in logs] == ["telegram.poll_lease_crashed", "telegram.poll_lease_taken"]
    assert logs[0]["error"] == "RuntimeError"
    assert await store.renew_job(NAME, lease.owner, 30)  # it holds the lease


async def test_a_renewal_that_fails_unexpectedly_stops_polling_until_the_lease_is_taken_again(
    store: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    lease = PollLease(store, ttl=30)
    await lease.acquire()
    raised: list[str] = []
    monkeypatch.setattr(store, "renew_job", _broken_once(store.renew_job, raised))
    with structlog.testing.capture_logs() as logs:
        assert await lease.renew() is False  # not known renewed: the poller stops (surfaces/telegram_polling.py)
    assert raised == ["raised"]
    assert [(e["event"], e["error"]) for e in logs] == [("telegram.poll_lease_crashed", "RuntimeError")]
    assert await lease.renew() is True  # the next renewal, on a store that answers, holds it again
