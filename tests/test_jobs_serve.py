"""Two real `hilo serve` processes on one Postgres run the scheduled cleanup job once per period between them.

Both run the same job registry (bot/job_list.py) with a one-second period. Each run logs `job.finished` with its
start (the store's clock when it was claimed), each refused claim `job.claim_refused` (debug); the test waits
until both processes tried the job and four more runs were logged (lines: events), stops both (SIGTERM: the
jobs drain), then checks that no two runs started within one period and that the job's row counts the runs
both logged, no more."""

from __future__ import annotations

import asyncio
import itertools
import json
from datetime import datetime, timedelta
from pathlib import Path

from tests.fakes.pgbouncer import pgbouncer_session  # noqa: F401  (autouse fixture)
from tests.fakes.postgres import SERVER, db_name, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)
from tests.fakes.serve_process import ServeProcess, serving

PERIOD = 1


def events(daemon: ServeProcess, prefix: str) -> list[dict[str, str]]:
    """The cleanup job's events of one process whose name starts with `prefix`, in the order logged."""
    found = []
    for line in list(daemon.out):
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("event", "").startswith(prefix) and record.get("job") == "cleanup":
                found.append(record)
    return found


def runs_of(*daemons: ServeProcess) -> list[dict[str, str]]:
    """The cleanup runs both processes logged, in the order they started."""
    ended = ("job.finished", "job.failed", "job.cancelled", "job.lost")
    found = [r for d in daemons for r in events(d, "job.") if r["event"] in ended]
    return sorted(found, key=lambda r: r["started_at"])


async def test_two_serve_processes_run_a_scheduled_job_once_per_period(tmp_path: Path) -> None:
    url = SERVER.create_database()
    database = db_name(url)
    env = {"HILO_DATABASE_URL": url, "HILO_SECRET_KEY": "k" * 43, "HILO_LOG_FORMAT": "json",
           "HILO_CLEANUP_SECONDS": str(PERIOD), "HILO_LOG_LEVEL": "debug"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with serving(tmp_path / "a", env) as one, serving(tmp_path / "b", env) as two:
        both_up = len(runs_of(one, two))
        refused = [len(events(d, "job.claim_refused")) for d in (one, two)]
        for _ in range(3000):  # lines of two other processes: polled
            tried = all(len(events(d, "job.claim_refused")) > n for d, n in zip((one, two), refused, strict=True))
            if len(runs_of(one, two)) >= both_up + 4 and tried:
                break
            await asyncio.sleep(0.01)
        for daemon in (one, two):
            daemon.terminate()
        assert one.wait() == two.wait() == 0
        runs = runs_of(one, two)
    assert len(runs) >= both_up + 4, f"only {len(runs)} runs logged"
    assert tried, "one of the processes never tried to claim the job while both ran"
    assert {r["event"] for r in runs} == {"job.finished"}, runs
    assert len({r["run"] for r in runs}) == len(runs)
    starts = [datetime.fromisoformat(r["started_at"]) for r in runs]
    twice = [(a, b) for a, b in itertools.pairwise(starts) if b - a < timedelta(seconds=PERIOD)]
    assert twice == [], f"two runs within one period: {twice}"
    recorded = SERVER.query(database, "SELECT runs, owner FROM jobs WHERE name = 'cleanup'")[0]
    assert (recorded[0], recorded[1]) == (len(runs), None), "the job's row and the runs logged disagree"
