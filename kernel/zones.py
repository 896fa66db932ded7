"""Time zones: the one a person's client names (the web widget sends the browser's) or the person names ("/timezone
Madrid", the `set_timezone` tool): an IANA name hilo can use, or None."""

from __future__ import annotations

import functools
import unicodedata
import zoneinfo
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

#: Longer than any IANA zone name ("America/Argentina/ComodRivadavia" is 32).
MAX_CHARS = 64


def zone_name(raw: object) -> str | None:
    """`raw` when it is the name of a time zone this machine knows ("Europe/Madrid"), else None."""
    if not isinstance(raw, str) or not 0 < len(raw) <= MAX_CHARS or "\x00" in raw:
        return None
    try:
        ZoneInfo(raw)
    except (ZoneInfoNotFoundError, ValueError):
        return None
    return raw


def find_zone(words: str) -> str | None:
    """The time zone a person names: an IANA name in any case ("europe/madrid"), or a city or region (accents
    optional: "Bogotá") that names one zone alone ("new york"; "Buenos Aires": "America/Argentina/Buenos_Aires",
    a link and the zone it names count once, the zone wins); None when it names none, or several that differ."""
    if len(words) > MAX_CHARS * 2:
        return None
    wanted = _folded(words)
    if not wanted or len(wanted) > MAX_CHARS:
        return None
    exact, by_place = _zones()
    if wanted in exact:
        return exact[wanted]
    found = by_place.get(wanted, ())
    if len({_offsets(z) for z in found}) != 1:
        return None
    return max(found, key=lambda z: (z.count("/"), z))  # a link and its zone: the zone ("America/Argentina/...")


@functools.cache
def _zones() -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """Every zone this machine knows, by its folded name and by its last part (its city); deprecated areas
    ("US/Eastern", "Etc/GMT+3") are found by their whole name only."""
    names = sorted(zoneinfo.available_timezones())
    exact = {_folded(n): n for n in names}
    places: dict[str, list[str]] = {}
    for name in names:
        if "/" not in name or name.split("/", 1)[0] in _OLD_AREAS:
            continue
        places.setdefault(_folded(name.rsplit("/", 1)[1]), []).append(name)
    return exact, {place: tuple(zones) for place, zones in places.items()}


def _folded(words: str) -> str:
    """Compared without case, accents, underscores or extra spaces: "  São_Paulo" -> "sao paulo"."""
    bare = "".join(c for c in unicodedata.normalize("NFKD", words) if not unicodedata.combining(c))
    return " ".join(bare.replace("_", " ").split()).casefold()


_OLD_AREAS = frozenset({"Etc", "SystemV", "US", "Brazil", "Canada", "Chile", "Mexico"})
#: Moments whose UTC offsets tell two zones apart (winter and summer, then and now).
_SAMPLES = tuple(datetime(year, month, 15, 12, tzinfo=UTC) for year in (1995, 2010, 2026) for month in (1, 7))


def _offsets(name: str) -> tuple[object, ...]:
    """The zone's UTC offsets at the sample moments: a link and its zone have the same."""
    zone = ZoneInfo(name)
    return tuple(moment.astimezone(zone).utcoffset() for moment in _SAMPLES)
