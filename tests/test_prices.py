"""The price table (bot/prices.py) and the costs area's settings (bot/config_costs.py): defaults for the models
hilo's defaults name, HILO_PRICES as JSON or a JSON / TOML file over them, an unpriced model costing 0 and logged
once, the windows a call counts in, and every malformed value a ConfigError naming its setting."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog.testing

from bot.config import ModelSpec, Settings
from bot.prices import DEFAULTS, Price, PriceTable
from bot.spend import Meter
from kernel.errors import ConfigError
from kernel.types import ModelCallRecord


def test_the_default_models_are_priced_and_echo_is_free() -> None:
    table = Settings.from_mapping({}).prices
    default_openai = Settings.from_mapping({"OPENAI_API_KEY": "k"}).model
    default_anthropic = Settings.from_mapping({"ANTHROPIC_API_KEY": "k"}).model
    assert table.cost(default_openai.provider, default_openai.model, 1_000_000, 1_000_000) == pytest.approx(0.75)
    assert table.cost(default_anthropic.provider, default_anthropic.model, 1_000_000, 0) == pytest.approx(0.8)
    assert table.cost("echo", "echo", 10**9, 10**9) == 0.0
    # a dated snapshot takes its longest listed prefix's price: gpt-4o-mini's, not gpt-4o's
    assert table.price_of("openai", "gpt-4o-mini-2024-07-18") == DEFAULTS["gpt-4o-mini"]


def test_hilo_prices_override_and_add_as_json_or_a_file(tmp_path: Path) -> None:
    inline = PriceTable.parse('{"gpt-4o-mini": {"in": 1, "out": 2}, "openai:local": {"in": 0.5, "out": 0.5}}')
    assert inline.price_of("openai", "gpt-4o-mini") == Price(1.0, 2.0)
    assert inline.price_of("openai", "local") == Price(0.5, 0.5)
    assert inline.price_of("anthropic", "claude-3-5-haiku-latest") == DEFAULTS["claude-3-5-haiku"]  # kept
    toml = tmp_path / "prices.toml"
    toml.write_text('[llama3]\nin = 0\nout = 0.1\n')
    assert Settings.from_mapping({"HILO_PRICES": str(toml)}).prices.price_of("openai", "llama3") == Price(0, 0.1)
    js = tmp_path / "prices.json"
    js.write_text('{"qwen": {"in": 0.2, "out": 0.4}}')
    assert Settings.from_mapping({"HILO_PRICES": str(js)}).prices.price_of("openai", "qwen") == Price(0.2, 0.4)


def test_cached_input_is_priced_at_its_own_price_or_the_input_price() -> None:
    table = PriceTable.parse('{"m": {"in": 2, "out": 8, "cached": 0.5}, "plain": {"in": 2, "out": 8}}')
    assert table.price_of("openai", "m") == Price(2.0, 8.0, 0.5)
    # 1M input tokens of which 400k were read from the cache, 100k out
    assert table.cost("openai", "m", 1_000_000, 100_000, 400_000) == pytest.approx(0.6 * 2 + 0.4 * 0.5 + 0.1 * 8)
    assert table.cost("openai", "plain", 1_000_000, 100_000, 400_000) == pytest.approx(2 + 0.8)
    # a provider's count of cached tokens never exceeds the input's: capped, never negative
    assert Price(2, 8, 0.5).cost(100, 0, 500) == pytest.approx(100 * 0.5 / 1e6)
    assert DEFAULTS["claude-3-5-haiku"].cached == pytest.approx(DEFAULTS["claude-3-5-haiku"].input / 10)
    record = ModelCallRecord("anthropic:claude-3-5-haiku-latest", "anthropic", 2000, 100, 5, "ok",
                             tokens_cached=1500)
    priced = Meter(PriceTable()).priced(ModelSpec("anthropic", "claude-3-5-haiku-latest"), record)
    assert priced.cost_usd == pytest.approx((500 * 0.8 + 1500 * 0.08 + 100 * 4.0) / 1e6)


@pytest.mark.parametrize("raw", [
    "{not json", '{"m": {"in": 1}}', '{"m": {"in": -1, "out": 1}}', '{"m": {"in": "1", "out": 1}}', "[]",
    '{"m": 3}', "/no/such/prices.toml", '{"m": {"in": 1, "out": 1, "cached": -1}}',
    '{"m": {"in": 1, "out": 1, "cache": 1}}',
])
def test_a_malformed_price_table_names_the_setting(raw: str) -> None:
    with pytest.raises(ConfigError, match="HILO_PRICES"):
        Settings.from_mapping({"HILO_PRICES": raw})


@pytest.mark.parametrize(("env", "name"), [
    ({"HILO_CAP_DAILY_USD": "five"}, "HILO_CAP_DAILY_USD"),
    ({"HILO_CAP_PERSON_MONTHLY_USD": "-1"}, "HILO_CAP_PERSON_MONTHLY_USD"),
    ({"HILO_ALERT_WEBHOOK_URL": "hooks.example.com"}, "HILO_ALERT_WEBHOOK_URL"),
    ({"HILO_ALERT_SMTP_URL": "mail.example.com", "HILO_ALERT_EMAIL_TO": "a@b.c"}, "HILO_ALERT_SMTP_URL"),
    ({"HILO_ALERT_SMTP_URL": "smtp://mail.example.com"}, "HILO_ALERT_EMAIL_TO"),
    ({"HILO_ALERT_MIN_INTERVAL": "soon"}, "HILO_ALERT_MIN_INTERVAL"),
])
def test_malformed_cap_and_alert_settings_name_the_setting(env: dict[str, str], name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Settings.from_mapping(env)


def test_caps_and_alerts_are_off_unless_set() -> None:
    s = Settings.from_mapping({})
    assert (s.cap_person_daily_usd, s.cap_person_monthly_usd, s.cap_daily_usd, s.cap_monthly_usd) == (0, 0, 0, 0)
    assert (s.alert_webhook_url, s.alert_smtp_url, s.alert_min_interval) == ("", "", 300.0)
    mail = Settings.from_mapping({"HILO_ALERT_SMTP_URL": "smtp://u:p@mail.example.com:587",
                                  "HILO_ALERT_EMAIL_TO": "ops@example.com, oncall@example.com"})
    assert mail.alert_email_to == ("ops@example.com", "oncall@example.com")
    assert mail.alert_email_from == "hilo@mail.example.com"


def test_an_unpriced_model_costs_nothing_and_is_logged_once() -> None:
    table = PriceTable()
    with structlog.testing.capture_logs() as logs:
        costs = [table.cost("openai", "my-finetune", 1000, 1000) for _ in range(3)]
    assert costs == [0.0, 0.0, 0.0]
    assert [(e["event"], e["model"]) for e in logs] == [("cost.unpriced", "openai:my-finetune")]


def test_a_record_is_priced_and_the_windows_follow_the_caps() -> None:
    settings = Settings.from_mapping({"HILO_CAP_PERSON_DAILY_USD": "1", "HILO_CAP_MONTHLY_USD": "20"})
    meter = Meter(settings=settings)
    spec = ModelSpec("openai", "gpt-4o-mini")
    record = meter.priced(spec, ModelCallRecord(spec.label, "openai", 2000, 500, 10, "ok"))
    assert record.cost_usd == pytest.approx((2000 * 0.15 + 500 * 0.60) / 1_000_000)
    assert [(w.scope, w.user_id, w.cap_usd) for w in meter.windows(7)] == [("day", 7, 1.0), ("month", None, 20.0)]
    assert [(w.scope, w.user_id) for w in meter.windows(None)] == [("month", None)]  # no person: global only
