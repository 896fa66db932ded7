"""Alerts (issue 13 item 4, bot/alerts.py) through the whole daemon: a webhook receiver (Starlette under uvicorn) and
a real SMTP server (aiosmtpd) on 127.0.0.1 get them. The fake provider makes the primary fail so the fallback
answers, then every model fail; a spend cap reached mid-run refuses the next turns with the catalogue's text and
alerts once (rate limited); a surface whose parts keep failing alerts; a webhook that fails never reaches a turn.
No alert carries a message's text."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import structlog.testing
from telegram import Bot

from bot.alerts import Alerts
from bot.config import Settings
from bot.outbox import Outbox
from bot.tasks import TaskSet
from kernel import catalog
from kernel.types import InboundMessage
from surfaces.telegram import api_urls
from surfaces.telegram_outbound import TelegramTransport
from tests.fakes import telegram_api as fake_telegram
from tests.fakes.alert_sinks import SmtpSink, WebhookReceiver
from tests.fakes.daemon import running_daemon
from tests.fakes.model_server import FakeModelServer, ok, status
from tests.waiting import wait_until

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api
SECRET_TEXT = "my bank pin is 4321"


@pytest.fixture
def hook() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as receiver:
        yield receiver


@pytest.fixture
def mail() -> Iterator[SmtpSink]:
    with SmtpSink() as sink:
        yield sink


def settings_for(tmp_path: Path, server: FakeModelServer, hook: WebhookReceiver, mail: SmtpSink | None = None,
                 **env: str) -> Settings:
    email = {"HILO_ALERT_SMTP_URL": mail.url, "HILO_ALERT_EMAIL_TO": "ops@example.test"} if mail else {}
    return Settings.from_mapping({
        "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "HILO_SECRET_KEY": "test-secret",
        "HILO_MODEL": "openai:m1", "HILO_FALLBACK_MODELS": "openai:m2", "HILO_MODEL_ATTEMPTS": "1",
        "OPENAI_API_KEY": "x", "OPENAI_BASE_URL": server.base_url + "/v1",
        "HILO_ALERT_WEBHOOK_URL": hook.url, **email, **env})


def alerts_of(client: Any) -> Alerts:
    alerts: Alerts = client.app.state.hilo["runtime"].pipeline.alerts
    return alerts


async def test_a_fallback_answer_and_a_turn_no_model_answered_alert_by_webhook_and_email(
    tmp_path: Path, model_server: FakeModelServer, hook: WebhookReceiver, mail: SmtpSink,
) -> None:
    model_server.script("m1", [status(503), status(503)])
    model_server.script("m2", [ok(), status(503)])
    async with running_daemon(settings_for(tmp_path, model_server, hook, mail)) as client:
        first = (await client.post("/api/messages", json={"text": SECRET_TEXT})).json()
        second = (await client.post("/api/messages", json={"text": SECRET_TEXT + " again"})).json()
        await wait_until(lambda: len(hook.alerts) == 2 and len(mail.messages) == 2, "both alerts by both ways")
    assert (first["status"], second["status"]) == ("ok", "failed")
    fallback, failed = hook.alerts
    assert (fallback["kind"], fallback["model"], fallback["primary"]) == ("fallback_answered", "openai:m2", "openai:m1")
    assert (failed["kind"], failed["models"], failed["calls"]) == ("all_models_failed", "openai:m1,openai:m2", 2)
    assert failed["surface"] == "web" and isinstance(failed["message_id"], int)
    assert sorted(mail.subjects()) == ["hilo alert: all_models_failed", "hilo alert: fallback_answered"]
    assert mail.envelopes[0][1] == ["ops@example.test"]
    bodies = json.dumps(hook.alerts) + "".join(str(m.get_payload()) for m in mail.messages)
    assert "bank" not in bodies and "4321" not in bodies and "test-secret" not in bodies


async def test_a_cap_reached_mid_run_refuses_the_next_turns_stores_them_and_alerts_once(
    tmp_path: Path, model_server: FakeModelServer, hook: WebhookReceiver,
) -> None:
    # m1 at 8 USD per million output tokens: a call reserves about 0.033 USD (4,096 output tokens at most);
    # the first answer (3,000 words) spends 0.024 of the cap of 0.05, so no second call fits
    settings = settings_for(tmp_path, model_server, hook, HILO_FALLBACK_MODELS="",
                            HILO_PRICES='{"m1": {"in": 2, "out": 8}}', HILO_CAP_DAILY_USD="0.05")
    model_server.script("m1", [ok(" ".join(["word"] * 3000))])
    async with running_daemon(settings) as client:
        answered = (await client.post("/api/messages", json={"text": "first question"})).json()
        refused = [(await client.post("/api/messages", json={"text": f"question {i}"},
                                      headers={"accept-language": "es"})).json() for i in range(3)]
        await wait_until(lambda: hook.alerts, "the cap's alert")
        await wait_until(lambda: not len(alerts_of(client).tasks), "every alert sent or suppressed")
    with closing(sqlite3.connect(tmp_path / "hilo.db")) as db:
        kept = [r[0] for r in db.execute("SELECT content FROM messages WHERE role = 'user' ORDER BY id")]
        calls = [{"outcome": r[0], "cost_usd": r[1]} for r in
                 db.execute("SELECT outcome, cost_usd FROM model_calls ORDER BY id")]
    assert answered["status"] == "ok"
    assert [r["reply"] for r in refused] == [catalog.t("cap_reached_day", "es")] * 3
    assert len(model_server.requests) == 1  # no model call for a refused turn
    assert hook.kinds() == ["cap_reached"]  # once, not once per refused turn
    [alert] = hook.alerts
    assert (alert["scope"], alert["cap_usd"], alert["model"]) == ("global_daily", 0.05, "openai:m1")
    assert alert["spent_usd"] == pytest.approx(calls[0]["cost_usd"]) and alert["spent_usd"] <= 0.05
    assert [c["outcome"] for c in calls] == ["ok", "cap_reached", "cap_reached", "cap_reached"]
    assert kept == ["first question", "question 0", "question 1", "question 2"]


async def test_a_failing_webhook_is_logged_and_the_turn_is_answered(
    tmp_path: Path, model_server: FakeModelServer, hook: WebhookReceiver,
) -> None:
    hook.refuse_next(1)
    model_server.script("m1", [status(503)])
    async with running_daemon(settings_for(tmp_path, model_server, hook)) as client:
        out = (await client.post("/api/messages", json={"text": "hello"})).json()
        await wait_until(lambda: hook.refused == 1, "the webhook's refusal")
        await wait_until(lambda: not len(alerts_of(client).tasks), "the alert's task ended")
    assert out["status"] == "ok" and hook.alerts == []


async def test_a_surface_whose_parts_keep_failing_alerts(
    store: Any, bot_api: fake_telegram.FakeBotApi, hook: WebhookReceiver,
) -> None:
    settings = Settings.from_mapping({"HILO_ALERT_WEBHOOK_URL": hook.url, "HILO_ALERT_DELIVERY_FAILURES": "3"})
    alerts = Alerts(settings, store)
    turn = await store.ingest(InboundMessage(surface="telegram", sender="42", external_id="1", text="hi"), 1)
    api, files = api_urls(bot_api.base_url)
    tasks = TaskSet()
    bot_api.fail("sendMessage", 403, times=3)  # blocked: each part fails at once, for good
    async with Bot(fake_telegram.TOKEN, base_url=api, base_file_url=files) as bot:
        outbox = Outbox(store, alerts=alerts, failures_alert=3)
        outbox.register(TelegramTransport(bot))
        outbox.start(tasks)
        for text in ("one", "two"):
            await outbox.enqueue("telegram", "42", text, user_id=turn.user_id)
        await wait_until(lambda: _settled(store), "two parts failed")
        assert hook.alerts == [] and not len(alerts.tasks)  # two in a row are not yet "keeps failing"
        await outbox.enqueue("telegram", "42", "three", user_id=turn.user_id)
        await wait_until(lambda: hook.alerts, "the delivery alert")
        await outbox.stop(timeout=5)
        await tasks.drain(timeout=5)
    await alerts.drain(timeout=5)
    [alert] = hook.alerts
    assert (alert["kind"], alert["surface"], alert["failures_in_a_row"]) == ("delivery_failing", "telegram", 3)


async def _settled(store: Any) -> bool:
    return await store.outbox_undelivered("telegram", "42") == 0


async def test_an_alert_that_could_carry_text_is_never_sent(store: Any, hook: WebhookReceiver) -> None:
    alerts = Alerts(Settings.from_mapping({"HILO_ALERT_WEBHOOK_URL": hook.url}), store)
    with structlog.testing.capture_logs() as logs:
        alerts.send("all_models_failed", models="openai:m1", note=SECRET_TEXT * 10)  # too long for an id
        alerts.send("all_models_failed", models="line one\nline two")
        alerts.send("something_else", calls=1)
    assert not len(alerts.tasks) and hook.alerts == []
    assert [(e["event"], e["fields"]) for e in logs] == [("alert.invalid", "note"), ("alert.invalid", "models"),
                                                         ("alert.invalid", "")]
    assert SECRET_TEXT not in repr(logs)
