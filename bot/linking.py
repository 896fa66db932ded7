"""Verified identity linking: the same person on Telegram, WhatsApp and the web becomes one user.

`/link` on one surface answers with a one-time code; `/link CODE` from another surface shows whose account
the code joins (surface and display name of the person who asked for it), and `/link CODE yes` from that same
identity joins it (their users merge: one memory, histories kept with their surfaces). The code's owner is
then told, where they asked for the code, which identity joined. A confirm from an identity that was not
shown the prompt is only a prompt: someone told "send /link CODE yes" still sees whose account it is first.

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
import unicodedata
from datetime import timedelta

from bot.notices import Notices
from kernel import catalog, log
from kernel.types import InboundMessage
from memory.store import LinkCodeOwner, LinkPolicy, Redemption, Store

logger = log.get("hilo.linking")

ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32: no I, L, O, U
CODE_LENGTH = 12
CODE_TTL = timedelta(minutes=10)
_TYPO = str.maketrans({"O": "0", "I": "1", "L": "1"})

__all__ = ["LinkPolicy", "Linker", "Redemption", "address_key", "code_hash", "display_name", "new_code", "normalize",
           "show", "who"]


def new_code() -> str:
    return show("".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH)))


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


def display_name(msg: InboundMessage) -> str | None:
    """How a person shows on their surface, for the other side of a link to recognise them: Telegram's first
    name and @username, WhatsApp's profile name and the number's last four digits, the terminal's handle; a
    web visitor has none. Their own text, so cleaned: no controls or line breaks, at most 64 characters."""
    md = msg.metadata
    name: str | None = None
    if msg.surface == "telegram":
        first, user = _clean(md.get("first_name")), _clean(md.get("username"))
        name = f"{first} (@{user})" if first and user else first or (f"@{user}" if user else None)
    elif msg.surface == "whatsapp":
        digits = "".join(ch for ch in msg.sender if ch.isdigit())[-4:]
        profile = _clean(md.get("profile_name"))
        tail = f"…{digits}" if digits else None
        name = f"{profile} ({tail})" if profile and tail else profile or tail
    elif msg.surface == "cli":
        name = _clean(msg.handle or msg.sender)
    return name[:NAME_CHARS] if name else None


NAME_CHARS = 64


def _clean(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    kept = "".join(ch if unicodedata.category(ch)[0] != "C" else " " for ch in value)
    return " ".join(kept.split())[:NAME_CHARS] or None


def who(name: str | None, surface: str, lang: str) -> str:
    """"Ana (@ana) on Telegram", or "an account with no name on the web chat", in `lang`."""
    where = catalog.t(f"surface_{surface}", lang) if f"surface_{surface}" in catalog.MESSAGES["en"] else surface
    if name:
        return catalog.t("link_who", lang, name=name, surface=where)
    return catalog.t("link_who_unnamed", lang, surface=where)


def show(canonical: str) -> str:
    """A canonical code as people see it: XXXX-XXXX-XXXX."""
    return "-".join(canonical[i:i + 4] for i in range(0, len(canonical), 4))


class Linker:
    def __init__(self, store: Store, policy: LinkPolicy | None = None, notices: Notices | None = None) -> None:
        self.store = store
        self.policy = policy or LinkPolicy()
        self.notices = notices

    async def request(
        self, surface: str, external_user_id: str, *, name: str | None = None, language: str | None = None,
        conversation_ref: str | None = None,
    ) -> str:
        """A fresh code for this identity (its older unused codes stop working). `name` is shown to whoever
        redeems it; `language` and `conversation_ref` say how and where to tell the owner who joined."""
        code = new_code()
        canonical = normalize(code)
        assert canonical is not None
        await self.store.issue_link_code(surface, external_user_id, code_hash(canonical), self.store.clock() + CODE_TTL,
                                         owner_name=name, language=language, conversation_ref=conversation_ref)
        return code

    async def redeem(
        self, surface: str, external_user_id: str, typed: str, *, client_ip: str | None = None,
        confirm: bool = False,
    ) -> Redemption:
        """One step of redeeming `typed` for this identity: a right code gives "prompt" (with its owner),
        and only `confirm` from the identity shown that prompt links. `client_ip` (the web, where identities
        cost nothing to make) is counted as a second key: its wrong codes lock it out too."""
        canonical = normalize(typed)
        # Malformed input counts as a wrong code: the limits must not depend on what the guesser types.
        digest = code_hash(canonical) if canonical else code_hash("!" + typed[:64])
        also = ("ip", address_key(client_ip)) if client_ip else None
        return await self.store.redeem_link_code(surface, external_user_id, digest, self.policy, also,
                                                 confirm=confirm)

    async def tell_owner(self, owner: LinkCodeOwner, joined: InboundMessage, default_language: str) -> None:
        """Tell the code's owner, where they asked for it, which identity joined their account. Never raises:
        the link is made, and its answer to the person who joined must not be lost to a failed notice."""
        if self.notices is None:
            return
        lang = catalog.language(owner.language, default_language)
        text = catalog.t("link_joined", lang, who=who(display_name(joined), joined.surface, lang))
        try:
            await self.notices.send(owner.user_id, owner.surface, owner.external_user_id, text,
                                    conversation_ref=owner.conversation_ref)
        except Exception as exc:
            logger.error("link.notice_failed", user_id=owner.user_id, surface=owner.surface,
                         error=type(exc).__name__)

    async def unlink(self, surface: str, external_user_id: str, actor: str = "person") -> str:
        status, _ = await self.store.unlink_identity(surface, external_user_id, actor)
        return status
