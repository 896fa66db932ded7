"""SIGTERM with slow models (issue 12 item 6): 60 people over the web, Telegram and WhatsApp, half of whose turns
wait 45 s for the model and half 1 s (tests/fakes/sixty_people.py). The daemon stops taking work and ends within
its ONE stop budget (HILO_STOP_TIMEOUT, bot/shutdown.py), well before a supervisor would kill it; every turn that
could finish in it was answered; web requests still waiting at the bound got a clean 503 with Retry-After (or the
stream's error event), never a 500; the slow ones are stored and unanswered in the database after the exit, for
the recovery job (tests/test_stop_recovery.py: answered by the next start)."""

from __future__ import annotations

import json

import httpx

from kernel import catalog
from tests.fakes import sixty_people
from tests.fakes.sixty_people import PER_SURFACE, Load, sigterm_under_load, sse_events, text_of, unanswered

bot_api_session, bot_api, twilio_api_session, twilio_api, sixty = sixty_people.FIXTURES


async def test_sigterm_with_slow_models_stops_within_the_budget_answers_what_can_finish_and_keeps_the_rest(
    sixty: Load,
) -> None:
    status, lines, outcomes = await sigterm_under_load(sixty)
    assert status == 0, lines
    names = [json.loads(line)["event"] for line in lines if line.startswith("{")]
    assert "daemon.stopped" in names, names

    # the web: every request answered cleanly, never a 500 or a cut stream
    cut = [i for i, r in enumerate(outcomes) if isinstance(r, BaseException)]
    statuses = [getattr(r, "status_code", None) for r in outcomes]
    assert not cut, f"web requests {cut} got no complete answer; statuses {statuses}"
    answers = [r for r in outcomes if isinstance(r, httpx.Response)]
    for i, r in enumerate(answers):
        slow_one = i % 2 == 1
        if i < PER_SURFACE // 2:  # plain POST: the reply, or 503 + Retry-After at the bound
            if slow_one:
                assert r.status_code == 503, (i, r.status_code, r.text)
                assert r.headers["retry-after"].isdigit()
                assert r.json()["message"] == catalog.t("restarting_kept", "en")
            else:
                assert r.status_code == 200 and r.json()["status"] == "ok", (i, r.status_code, r.text)
        else:  # streamed: done, or an error event at the bound
            assert r.status_code == 200, (i, r.status_code, r.text)
            kind, data = sse_events(r.text)[-1]
            if slow_one:
                assert (kind, data["status"], data["error"]) == ("error", 503, "restarting_kept"), (i, r.text)
            else:
                assert kind == "done" and data["status"] == "ok", (i, r.text)
    # Telegram and WhatsApp: each quick person got the reply, no slow one did
    telegram_told = {s.chat_id for s in sixty.telegram.sent}
    assert telegram_told == {1000 + i for i in range(PER_SURFACE) if i % 2 == 0}, sorted(telegram_told)
    whatsapp_told = {s.to for s in sixty.twilio.sent}
    assert whatsapp_told == {f"whatsapp:+3460000{i:04d}" for i in range(PER_SURFACE) if i % 2 == 0}, whatsapp_told
    # the database: every quick message answered; every slow one stored and unanswered (for the recovery job)
    waiting, answered = unanswered(sixty.tmp_path / "hilo.db")
    everyone = {text_of(surface, i) for surface in ("web", "telegram", "whatsapp") for i in range(PER_SURFACE)}
    assert waiting == {t for t in everyone if t.startswith("slow")}, sorted(everyone - waiting - answered)
    assert answered == {t for t in everyone if t.startswith("quick")}
    assert not [line for line in lines if "question" in line], "a log line quotes a message"
