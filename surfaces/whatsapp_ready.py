"""WhatsApp's readiness (/readyz, bot/readiness.py): whether Twilio accepts TWILIO_ACCOUNT_SID and
TWILIO_AUTH_TOKEN, asked once at start by fetching the account (GET /2010-04-01/Accounts/{sid}.json, the twilio
SDK's `accounts(sid).fetch_async`) and kept: a refusal (401/403/404) or an account that is not active stays
not ready until the credentials are changed and hilo restarted. Only when Twilio gave no verdict (no answer, a 5xx,
a 429) is it asked again, at most every RECHECK_S, when /readyz is polled. Never the token in what it says."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
from twilio.base.exceptions import TwilioRestException, TwilioServiceException

from kernel import log
from surfaces.whatsapp_send import TwilioSender

logger = log.get("hilo.whatsapp")

TIMEOUT_S = 5.0
RECHECK_S = 30.0


class AccountCheck:
    def __init__(self, sender: TwilioSender) -> None:
        self.sender = sender
        self._state: dict[str, Any] = {"ok": False, "error": "not checked yet"}
        self._final = False
        self._at = 0.0

    async def check(self) -> dict[str, Any]:
        """Fetch the account now; what /readyz says until the next check."""
        client = self.sender.client
        if client is None:
            return {"ok": False, "error": "not started"}
        self._at = time.monotonic()
        try:
            account = await asyncio.wait_for(
                client.api.v2010.accounts(self.sender.settings.twilio_account_sid).fetch_async(), TIMEOUT_S)
        except (TwilioRestException, TwilioServiceException) as exc:
            self._final = exc.status in (401, 403, 404)
            what = "refused the credentials" if self._final else "did not answer"
            self._state = {"ok": False, "error": f"Twilio {what} (HTTP {exc.status})"}
        except (aiohttp.ClientError, TimeoutError) as exc:
            self._final = False
            self._state = {"ok": False, "error": f"Twilio did not answer ({type(exc).__name__})"}
        else:
            self._final = True
            active = account.status == "active"
            self._state = {"ok": active, "account": account.status}
            if not active:
                self._state["error"] = f"the Twilio account is {account.status}"
        if not self._state["ok"]:
            logger.error("whatsapp.credentials_not_ready", error=self._state["error"])
        return self._state

    async def ready(self) -> dict[str, Any]:
        if not self._final and time.monotonic() - self._at >= RECHECK_S:
            return await self.check()
        return self._state
