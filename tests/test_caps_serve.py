"""The global spend cap across two real `hilo serve` processes on one Postgres (issue 13 item 3's must-show).

m1 is priced at 1,000 USD per million output tokens (0 input): a call reserves its worst case, 4,096 output tokens
= 4.096 USD, and each answer (3,000 words) costs 3.0. Under HILO_CAP_DAILY_USD=10 at most two calls can be in
flight at once, and after two or three answers no call fits. Turns posted to both processes at once, then one
by one, never spend past the cap together; the refused turns get the catalogue's text, keep their message and
make no model call; the two processes send one cap_reached alert in all (the alert marks in the database)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx

from kernel import catalog
from tests.fakes.alert_sinks import WebhookReceiver
from tests.fakes.model_server import FakeModelServer, ok
from tests.fakes.postgres import SERVER, db_name, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)
from tests.fakes.serve_process import ServeProcess, model_env, serving
from tests.waiting import wait_until

CAP = 10.0


def alert_ends(*daemons: ServeProcess) -> int:
    """How many alerts the daemons have sent or suppressed (each refused turn's alert ends in one of the two)."""
    events = (json.loads(line).get("event") for d in daemons for line in d.lines if line.startswith("{"))
    return sum(e in ("alert.sent", "alert.suppressed") for e in events)


async def test_two_processes_never_spend_past_the_global_cap_and_alert_once(
    tmp_path: Path, model_server: FakeModelServer,
) -> None:
    url = SERVER.create_database()
    database = db_name(url)
    model_server.script("m1", [], default=ok(" ".join(["word"] * 3000)))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with WebhookReceiver() as hook:
        env = model_env(url, model_server.base_url, HILO_MODEL_ATTEMPTS="1", HILO_CAP_DAILY_USD=str(CAP),
                        HILO_PRICES='{"m1": {"in": 0, "out": 1000}}', HILO_ALERT_WEBHOOK_URL=hook.url)
        with serving(tmp_path / "a", env) as one, serving(tmp_path / "b", env) as two:
            async with httpx.AsyncClient(timeout=60) as client:
                async def turn(daemon: ServeProcess, text: str) -> dict[str, str]:
                    response = await client.post(daemon.url + "/api/messages", json={"text": text})
                    assert response.status_code == 200, response.text
                    return dict(response.json())

                # at once: six turns, three on each process
                together = await asyncio.gather(*(turn(one if i % 2 else two, f"at once {i}") for i in range(6)))
                # then one by one, alternating, until the cap refuses; then one more on each process
                one_by_one = []
                while not one_by_one or one_by_one[-1]["status"] == "ok":
                    one_by_one.append(await turn(one if len(one_by_one) % 2 else two, f"then {len(one_by_one)}"))
                after = [await turn(one, "after the cap"), await turn(two, "after the cap, there")]
            answers = [*together, *one_by_one, *after]
            refused = [a for a in answers if a["status"] != "ok"]
            await wait_until(lambda: alert_ends(one, two) == len(refused), "every refused turn's alert handled")
    cost = SERVER.query(database, "SELECT coalesce(sum(cost_usd), 0) FROM model_calls")[0][0]
    answered = [a for a in answers if a["status"] == "ok"]
    assert 1 <= len(answered) <= 3 and len(refused) >= 5
    assert cost == 3.0 * len(answered) <= CAP  # together they never spent past the cap
    assert {a["reply"] for a in refused} == {catalog.t("cap_reached_day", "en")}
    assert len(model_server.requests) == len(answered)  # a refused turn made no model call
    [(spent,)] = SERVER.query(database, "SELECT spent_usd FROM spend_counters WHERE user_id IS NULL")
    assert spent == cost  # every reservation settled to what its call cost
    outcomes = SERVER.query(database, "SELECT outcome, count(*) FROM model_calls GROUP BY outcome ORDER BY outcome")
    assert [tuple(o) for o in outcomes] == [("cap_reached", len(refused)), ("ok", len(answered))]
    kept = SERVER.query(database, "SELECT count(*) FROM messages WHERE role = 'user'")[0][0]
    assert kept == len(answers)  # every refused turn's message is stored
    assert hook.kinds() == ["cap_reached"]  # one alert from the two processes, for all the refused turns
    assert hook.alerts[0]["cap_usd"] == CAP and hook.alerts[0]["scope"] == "global_daily"
