"""Exception roots of the core: every exception hilo defines derives from HiloError (tests/test_errors.py).

HiloError
 ├── ConfigError            a setting is missing or wrong: the message says what to set
 ├── InputError             a person's input was refused (too long, empty): `key` names the catalogue text
 ├── NotFound               a user, conversation or message that does not exist or is not the caller's
 ├── Draining               the daemon is shutting down: no new work is accepted (bot.tasks.TaskSet.spawn)
 ├── ServiceUnavailable     an outside service the daemon needs (the Telegram Bot API, ...) cannot be reached or
 │   │                      failed: the message says which and what to check
 │   └── SendFailed         surfaces.telegram_outbound: a Bot API call given up after its retries
 ├── GaveUp                 bot.retry: a call given up after its retries (`error`, `attempts`)
 ├── ModelError             bot.models.base: TransientError (RateLimited, ServerError, ModelTimeout,
 │                          ConnectionFailed), PermanentError, AllModelsFailed
 ├── StoreError             the database refused: StoreUnavailable (here, so that surfaces catch it without
 │                          importing memory/), JournalFull (the database refused and bot.journal is full:
 │                          the platform is told to retry), memory.migrate: MigrationError
 ├── ImportFileError        memory.importer: an import file that cannot be read
 ├── Rollback               memory.rows: rolls a transaction back (never escapes the store)
 ├── AuthFailed             surfaces.web_auth: a credential was sent but is not valid (401)
 ├── JwksError              surfaces.web_jwks: JwksUnavailable, UnknownKey (a token's signing key cannot be had)
 ├── SendError            a transport could not send a part (`transient`, `code`, `retry_after`): bot/outbox.py
 ├── BodyTooLarge           surfaces.http_body: a request body over its limit (413)
 └── BadJson                surfaces.http_body: a body that cannot be taken as JSON (also a ValueError)

Each lives where its layer needs it; the vocabulary here imports nothing above it.
"""

from __future__ import annotations


class HiloError(Exception):
    """Root of every error hilo raises on purpose."""


class ConfigError(HiloError):
    """A setting is missing or wrong. The message tells the operator what to set."""


class InputError(HiloError):
    """A person's input was refused. `key` is the message-catalogue key of what to tell them."""

    def __init__(self, key: str, detail: str = "", **params: object) -> None:
        super().__init__(detail or key)
        self.key = key
        self.params = params


class NotFound(HiloError):
    """The thing asked for does not exist, or does not belong to the caller (never say which)."""


class RateLimited(HiloError):
    """A rate limit was reached (memory/sql_limits.py): nothing was stored; `wait` seconds until the next try may
    pass."""

    def __init__(self, wait: float) -> None:
        super().__init__(f"rate limited for {wait:.0f} s")
        self.wait = wait

    @classmethod
    def unless_zero(cls, wait: float) -> None:
        """Raise one when `wait` (RateLimits.hit_rates' answer) is not 0.0: a limit was reached."""
        if wait:
            raise cls(wait)


class ServiceUnavailable(HiloError):
    """An outside service cannot be reached or answered an error. The message says which and what to check."""


class Draining(HiloError):
    """The daemon is shutting down: new work is refused (the caller answers 503 or drops a late status)."""


class StoreError(HiloError):
    """Root of store errors (memory.store re-exports it: the store contract raises it)."""


class StoreUnavailable(StoreError):
    """The database cannot be reached, or stayed locked past the timeout. Retry later."""


class SendError(HiloError):
    """A transport (bot/ports.py Transport: Telegram, Twilio) could not send one part. `transient`: worth trying
    again (429, 5xx, timeouts, no answer); `code` the provider's error code or class name; `retry_after` the pause
    the provider asked for (seconds) or None. The outbox (bot/outbox.py) retries or records the failure."""

    def __init__(self, detail: str, *, transient: bool, code: str | int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.transient = transient
        self.code = code
        self.retry_after = retry_after
class JournalFull(StoreError):
    """The database could not take a message and the inbound journal (bot/journal.py) is at
    HILO_JOURNAL_MAX_BYTES: nothing was kept, the platform is answered with its retry status (503)."""
