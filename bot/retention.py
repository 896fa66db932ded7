"""The retention policy (HILO_RETENTION_DAYS): messages older than N days per surface are deleted by the
`retention` job (bot/job_list.py adds it when the policy is set; unset, everything is kept), with what is derived
from them (memory/sql_retention.py). Each run logs `retention.done` with the counts per surface, and each batch
that deleted something is a `retention_runs` row, which `Store.retention_runs` reads back (for `hilo stats`).

Downloaded media (voice notes: bot/media.py) has its own setting, HILO_MEDIA_RETENTION_DAYS (30 by default): the
`media_retention` job (`run_media`) deletes the files kept longer, and their media rows keep everything else (size,
duration, transcriber; the transcript is the message). Files in HILO_DATA_DIR are this host's: with several hosts,
the directory must be shared for one host's job to reach another's files, or the files kept in Supabase Storage
(HILO_MEDIA_STORE=supabase: bot/media_store.py), which every host reaches. A place that cannot delete (Supabase
Storage down, a refused key) stops the run with `media_retention.failed`: the rows keep their paths, and the next
run tries again."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from kernel import log
from kernel.errors import ConfigError
from kernel.types import SURFACES

if TYPE_CHECKING:
    from bot.media_store import MediaFiles
    from memory.store import Store

logger = log.get("hilo.retention")
#: How often the job runs: hourly (the policy counts in days; a run with nothing to delete is one query a surface).
EVERY_SECONDS = 3600
#: Messages deleted per transaction (each a short write: the other writers wait for one batch at most).
BATCH = 500
#: (surface, days) pairs: the policy.
Policy = tuple[tuple[str, int], ...]


def parse(raw: str) -> Policy:
    """HILO_RETENTION_DAYS: "" (keep everything), "30" (every surface) or "telegram=30,whatsapp=90,web=7"."""
    raw = raw.strip()
    if not raw:
        return ()
    example = "e.g. 30, or telegram=30,whatsapp=90,web=7"
    if "=" not in raw:
        return tuple((s, _days(raw, example)) for s in SURFACES)
    policy: dict[str, int] = {}
    for part in raw.split(","):
        surface, _, days = part.partition("=")
        surface = surface.strip()
        if surface not in SURFACES:
            raise ConfigError(f"HILO_RETENTION_DAYS: {surface!r} is not a surface ({', '.join(SURFACES)}); {example}")
        policy[surface] = _days(days, example)
    return tuple(sorted(policy.items()))


def _days(raw: str, example: str) -> int:
    try:
        days = int(raw.strip())
    except ValueError:
        raise ConfigError(f"HILO_RETENTION_DAYS: {raw.strip()!r} is not a whole number of days; {example}") from None
    if days < 1:
        raise ConfigError(f"HILO_RETENTION_DAYS: {days} days would delete every message at once: 1 at least")
    return days


async def run(store: Store, policy: Policy, run_id: str) -> dict[str, tuple[int, int, int]]:
    """One run: every surface's messages past its days, a batch at a time; {surface: (messages, vectors,
    episodes)} deleted (surfaces with nothing to delete left out)."""
    done: dict[str, tuple[int, int, int]] = {}
    for surface, days in policy:
        total = (0, 0, 0)
        while True:
            batch = await store.purge_messages(surface, days, BATCH)
            total = (total[0] + batch[0], total[1] + batch[1], total[2] + batch[2])
            if batch[0] < BATCH:
                break
        if total[0]:
            done[surface] = total
    (logger.info if done else logger.debug)(
        "retention.done", run=run_id, **{f"{s}_{k}": n for s, t in done.items()
                                        for k, n in zip(("messages", "vectors", "episodes"), t, strict=True)})
    return done


async def run_media(store: Store, files: MediaFiles, days: int, run_id: str) -> int:
    """One run of the media retention: the files kept longer than `days`, a batch at a time, deleted where they
    live and their rows' paths cleared; the number of files."""
    from bot.media_store import MediaStoreError

    before = store.clock() - timedelta(days=days)
    total = 0
    while True:
        batch = await store.expired_media(before, BATCH)
        if not batch:
            break
        try:
            await files.delete([path for _, path in batch])
        except MediaStoreError as exc:  # kept as they are: the next run tries again
            logger.error("media_retention.failed", run=run_id, files=len(batch), status=exc.status, error=str(exc))
            break
        total += await store.drop_media_files([media_id for media_id, _ in batch])
        if len(batch) < BATCH:
            break
    (logger.info if total else logger.debug)("media_retention.done", run=run_id, files=total, days=days)
    return total
