"""Keyed digests that stand in for a person's identifiers where a row must not hold them in the clear: the rate
limits' counters (surfaces/web_guard.py writes them, `forget` finds a person's by the same digest), a forgotten
identity's lockout, and the record of erasures (bot/erasures.py)."""

from __future__ import annotations

import hashlib


def rate_subject(key: str) -> str:
    """What a rate limit's counter is keyed by instead of an IP address or a visitor id (24 hex digits)."""
    return hashlib.blake2b(key.encode(), digest_size=12, person=b"hilo-rate").hexdigest()


def kept_lockout(external_user_id: str) -> str:
    """What a forgotten identity's link lockout still in force is keyed by (memory/sql_forget.py): the lockout
    holds until it ends, and the row no longer names the identity."""
    return "forgotten:" + hashlib.blake2b(external_user_id.encode(), digest_size=12, person=b"hilo-lock").hexdigest()


def erased(kind: str, value: str) -> str:
    """What the record of erasures (bot/erasures.py) keeps of a forgotten person's handle or identity instead of
    the identifier itself: `kind` ("handle", or the identity's surface) and 32 hex digits."""
    return f"{kind}:" + hashlib.blake2b(value.encode(), digest_size=16, person=b"hilo-erased").hexdigest()
