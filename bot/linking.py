"""Verified identity linking: the same person on Telegram, WhatsApp and the web becomes one user.

`/link` on one surface answers with a one-time code; `/link CODE` from another surface joins that identity
to the person who asked for the code (their users merge: one memory, histories kept with their surfaces).

Codes: 12 characters of Crockford base32 (60 bits), shown as XXXX-XXXX-XXXX, forgiving to type (case,
dashes, spaces, O/0, I/L/1), single use, valid 10 minutes, stored only as a SHA-256 hash. A code never works
for the identity that asked for it. Guessing is bounded by a lockout per identity and per address
(LinkPolicy.max_failures wrong codes in a window; an IPv6 address counts as its /64, which one subscriber
holds whole) and a cap on attempts per code. Nothing refuses a person for what OTHERS did: past a global
count of wrong codes (LinkPolicy.global_max_failures) linking is under pressure, and only keys that are
already guessing get fewer tries (the README's linking section has the arithmetic: 60 bits make guessing
hopeless even for a crowd of addresses, so no global stop is needed). Every issue, link, unlink, refusal
and lockout is an audit row.
"""

from __future__ import annotations

import hashlib
import ipaddress
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.types import utcnow
from memory.sqlite_linking import LinkPolicy
from memory.store import Store

ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32: no I, L, O, U
CODE_LENGTH = 12
CODE_TTL = timedelta(minutes=10)
_TYPO = str.maketrans({"O": "0", "I": "1", "L": "1"})

__all__ = ["LinkPolicy", "Linker", "RedeemResult", "address_key", "code_hash", "new_code", "normalize"]


def new_code() -> str:
    raw = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))
    return "-".join(raw[i:i + 4] for i in range(0, CODE_LENGTH, 4))


def address_key(client_ip: str) -> str:
    """The address a web attempt is counted against: IPv4 as it is, IPv6 as its /64 network (a subscriber
    gets at least a /64, so one address each would give a guesser 2^64 fresh keys)."""
    try:
        ip = ipaddress.ip_address(client_ip.strip())
    except ValueError:
        return client_ip[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def normalize(text: str) -> str | None:
    """The canonical code typed by a person, or None if it cannot be one."""
    cleaned = "".join(ch for ch in text.upper() if ch.isalnum()).translate(_TYPO)
    if len(cleaned) != CODE_LENGTH or any(ch not in ALPHABET for ch in cleaned):
        return None
    return cleaned


def code_hash(canonical: str) -> str:
    return hashlib.sha256(f"hilo-link:{canonical}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class RedeemResult:
    """status: linked | already_linked | locked | invalid | own_code."""

    status: str
    user_id: int | None = None
    locked_until: datetime | None = None


class Linker:
    def __init__(self, store: Store, policy: LinkPolicy | None = None) -> None:
        self.store = store
        self.policy = policy or LinkPolicy()

    async def request(self, surface: str, external_user_id: str) -> str:
        """A fresh code for this identity (its older unused codes stop working)."""
        code = new_code()
        canonical = normalize(code)
        assert canonical is not None
        await self.store.issue_link_code(surface, external_user_id, code_hash(canonical), utcnow() + CODE_TTL)
        return code

    async def redeem(
        self, surface: str, external_user_id: str, typed: str, *, client_ip: str | None = None,
    ) -> RedeemResult:
        """Redeem `typed` for this identity. `client_ip` (the web, where identities cost nothing to make) is
        counted as a second key: its wrong codes lock it out too."""
        canonical = normalize(typed)
        # Malformed input counts as a wrong code: the limits must not depend on what the guesser types.
        digest = code_hash(canonical) if canonical else code_hash("!" + typed[:64])
        also = ("ip", address_key(client_ip)) if client_ip else None
        status, user_id, until = await self.store.redeem_link_code(
            surface, external_user_id, digest, self.policy, also)
        return RedeemResult(status, user_id, until)

    async def unlink(self, surface: str, external_user_id: str, actor: str = "person") -> str:
        status, _ = await self.store.unlink_identity(surface, external_user_id, actor)
        return status
