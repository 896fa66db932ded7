"""The admin page in a real browser: Debian's Chromium (headless, Playwright, tests/fakes/browser.py) against the
real daemon on 127.0.0.1 (uvicorn, SQLite, the fake model provider priced so that turns cost something). People are
made through real web turns; the page signs in, lists them, opens one, edits a memory, deletes one and shows the
costs. Screenshots go to artifacts/screenshots/ (HILO_SCREENSHOTS=docs refreshes docs/admin-*.png)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Dialog, Page, async_playwright, expect

from bot.config import Settings
from kernel import catalog
from tests.fakes.browser import launch
from tests.fakes.daemon import running_daemon
from tests.fakes.model_server import FakeModelServer, ok

DOCS = Path(__file__).resolve().parent.parent / os.environ.get("HILO_SCREENSHOTS", "artifacts/screenshots")
DOCS.mkdir(parents=True, exist_ok=True)
TOKEN = "browser-admin-token-0123456789abcdef"
PEOPLE = {
    "ana": ["Hi! I am planning a trip to Lisbon in May.", "/remember I am vegetarian",
            "/remember I drink green tea every morning", "Which neighbourhoods should I stay in?"],
    "bob": ["hello", "/remember my dog is called Rex", "What should I feed a puppy?"],
    "chen": ["¿Qué tiempo hace en Madrid?"],
}


def t(key: str) -> str:
    return catalog.t(key, "en")


@pytest.fixture
async def daemon(tmp_path: Path, model_server: FakeModelServer) -> AsyncIterator[httpx.AsyncClient]:
    model_server.script("m1", [], default=ok("Here is a short, helpful answer from the fake model."))
    settings = Settings.from_mapping({
        "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "HILO_SECRET_KEY": "b" * 43,
        "HILO_MODEL": "openai:m1", "OPENAI_API_KEY": "x", "OPENAI_BASE_URL": model_server.base_url + "/v1",
        "HILO_MODEL_ATTEMPTS": "1", "HILO_PRICES": '{"m1": {"in": 2.5, "out": 10}}', "HILO_RATE_LIMIT_IP": "10000",
        "HILO_ADMIN_TOKEN": TOKEN})
    async with running_daemon(settings) as client:
        for texts in PEOPLE.values():
            client.cookies.clear()
            session, conversation = None, None
            for text in texts:
                response = await client.post("/api/messages", json={
                    "text": text, **({"conversation_id": conversation} if conversation else {})},
                    headers={"authorization": f"Bearer {session}"} if session else {})
                assert response.status_code == 200, response.text
                session = session or response.json()["session"]
                conversation = response.json()["conversation_id"] or conversation
        yield client


@pytest.fixture
async def page(daemon: httpx.AsyncClient) -> AsyncIterator[Page]:
    errors: list[str] = []
    async with async_playwright() as p:
        browser = await launch(p)
        context = await browser.new_context(viewport={"width": 1280, "height": 860}, locale="en-US")
        page: Page = await context.new_page()

        async def on_dialog(dialog: Dialog) -> None:  # the delete's confirm(): yes
            await dialog.accept()

        page.on("dialog", on_dialog)
        page.on("pageerror", lambda e: errors.append(str(e)))
        yield page
        await browser.close()
    assert errors == []


def base(daemon: httpx.AsyncClient) -> str:
    return str(daemon.base_url).rstrip("/")


async def sign_in(page: Page, url: str, token: str = TOKEN) -> None:
    await page.goto(url + "/admin")
    await page.locator("#token").fill(token)
    await page.get_by_role("button", name=t("admin_sign_in")).click()


async def test_sign_in_open_a_person_edit_delete_and_see_costs(daemon: httpx.AsyncClient, page: Page) -> None:
    url = base(daemon)
    await sign_in(page, url, "not the token")
    await expect(page.locator("#sign-in-error")).to_have_text(t("admin_token_wrong"))
    await sign_in(page, url)
    rows = page.locator("#people-table tbody tr")
    await expect(rows).to_have_count(3)
    # the most recently seen first: chen wrote last
    await expect(rows.nth(0).locator("td").nth(4)).to_have_text("0")
    await expect(page.locator("#people .pager")).to_contain_text("1-3 of 3")
    await page.screenshot(path=str(DOCS / "admin-people.png"), full_page=True)

    ana = rows.filter(has_text="$").nth(2)  # ana: the first to write, last in the list
    await expect(ana.locator("td").nth(4)).to_have_text("2")  # two memories
    await ana.click()
    await expect(page.locator("#conversations li")).to_have_count(1)
    messages = page.locator("#messages .message")
    await expect(messages.first).to_have_text(PEOPLE["ana"][0])
    await expect(page.locator("#messages")).not_to_contain_text("Rex")  # bob's never shows in ana's view
    memories = page.locator("#memories li")
    await expect(memories).to_have_count(2)
    tea = memories.filter(has_text="green tea")
    await tea.get_by_role("button", name=t("admin_edit")).click()
    await page.locator("#memories textarea").fill("I drink black coffee every morning")
    await page.get_by_role("button", name=t("admin_save")).click()
    await expect(memories).to_have_count(3)  # the new wording, and the edited one kept, ended
    await expect(memories.filter(has_text="black coffee")).to_have_count(1)
    await expect(memories.filter(has_text="green tea")).to_have_class("memory ended")
    await memories.filter(has_text="vegetarian").get_by_role("button", name=t("admin_delete")).click()
    await expect(memories.filter(has_text="vegetarian")).to_have_count(0)
    pipeline = daemon.app.state.hilo["runtime"].pipeline  # type: ignore[attr-defined]
    people: Any = await pipeline.admin.people(0, 10)
    ana_id = people["people"][2]["id"]
    today = (await pipeline.admin.costs(ana_id))["today"]
    assert today["calls"] == 2 and today["cost_usd"] > 0  # her two turns, priced
    await expect(page.locator("#person .figure .big").first).to_have_text(f"${today['cost_usd']:.4f}")
    await page.screenshot(path=str(DOCS / "admin-person.png"), full_page=True)

    await page.get_by_role("button", name=t("admin_costs")).click()
    await expect(page.locator("#top-spenders tbody tr")).to_have_count(3)
    await expect(page.locator("#costs .figure").nth(2)).to_contain_text(t("admin_calls") + ": 5")  # 2 + 2 + 1 turns

    # what the page did is what the store holds: ana's context has the new wording only
    ctx = await pipeline.assemble_context(user_id=ana_id, surface="web", conversation_id=None,
                                          current_message_id=None, text="what do I drink?")
    context = "\n".join(m.content for m in ctx.messages)
    assert "black coffee" in context and "green tea" not in context and "vegetarian" not in context

    await page.get_by_role("button", name=t("admin_sign_out")).click()
    await expect(page.locator("#sign-in")).to_be_visible()
    await page.reload()
    await expect(page.locator("#sign-in")).to_be_visible()  # the cookie is gone: signed out for good


async def test_the_page_speaks_spanish(daemon: httpx.AsyncClient, page: Page) -> None:
    await page.goto(base(daemon) + "/admin?lang=es")
    await expect(page.get_by_role("button", name=catalog.t("admin_sign_in", "es"))).to_be_visible()
    await page.locator("#token").fill(TOKEN)
    await page.get_by_role("button", name=catalog.t("admin_sign_in", "es")).click()
    await expect(page.locator("#people h2")).to_have_text(catalog.t("admin_people", "es"))
    await expect(page.locator("#people-table th").nth(2)).to_have_text(catalog.t("admin_last_seen", "es"))
