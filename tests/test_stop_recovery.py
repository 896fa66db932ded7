"""The other half of the SIGTERM must-show (issue 12 items 4 and 6): what the stop could not finish is answered by
the next start. The 60 people of tests/fakes/sixty_people.py send their messages, SIGTERM comes while half of
the turns wait 45 s for the model, the daemon stops within its budget leaving those 30 stored and unanswered;
then `hilo serve` starts again on the same database (the model answers at once now) and the recovery job (a
stored message with no reply, older than HILO_RECOVERY_GRACE and younger than HILO_RECOVERY_WINDOW) answers
every one of them, each exactly once, on the surface it came from: no platform redelivers anything.

It needs the outbox helper's recovery job (bot/job_list.py): it passes once that is merged."""

from __future__ import annotations

import sqlite3
from contextlib import closing

from tests.fakes import sixty_people
from tests.fakes.serve_process import serving
from tests.fakes.sixty_people import PER_SURFACE, Load, sigterm_under_load, text_of, unanswered
from tests.waiting import wait_until

bot_api_session, bot_api, twilio_api_session, twilio_api, sixty = sixty_people.FIXTURES


async def test_after_a_sigterm_with_slow_models_the_next_start_answers_every_person_once(sixty: Load) -> None:
    sixty.env.update(HILO_RECOVERY_GRACE="1", HILO_RECOVERY_WINDOW="3600")
    db = sixty.tmp_path / "hilo.db"
    telegram, twilio, models = sixty.telegram, sixty.twilio, sixty.models
    status, lines, _ = await sigterm_under_load(sixty)
    assert status == 0, lines
    waiting, _ = unanswered(db)
    slow_people = {text_of(surface, i) for surface in ("web", "telegram", "whatsapp")
                   for i in range(PER_SURFACE) if i % 2}
    assert waiting == slow_people, sorted(waiting ^ slow_people)
    told_telegram, told_whatsapp = len(telegram.sent), len(twilio.sent)

    models.reset()  # the model answers at once now
    with serving(sixty.tmp_path, sixty.env):
        await wait_until(lambda: not unanswered(db)[0], "every stored message answered by the next start")
        slow_chats = {1000 + i for i in range(PER_SURFACE) if i % 2}
        slow_numbers = {f"whatsapp:+3460000{i:04d}" for i in range(PER_SURFACE) if i % 2}
        await wait_until(lambda: {s.chat_id for s in telegram.sent[told_telegram:]} == slow_chats,
                         "every slow Telegram person told")
        await wait_until(lambda: {s.to for s in twilio.sent[told_whatsapp:]} == slow_numbers,
                         "every slow WhatsApp person told")
    # each exactly once: one reply each, one send each
    assert sorted(s.chat_id for s in telegram.sent[told_telegram:]) == sorted(slow_chats)
    assert sorted(s.to for s in twilio.sent[told_whatsapp:]) == sorted(slow_numbers)
    assert len(models.requests) == len(slow_people)
    with closing(sqlite3.connect(db)) as conn:
        replies = conn.execute("SELECT m.id, count(r.id) FROM messages m LEFT JOIN messages r ON r.reply_to = m.id "
                               "AND r.role = 'assistant' WHERE m.role = 'user' GROUP BY m.id").fetchall()
    assert len(replies) == 3 * PER_SURFACE and {n for _, n in replies} == {1}, replies
