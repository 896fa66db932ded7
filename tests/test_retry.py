"""bot.retry, the one retry module: Retry-After parsing (RFC 9110) and the retry loop's schedule, with the
waits recorded instead of slept. The callers' own paths (models, Telegram, Twilio) are tested through their real
SDKs in test_models.py, test_telegram.py and test_whatsapp.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from bot.retry import MAX_PAUSE, GaveUp, RetryPolicy, call_with_retry, parse_retry_after, retry_after_from_headers

NOW = datetime(1994, 11, 6, 8, 49, 7, tzinfo=UTC).timestamp()  # 30 s before the RFC's example date


def now() -> float:
    return NOW


# -- Retry-After --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "seconds"), [
    ("120", 120.0), ("0", 0.0), (" 7 ", 7.0), ("2.5", 2.5),  # delta-seconds (and the decimals providers send)
    ("Sun, 06 Nov 1994 08:49:37 GMT", 30.0),  # IMF-fixdate
    ("Sunday, 06-Nov-94 08:49:37 GMT", 30.0),  # obsolete RFC 850
    ("Sun Nov  6 08:49:37 1994", 30.0),  # obsolete asctime (no zone: GMT)
    ("Sun, 06 Nov 1994 08:48:00 GMT", 0.0),  # a date already past: no wait
    ("Sun, 06 Nov 1994 09:49:37 +0100", 30.0),  # a zone other than GMT is still read right
    ("Sun, 06 Nov 1994 09:49:37 GMT", 3630.0),
])
def test_parse_retry_after(value: str, seconds: float) -> None:
    assert parse_retry_after(value, now=now) == seconds


@pytest.mark.parametrize("value", [
    None, "", "   ", "soon", "-5", "+5", "1e3", "inf", "nan", "0x10", ".5", "5 seconds", "Mon", "Sun, 32 Nov 1994",
])
def test_invalid_retry_after_is_none(value: str | None) -> None:
    assert parse_retry_after(value, now=now) is None


def test_a_huge_retry_after_is_capped() -> None:
    assert parse_retry_after("9" * 40, now=now) == MAX_PAUSE == 2.0**31
    assert parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now=now) == MAX_PAUSE


def test_retry_after_headers() -> None:
    date = format_datetime(datetime.fromtimestamp(NOW + 12, UTC), usegmt=True)
    assert retry_after_from_headers({"retry-after": date}, now=now) == 12.0
    assert retry_after_from_headers({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_from_headers({"retry-after-ms": "soon", "retry-after": "9"}) == 9.0
    assert retry_after_from_headers({"retry-after": "later"}) is None
    assert retry_after_from_headers({}) is None
    assert retry_after_from_headers(None) is None


# -- the loop -----------------------------------------------------------------------------------------------------

class Flaky(Exception):
    def __init__(self, pause: float | None = None) -> None:
        super().__init__("flaky")
        self.pause = pause


class Broken(Exception):
    pass


def failing(*errors: BaseException, result: str = "done") -> Callable[[], Awaitable[str]]:
    """A call that raises `errors` one by one, then answers `result`."""
    queue = list(errors)

    async def call() -> str:
        if queue:
            raise queue.pop(0)
        return result

    return call


class Recorder:
    def __init__(self) -> None:
        self.waits: list[float] = []
        self.retries: list[tuple[int, str, float]] = []

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)

    def on_retry(self, attempt: int, error: BaseException, wait: float) -> None:
        self.retries.append((attempt, type(error).__name__, wait))

    async def run(self, call: Callable[[], Awaitable[str]], policy: RetryPolicy) -> tuple[str, int]:
        return await call_with_retry(
            call, RetryPolicy(policy.attempts, policy.backoff_base, policy.backoff_max, policy.retry_after_cap,
                              sleep=self.sleep),
            transient=lambda e: isinstance(e, Flaky), on_retry=self.on_retry,
            retry_after=lambda e: e.pause if isinstance(e, Flaky) else None,
        )


async def test_the_backoff_doubles_up_to_its_max_with_jitter_below_the_base() -> None:
    rec = Recorder()
    with pytest.raises(GaveUp) as gave_up:
        await rec.run(failing(*[Flaky() for _ in range(9)]), RetryPolicy(attempts=6, backoff_base=1, backoff_max=4))
    assert gave_up.value.attempts == 6 and isinstance(gave_up.value.error, Flaky) and gave_up.value.pause is None
    assert len(rec.waits) == 5
    floors = [1.0, 2.0, 4.0, 4.0, 4.0]
    jitter = [wait - floor for wait, floor in zip(rec.waits, floors, strict=True)]
    assert all(0 <= j < 1 for j in jitter), rec.waits
    assert rec.retries == [(n, "Flaky", wait) for n, wait in enumerate(rec.waits, 1)]  # logged as slept


async def test_the_servers_pause_is_honoured_and_a_pause_over_the_cap_gives_up_at_once() -> None:
    rec = Recorder()
    policy = RetryPolicy(attempts=4, backoff_base=1, backoff_max=4, retry_after_cap=30)
    assert await rec.run(failing(Flaky(pause=7), Flaky(pause=0), Flaky()), policy) == ("done", 4)
    assert rec.waits[:2] == [7, 0] and 4 <= rec.waits[2] < 5  # then backoff for attempt 3

    rec = Recorder()
    with pytest.raises(GaveUp) as gave_up:
        await rec.run(failing(Flaky(), Flaky(pause=3600)), policy)
    assert (gave_up.value.attempts, gave_up.value.pause, len(rec.waits)) == (2, 3600, 1)

    rec = Recorder()  # the first attempt too: a pause over the cap gives up before any wait
    with pytest.raises(GaveUp) as gave_up:
        await rec.run(failing(Flaky(pause=3600)), policy)
    assert (gave_up.value.attempts, gave_up.value.pause, rec.waits, rec.retries) == (1, 3600, [], [])

    rec = Recorder()  # the last attempt: given up for the attempts, not for the pause
    with pytest.raises(GaveUp) as gave_up:
        await rec.run(failing(Flaky(), Flaky(pause=3600)), RetryPolicy(attempts=2, backoff_base=1))
    assert (gave_up.value.attempts, gave_up.value.pause) == (2, None)


async def test_a_first_attempt_that_succeeds_builds_no_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # tenacity's loop is built only for a retry (RetryPolicy.call): most calls never pay for it
    def no_loop(*args: object, **kwargs: object) -> None:
        raise AssertionError("a loop was built")

    monkeypatch.setattr(RetryPolicy, "retrying", no_loop)
    rec = Recorder()
    assert await rec.run(failing(), RetryPolicy(attempts=3)) == ("done", 1)
    with pytest.raises(GaveUp) as gave_up:  # one attempt only: a transient error is given up without a loop too
        await rec.run(failing(Flaky()), RetryPolicy(attempts=1))
    assert (gave_up.value.attempts, gave_up.value.pause, rec.waits) == (1, None, [])


async def test_permanent_errors_are_not_retried_and_foreign_ones_propagate() -> None:
    rec = Recorder()
    with pytest.raises(GaveUp) as gave_up:
        await rec.run(failing(Flaky(), Broken()), RetryPolicy(attempts=5, backoff_base=0.01))
    assert gave_up.value.attempts == 2 and isinstance(gave_up.value.error, Broken) and len(rec.waits) == 1

    async def foreign() -> str:
        raise KeyError("not ours")

    with pytest.raises(KeyError):
        await call_with_retry(foreign, RetryPolicy(sleep=rec.sleep), transient=lambda e: True,
                              on_retry=rec.on_retry, errors=(Broken,))


async def test_cancellation_is_never_retried() -> None:
    rec = Recorder()
    with pytest.raises(asyncio.CancelledError):
        await call_with_retry(failing(asyncio.CancelledError()), RetryPolicy(sleep=rec.sleep),
                              transient=lambda e: True, on_retry=rec.on_retry)
    assert rec.waits == []
