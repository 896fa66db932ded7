"""Prometheus /metrics (issue 13 item 2): turns on every surface (the web API, Telegram's webhook through the real
python-telegram-bot against the fake Bot API, WhatsApp's webhook signed as Twilio signs it), then a scrape with the
token on the main port and one on the metrics port of its own; every series is there, parsed by prometheus-client's
own parser, and every label value is drawn from a bounded set (no id, handle, phone number or text). Without a token
and a port there is no /metrics at all; a wrong or missing token is refused."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot import metrics
from bot.config import Settings
from tests.fakes import telegram_api as fake_telegram
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.daemon import free_port, running_daemon
from tests.fakes.model_server import FakeModelServer, status
from tests.fakes.telegram_api import TOKEN, FakeBotApi
from tests.test_telegram import SECRET, post_update
from tests.test_whatsapp import NUMBER, PUBLIC, incoming, post
from tests.waiting import wait_until

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api
twilio_api_session = fake_twilio.twilio_api_session
twilio_api = fake_twilio.twilio_api

METRICS_TOKEN = "scrape-me-0123456789"
#: Every label a series may carry, and every value it may take: names from code and from the configured chain.
BOUNDED = {
    "surface": {"web", "telegram", "whatsapp", "cli"},
    "outcome": {"ok", "refused", "cut", "tool_calls", "empty", "failed", "error", "transient", "rate_limited",
                "server_error", "timeout", "connection", "circuit_open"},
    "provider": {"openai"},
    "model": {"model-a", "model-b"},
    "kind": {"turn", "extract", "summary"},
    "direction": {"in", "out"},
    "block": {"system", "memories", "recall", "cross_surface", "conversation", "new_message"},
    "stage": {"embed", "load"},
    "reason": {"bad_signature", "rate_limited", "too_large"},
}
SERIES = ("hilo_turns_total", "hilo_turn_seconds_count", "hilo_turn_pre_model_seconds_count",
          "hilo_model_calls_total", "hilo_fallbacks_total", "hilo_model_tokens_total", "hilo_model_cost_usd_total",
          "hilo_context_tokens_count", "hilo_retrieval_seconds_count", "hilo_outbox_backlog",
          "hilo_outbox_oldest_seconds", "hilo_delivery_failures_total", "hilo_webhook_refusals_total")


def settings_for(tmp_path: Path, model_server: FakeModelServer, bot: FakeBotApi,
                 twilio: fake_twilio.FakeTwilioApi, **env: str) -> Settings:
    return Settings.from_mapping({
        "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "HILO_SECRET_KEY": "test-secret",
        "HILO_EMBEDDER": "none", "HILO_PUBLIC_URL": PUBLIC,
        "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": model_server.base_url + "/v1",
        "HILO_MODEL": "openai:model-a", "HILO_FALLBACK_MODELS": "openai:model-b", "HILO_MODEL_ATTEMPTS": "1",
        "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_API_BASE_URL": bot.base_url, "HILO_TELEGRAM_MODE": "webhook",
        "TELEGRAM_WEBHOOK_SECRET": SECRET,
        "TWILIO_ACCOUNT_SID": twilio.account_sid, "TWILIO_AUTH_TOKEN": twilio.auth_token,
        "TWILIO_WHATSAPP_NUMBER": NUMBER, "TWILIO_API_BASE_URL": twilio.base_url,
        "HILO_PRICES": '{"model-b": {"in": 1.0, "out": 4.0}}', **env,
    })


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Each sample name's (labels, value) pairs, as prometheus-client's parser reads the exposition."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found.setdefault(s.name, []).append((dict(s.labels), s.value))
    return found


def total(found: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    return sum(v for ls, v in found.get(name, []) if all(ls.get(k) == want for k, want in labels.items()))


def assert_bounded(found: dict[str, list[tuple[dict[str, str], float]]]) -> None:
    for name, rows in found.items():
        if not name.startswith("hilo_"):
            continue
        for labels, _ in rows:
            for key, value in labels.items():
                if key == "le":  # a histogram's bucket bound
                    float(value)
                    continue
                assert key in BOUNDED, f"{name} has an unbounded label {key}={value!r}"
                assert value in BOUNDED[key], f"{name}{{{key}={value!r}}}: not one of the bounded values"


async def test_a_scrape_after_turns_on_every_surface_finds_every_series_with_bounded_labels(
    tmp_path: Path, model_server: FakeModelServer, bot_api: FakeBotApi, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    port = free_port()
    settings = settings_for(tmp_path, model_server, bot_api, twilio_api, HILO_METRICS_TOKEN=METRICS_TOKEN,
                            HILO_METRICS_PORT=str(port), HILO_RATE_LIMIT_VISITOR="2")
    model_server.script("model-a", default=status(400))  # the primary refuses: the fallback answers every turn
    async with running_daemon(settings) as client:
        # the web API: a body over the cap, two messages, then the visitor's rate limit
        too_big = await client.post("/api/messages", content=b'{"text": "' + b"x" * 70_000 + b'"}',
                                    headers={"content-type": "application/json"})
        assert too_big.status_code == 413
        r = await client.post("/api/messages", json={"text": "hello from the web"})
        assert r.status_code == 200 and r.json()["status"] == "ok", r.text
        auth = {"authorization": f"Bearer {r.json()['session']}"}
        assert (await client.post("/api/messages", json={"text": "and again"}, headers=auth)).status_code == 200
        assert (await client.post("/api/messages", json={"text": "one too many"}, headers=auth)).status_code == 429
        # Telegram's webhook: one turn, one refused secret, then a reply the person blocked
        assert await post_update(client, bot_api.text_update("hello from telegram", user_id=4242)) == 200
        await bot_api.wait_sent(1)
        assert await post_update(client, bot_api.text_update("forged"), secret="wrong") == 403
        bot_api.fail("sendMessage", 403)
        assert await post_update(client, bot_api.text_update("blocked now", user_id=4242)) == 200
        # WhatsApp's webhook, signed as Twilio signs it; and one unsigned
        assert (await post(client, "/webhooks/whatsapp", incoming("SM" + "a" * 32, "hello from whatsapp"))
                ).status_code == 200
        await twilio_api.wait_for(1)
        assert (await post(client, "/webhooks/whatsapp", incoming("SM" + "b" * 32, "x"), signature=None)
                ).status_code == 403

        async def scrape() -> dict[str, list[tuple[dict[str, str], float]]]:
            r = await client.get("/metrics", headers={"authorization": f"Bearer {METRICS_TOKEN}"})
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain"), r.text
            return samples(r.text)

        async def failure_settled() -> bool:
            # the failure is counted once its part is marked failed, but the backlog gauge is read back at most
            # every BACKLOG_CACHE_S (a scrape while the part was sending may hold 1): wait for both
            now = await scrape()
            return (total(now, "hilo_delivery_failures_total", surface="telegram") == 1
                    and total(now, "hilo_outbox_backlog") == 0)

        await wait_until(failure_settled, "the blocked Telegram reply counted as a delivery failure and settled",
                         seconds=20 + metrics.BACKLOG_CACHE_S)
        found = await scrape()
        async with httpx.AsyncClient() as other:
            own = await other.get(f"http://127.0.0.1:{port}/metrics")
    assert own.status_code == 200
    on_own_port = samples(own.text)

    for name in SERIES:
        assert name in found, f"{name} is not exposed"
        assert name in on_own_port, f"{name} is not on the metrics port"
    assert_bounded(found)
    assert_bounded(on_own_port)
    for surface in ("web", "telegram", "whatsapp"):
        assert total(found, "hilo_turns_total", surface=surface, outcome="ok") >= 1, surface
        assert total(found, "hilo_turn_seconds_count", surface=surface) >= 1, surface
        assert total(found, "hilo_turn_pre_model_seconds_count", surface=surface) >= 1, surface
    turns = total(found, "hilo_turns_total")
    assert turns == 5  # web 2, telegram 2, whatsapp 1
    assert total(found, "hilo_model_calls_total", model="model-a", outcome="error", kind="turn") == turns
    assert total(found, "hilo_model_calls_total", model="model-b", outcome="ok", kind="turn") == turns
    assert total(found, "hilo_fallbacks_total", model="model-b", kind="turn") == turns
    assert total(found, "hilo_model_tokens_total", model="model-b", direction="in") > 0
    assert total(found, "hilo_model_tokens_total", model="model-b", direction="out") > 0
    # the price table (HILO_PRICES: model-b at 1 USD in and 4 USD out per million tokens) feeds it per call
    expected = (total(found, "hilo_model_tokens_total", model="model-b", direction="in")
                + 4 * total(found, "hilo_model_tokens_total", model="model-b", direction="out")) / 1e6
    assert total(found, "hilo_model_cost_usd_total", provider="openai", model="model-b") == pytest.approx(expected)
    assert total(found, "hilo_context_tokens_count", block="new_message") == turns
    assert total(found, "hilo_context_tokens_sum", block="system") > 0
    assert total(found, "hilo_retrieval_seconds_count", stage="load") == turns
    assert total(found, "hilo_webhook_refusals_total", surface="web", reason="rate_limited") == 1
    assert total(found, "hilo_webhook_refusals_total", surface="web", reason="too_large") == 1
    assert total(found, "hilo_webhook_refusals_total", surface="telegram", reason="bad_signature") == 1
    assert total(found, "hilo_webhook_refusals_total", surface="whatsapp", reason="bad_signature") == 1
    assert total(found, "hilo_outbox_backlog") == 0
    # nothing of what people said, nor who they are, is in the exposition: as a word of its own (a sample's value or
    # a `_created` timestamp may hold 4242 among its digits, 1.796626935142424e+09: that is no one's id)
    for text in (own.text, *(f"{k}{v}" for k, v in found.items())):
        for secret in ("hello", "4242", "+34600111222", "telegram:", "whatsapp:", METRICS_TOKEN):
            word = ("(?<![\\w.])" if secret[0].isalnum() else "") + re.escape(secret) + (
                "(?![\\w.])" if secret[-1].isalnum() else "")
            assert not re.search(word, text), secret


async def test_metrics_are_off_by_default_and_the_token_is_required(
    tmp_path: Path, model_server: FakeModelServer, bot_api: FakeBotApi, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    plain = Settings(database_url=f"sqlite:///{tmp_path / 'off.db'}", secret_key="test-secret")
    assert (plain.metrics_port, plain.metrics_token) == (0, "")
    async with running_daemon(plain) as client:
        assert (await client.get("/metrics")).status_code == 404
        assert (await client.get("/metrics", headers={"authorization": "Bearer anything"})).status_code == 404
    token = plain.with_(metrics_token=METRICS_TOKEN, database_url=f"sqlite:///{tmp_path / 'on.db'}")
    async with running_daemon(token) as client:
        none = await client.get("/metrics")
        wrong = await client.get("/metrics", headers={"authorization": "Bearer not-it"})
        basic = await client.get("/metrics", headers={"authorization": f"Basic {METRICS_TOKEN}"})
        right = await client.get("/metrics", headers={"authorization": f"Bearer {METRICS_TOKEN}"})
    assert none.status_code == 401 and none.headers["www-authenticate"] == "Bearer" and none.json()["error"]
    assert wrong.status_code == 403 and wrong.json()["error"] == "forbidden"
    assert basic.status_code == 401
    assert right.status_code == 200 and "hilo_turns_total" in right.text


def test_each_app_records_into_its_own_registry_and_the_one_still_running_takes_over() -> None:
    first, second = metrics.Metrics(), metrics.Metrics()
    first.activate()
    second.activate()  # a second app in the same process (a test's two daemons): no collision
    metrics.observe_cost("openai", "model-b", 1.0)
    second.deactivate()
    metrics.observe_cost("openai", "model-b", 2.0)
    first.deactivate()
    metrics.observe_cost("openai", "model-b", 4.0)  # no app runs: nothing records it
    assert metrics.active() is None
    assert first.registry.get_sample_value("hilo_model_cost_usd_total", {"provider": "openai",
                                                                         "model": "model-b"}) == 2.0
    assert second.registry.get_sample_value("hilo_model_cost_usd_total", {"provider": "openai",
                                                                          "model": "model-b"}) == 1.0
