"""X-Forwarded-For counts only from HILO_TRUSTED_PROXIES: `hilo serve` as a real process on 127.0.0.1.

The per-address message limit is 1 a minute here, so a second message from the same address is a 429. A
client that forges X-Forwarded-For cannot pass for another address unless the daemon trusts the connection's
address as a proxy; behind a trusted proxy each visitor is their own address, and Twilio's signatures (checked
against HILO_PUBLIC_URL, never the request's own URL) hold.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from twilio.request_validator import RequestValidator  # type: ignore[import-untyped]

from bot.config import Settings
from kernel.errors import ConfigError
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.serve_process import serving

twilio_api_session = fake_twilio.twilio_api_session
twilio_api = fake_twilio.twilio_api

PUBLIC = "https://bot.example.com"


def limited(tmp_path: Path, **env: str) -> dict[str, str]:
    return {"HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "HILO_SECRET_KEY": "test-secret",
            "HILO_RATE_LIMIT_IP": "1", **env}


def post(base: str, forwarded_for: str) -> httpx.Response:
    return httpx.post(f"{base}/api/messages", json={"text": "hello"}, headers={"x-forwarded-for": forwarded_for},
                      timeout=20)


def test_a_forged_forwarded_for_is_ignored_when_no_proxy_is_trusted(tmp_path: Path) -> None:
    with serving(tmp_path, limited(tmp_path)) as daemon:
        base = daemon.url
        assert post(base, "203.0.113.1").status_code == 200
        second = post(base, "203.0.113.2")  # "another address": still 127.0.0.1, already over its limit
        assert second.status_code == 429, second.text
        assert second.json()["error"] == "rate_limited"


def test_a_trusted_proxy_forwards_each_visitors_address(
    tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    env = limited(tmp_path, HILO_TRUSTED_PROXIES="10.0.0.0/8, 127.0.0.1", HILO_PUBLIC_URL=PUBLIC,
                  TWILIO_ACCOUNT_SID=twilio_api.account_sid, TWILIO_AUTH_TOKEN=twilio_api.auth_token,
                  TWILIO_WHATSAPP_NUMBER="whatsapp:+14155238886", TWILIO_API_BASE_URL=twilio_api.base_url)
    with serving(tmp_path, env) as daemon:
        base = daemon.url
        assert post(base, "203.0.113.1").status_code == 200
        assert post(base, "203.0.113.2").status_code == 200  # another visitor, their own limit
        again = post(base, "203.0.113.1")
        assert again.status_code == 429, again.text  # the first visitor's limit held
        # what a proxy terminating TLS sends: the session cookie is Secure, as on the public URL
        r = httpx.post(f"{base}/api/session", timeout=20, headers={
            "x-forwarded-for": "203.0.113.3", "x-forwarded-proto": "https", "host": "bot.example.com"})
        assert r.status_code == 200 and "secure" in r.headers["set-cookie"].lower()
        # a Twilio webhook through the proxy: signed for the public URL, it still verifies
        form = {"MessageSid": "SM" + "1" * 32, "From": "whatsapp:+34600111222", "Body": "hola",
                "To": "whatsapp:+14155238886", "NumMedia": "0"}
        signature = RequestValidator(twilio_api.auth_token).compute_signature(PUBLIC + "/webhooks/whatsapp", form)
        r = httpx.post(f"{base}/webhooks/whatsapp", content=urlencode(form), timeout=20, headers={
            "content-type": "application/x-www-form-urlencoded", "x-twilio-signature": signature,
            "x-forwarded-for": "203.0.113.4", "x-forwarded-proto": "https", "host": "bot.example.com"})
        assert r.status_code == 200, r.text


def test_trusted_proxies_setting() -> None:
    assert Settings.from_mapping({}).trusted_proxies == ()
    s = Settings.from_mapping({"HILO_TRUSTED_PROXIES": " 127.0.0.1, 10.0.0.0/8,::1 ,fd00::/8"})
    assert s.trusted_proxies == ("127.0.0.1", "10.0.0.0/8", "::1", "fd00::/8")
    with pytest.raises(ConfigError, match="HILO_TRUSTED_PROXIES"):
        Settings.from_mapping({"HILO_TRUSTED_PROXIES": "localhost"})
