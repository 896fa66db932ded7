"""`hilo stats`: what the turns of a range of UTC days did, per surface and per day, written once over `Db`
(bot/cli_stats.py prints it; docs/stats.md documents the shape). Ids and counts only: no text, no handle.

Four bounded reads, each over the range [start, end) and on an index that exists: the person's messages of the
range (messages_user_created_at, role 'user'), with whether each was answered (messages_reply_to); the turn calls
of those messages (model_calls_message); the failed deliveries of their turns (messages_reply_to,
deliveries_message); the retention runs of the range (retention_runs_ran_at). Days are bucketed here, in Python,
from the timestamps (SQLite's text and Postgres' timestamptz truncate differently), and the p90 is computed here
from the per-conversation counts (the two databases' percentiles differ), so no SQL differs between dialects.

Definitions (per surface and UTC day of the person's message):
- turns: the person's messages answered (an assistant message replies to each); a message no model answered is
  not a turn, but its calls count in the model failure rate;
- conversations / people: those with a message of the person that day; exchanges per conversation (mean, p90
  nearest-rank) over them: each conversation's turns that day;
- tokens and cost: the sums over the turn calls of the day's messages (`model_calls.cost_usd`, costs' price
  table), and their means per conversation and per person;
- fallback rate: turns answered by a fallback model (the answering call names `fallback_from`) / turns;
- model failure rate: calls that failed (an outcome that is no answer) / calls made (a call skipped by an open
  circuit or a spend cap was not made);
- delivery failures: parts of the day's turns (the reply's, or the apology's when no model answered) whose
  delivery failed for good (deliveries status 'failed');
- retention deleted: messages the retention job deleted that day (retention_runs).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, get_args

from kernel.types import AnswerOutcome
from memory.rows import Db, as_dt

#: outcomes of a call that gave an answer; a skipped call (no request made) is neither a success nor a failure
ANSWERS = frozenset(get_args(AnswerOutcome))
SKIPPED = frozenset({"circuit_open", "cap_reached"})

_FILTER = "AND ($3::text IS NULL OR m.surface = $3) "
_RANGE = "m.role = 'user' AND m.created_at >= $1 AND m.created_at < $2 " + _FILTER
_MESSAGES = ("SELECT m.id, m.surface, m.conversation_id, m.user_id, m.created_at, "
             "EXISTS (SELECT 1 FROM messages r WHERE r.reply_to = m.id AND r.role = 'assistant') "
             "FROM messages m WHERE " + _RANGE)
#: CROSS JOIN: SQLite joins in the order written (the range's messages first, on their index); Postgres plans freely
_CALLS = ("SELECT c.message_id, c.outcome, c.fallback_from, c.tokens_in, c.tokens_out, c.cost_usd "
          "FROM messages m CROSS JOIN model_calls c WHERE c.message_id = m.id AND c.purpose = 'turn' AND " + _RANGE)
#: a turn's parts: of its reply, or of the person's message itself when no model answered (the apology)
_DELIVERIES = ("SELECT m.surface, m.created_at FROM messages m CROSS JOIN deliveries d "
               "WHERE d.message_id = m.id AND d.status = 'failed' AND " + _RANGE + "UNION ALL "
               "SELECT m.surface, m.created_at FROM messages m CROSS JOIN messages r CROSS JOIN deliveries d "
               "WHERE r.reply_to = m.id AND d.message_id = r.id AND d.status = 'failed' AND " + _RANGE)
_RETENTION = ("SELECT surface, ran_at, messages FROM retention_runs WHERE ran_at >= $1 AND ran_at < $2 "
              "AND ($3::text IS NULL OR surface = $3)")


@dataclass(slots=True)
class _Conv:
    """One conversation on one day: its turns and the person's."""

    user_id: int
    turns: int = 0


@dataclass(slots=True)
class _Bucket:
    """What one (day, surface) gathered."""

    conversations: dict[int, _Conv] = field(default_factory=dict)
    turns: int = 0
    fallback_turns: int = 0
    calls: int = 0
    failed: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    delivery_failures: int = 0
    retention_deleted: int = 0

    def add(self, other: _Bucket) -> None:
        """Add `other`'s sums (not its conversations: the totals count each (day, conversation) apart)."""
        for name in ("turns", "fallback_turns", "calls", "failed", "tokens_in", "tokens_out", "cost_usd",
                     "delivery_failures", "retention_deleted"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def _day(value: str | datetime) -> str:
    return as_dt(value).astimezone(UTC).date().isoformat()


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


async def report(db: Db, start: date, days: int, surfaces: Sequence[str], surface: str | None) -> dict[str, Any]:
    """The stats of `days` UTC days from `start`, per (day, surface) of `surfaces` (only `surface` when given),
    and their totals: the shape docs/stats.md documents. An empty database gives zeros."""
    shown = [surface] if surface is not None else list(surfaces)
    day_names = [(start + timedelta(days=i)).isoformat() for i in range(days)]
    buckets = {(d, s): _Bucket() for d in day_names for s in shown}
    lo, hi = db.ts(_midnight(start)), db.ts(_midnight(start + timedelta(days=days)))

    def bucket(day: str, where: str) -> _Bucket:
        return buckets.setdefault((day, where), _Bucket())  # a surface outside `surfaces` still counts

    where_of: dict[int, _Bucket] = {}  # message id -> its bucket
    for mid, where, conv_id, user_id, created_at, answered in await db.all(_MESSAGES, lo, hi, surface):
        b = bucket(_day(created_at), where)
        conv = b.conversations.setdefault(conv_id, _Conv(user_id))
        if answered:
            conv.turns += 1
            b.turns += 1
        where_of[mid] = b
    fallback_answered: set[int] = set()
    for mid, outcome, fallback_from, tokens_in, tokens_out, cost in await db.all(_CALLS, lo, hi, surface):
        b = where_of[mid]
        b.tokens_in, b.tokens_out, b.cost_usd = b.tokens_in + tokens_in, b.tokens_out + tokens_out, b.cost_usd + cost
        if outcome in SKIPPED:
            continue
        b.calls += 1
        if outcome not in ANSWERS:
            b.failed += 1
        elif fallback_from is not None and mid not in fallback_answered:
            fallback_answered.add(mid)
            b.fallback_turns += 1
    for where, created_at in await db.all(_DELIVERIES, lo, hi, surface):
        bucket(_day(created_at), where).delivery_failures += 1
    for where, ran_at, n in await db.all(_RETENTION, lo, hi, surface):
        bucket(_day(ran_at), where).retention_deleted += int(n)

    rows = [{"day": d, "surface": s, **_figures(b, [c.turns for c in b.conversations.values()], _people([b]))}
            for (d, s), b in sorted(buckets.items())]
    total = _Bucket()
    for b in buckets.values():
        total.add(b)
    exchanges = [c.turns for b in buckets.values() for c in b.conversations.values()]
    return {"since": day_names[0], "until": day_names[-1], "days": days, "surface": surface, "rows": rows,
            "totals": _figures(total, exchanges, _people(buckets.values()))}


def _people(buckets: Iterable[_Bucket]) -> int:
    return len({c.user_id for b in buckets for c in b.conversations.values()})


def p90(counts: Sequence[int]) -> int:
    """The nearest-rank 90th percentile (0 of nothing): the smallest count that 90% of them do not exceed."""
    if not counts:
        return 0
    ranked = sorted(counts)
    return ranked[max(0, math.ceil(0.9 * len(ranked)) - 1)]


def _ratio(part: float, whole: int) -> float:
    return round(part / whole, 6) if whole else 0.0


def _figures(b: _Bucket, exchanges: list[int], persons: int) -> dict[str, Any]:
    """One row's figures; `exchanges`: the turns of each conversation-day it covers."""
    conversations = len(exchanges)

    def means(whole: int) -> dict[str, float]:
        return {"tokens_in": _ratio(b.tokens_in, whole), "tokens_out": _ratio(b.tokens_out, whole),
                "cost_usd": _ratio(b.cost_usd, whole)}

    return {
        "turns": b.turns, "conversations": conversations, "people": persons,
        "exchanges_per_conversation": {"mean": _ratio(sum(exchanges), conversations), "p90": p90(exchanges)},
        "tokens_in": b.tokens_in, "tokens_out": b.tokens_out, "cost_usd": round(b.cost_usd, 6),
        "per_conversation": means(conversations), "per_person": means(persons),
        "fallback_turns": b.fallback_turns, "fallback_rate": _ratio(b.fallback_turns, b.turns),
        "model_calls": b.calls, "model_failures": b.failed, "model_failure_rate": _ratio(b.failed, b.calls),
        "delivery_failures": b.delivery_failures, "retention_deleted": b.retention_deleted,
    }
