"""Issue 13 item 7: a person who used three surfaces (Telegram, WhatsApp, the web), linked into one, is exported
whole (`hilo export` holds every row `hilo inspect --json` shows, and the rows keyed to them elsewhere), then
forgotten: afterwards no table of the schema (walked from the database's catalogue: tests/schema_walk.py) holds a
row of theirs, while another person's rows stay. On the whole daemon, with the real python-telegram-bot against
the fake Bot API, the real Twilio validator against the fake Twilio API, the real web API, and the real CLI, on
every backend."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from kernel.digests import rate_subject
from tests.backends import Backend
from tests.fakes import telegram_api as fake_telegram
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.daemon import running_daemon
from tests.fakes.telegram_api import TOKEN, FakeBotApi
from tests.schema_walk import traces
from tests.test_linking_e2e import CODE, REPO
from tests.test_whatsapp import incoming, post, settings_for

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api
twilio_api_session = fake_twilio.twilio_api_session
twilio_api = fake_twilio.twilio_api

TG_USER = 987654321
PHONE = "+34699887766"
WORD = "zanzibarquux"  # said by the person on every surface, and by nobody else


def cli(tmp_path: Path, db: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HILO_DATABASE_URL": db}
    out = subprocess.run([sys.executable, "-m", "bot.cli", *argv], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out


async def three_surfaces(tmp_path: Path, bot_api: FakeBotApi, twilio: fake_twilio.FakeTwilioApi,
                         backend: Backend) -> dict[str, Any]:
    """One person on Telegram, WhatsApp and the web, linked; another web visitor beside them. Returns the
    person's web visitor id and the other's."""
    settings = settings_for(tmp_path, twilio, HILO_DATABASE_URL=backend.url, TELEGRAM_BOT_TOKEN=TOKEN,
                            TELEGRAM_API_BASE_URL=bot_api.base_url)
    async with running_daemon(settings) as web:
        # WhatsApp first: its code joins Telegram to it, then Telegram's code joins the web visitor
        assert (await post(web, "/webhooks/whatsapp", incoming("SMa1", f"{WORD} on whatsapp", PHONE))).status_code \
            == 200
        await twilio.wait_for(1)
        assert (await post(web, "/webhooks/whatsapp", incoming("SMa2", "/link", PHONE))).status_code == 200
        code = CODE.search((await twilio.wait_for(2))[1].body).group(0)  # type: ignore[union-attr]

        bot_api.enqueue(bot_api.text_update(f"my {WORD} is blue", user_id=TG_USER))
        await bot_api.wait_sent(1, chat_id=TG_USER)
        bot_api.enqueue(bot_api.text_update("/link AAAA-BBBB-CCCC", user_id=TG_USER))  # a wrong code: a failure row
        bot_api.enqueue(bot_api.text_update(f"/link {code}", user_id=TG_USER))
        bot_api.enqueue(bot_api.text_update(f"/link {code} yes", user_id=TG_USER))
        await bot_api.wait_sent(4, chat_id=TG_USER)
        await twilio.wait_for(3)  # the WhatsApp owner is told who joined
        bot_api.enqueue(bot_api.text_update("/link", user_id=TG_USER))
        code2 = CODE.search((await bot_api.wait_sent(5, chat_id=TG_USER))[4].text).group(0)  # type: ignore[union-attr]

        first = (await web.post("/api/messages", json={"text": f"hello {WORD} from the web"})).json()
        auth = {"authorization": f"Bearer {first['session']}"}
        await web.post("/api/messages", json={"text": f"/link {code2}"}, headers=auth)
        done = (await web.post("/api/messages", json={"text": f"/link {code2} yes"}, headers=auth)).json()
        assert done["status"] == "command"
        await web.post("/api/messages", json={"text": f"/remember my {WORD} lives in Lisbon"}, headers=auth)

        web.cookies.clear()
        other = (await web.post("/api/messages", json={"text": "someone else entirely"})).json()
        assert other["status"] == "ok"
    return {"session": first["session"]}


def visitor_of(backend: Backend, user_id: int) -> str:
    [(ext,)] = backend.select(f"SELECT external_user_id FROM identities WHERE user_id = {user_id} "
                              "AND surface = 'web'")
    return str(ext)


async def test_export_then_forget_a_person_of_three_surfaces(
    tmp_path: Path, bot_api: FakeBotApi, twilio_api: fake_twilio.FakeTwilioApi, backend: Backend,
) -> None:
    await three_surfaces(tmp_path, bot_api, twilio_api, backend)
    db = backend.url
    handle = f"whatsapp:{PHONE}"
    inspected = json.loads(cli(tmp_path, db, "inspect", "--user", handle, "--json").stdout)
    assert {i["surface"] for i in inspected["identities"]} == {"telegram", "whatsapp", "web"}
    user_id = inspected["user"]["id"]

    cli(tmp_path, db, "embed", "--user", handle)  # vectors for their messages and memories
    out = tmp_path / "export.json"
    cli(tmp_path, db, "export", "--user", handle, "--output", str(out))
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    exported = json.loads(out.read_text())
    for section, rows in inspected.items():  # every row `hilo inspect --json` shows, as it shows it
        assert exported[section] == rows, section
    assert sum(len(c["messages"]) for c in exported["conversations"]) >= 6
    assert exported["memories"] and exported["deliveries"] and exported["model_calls"]
    tables = exported["tables"]
    assert tables["link_codes"] and tables["episodes"]
    # the columns inspect does not show, by id: what the outbox sent, word for word
    assert {r["id"] for r in tables["deliveries"]} == {d["id"] for d in inspected["deliveries"]}
    assert any(WORD in (r["body"] or "") for r in tables["deliveries"])
    vectors = tables["message_vectors"]
    assert vectors and all(v["vector"] is True and v["dim"] > 0 and v["embedder"] for v in vectors)  # no floats
    assert {r["kind"] for r in exported["inbound"]} == {"command"}  # their /link, /remember records
    assert [r["surface"] for r in exported["link_failures"]] == ["telegram"]  # the wrong code
    assert json.loads(cli(tmp_path, db, "export", "--user", handle).stdout)["user"] == inspected["user"]

    visitor = visitor_of(backend, user_id)
    [(other_id,)] = backend.select(f"SELECT id FROM users WHERE id <> {user_id}")
    needles = [handle, str(TG_USER), PHONE[1:], visitor, WORD, rate_subject(visitor)]
    before = traces(backend, user_id, needles)
    # the walk sees the rows the person has everywhere, the ones keyed by identity too
    assert {"users", "identities", "messages", "inbound", "link_failures", "identity_audit", "deliveries",
            "link_codes", "memories", "conversations", "message_vectors", "rate_counters"} <= set(before)
    others_before = traces(backend, other_id, [visitor_of(backend, other_id)])

    said = cli(tmp_path, db, "forget", "--user", handle).stdout.splitlines()
    counts = dict(re.findall(r"(\w+) (\d+)", said[1].removeprefix("deleted: ")))
    assert said[1].startswith("deleted: ") and counts["users"] == "1" and int(counts["messages"]) >= 6
    assert {"identities", "inbound", "link_failures", "memories", "deliveries", "model_calls", "message_vectors",
            "rate_counters"} <= set(counts)

    assert traces(backend, user_id, needles) == {}
    assert traces(backend, other_id, [visitor_of(backend, other_id)]) == others_before  # the other person stays
    assert json.loads(cli(tmp_path, db, "inspect", "--user", handle, "--json").stdout) is None
