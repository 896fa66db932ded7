"""The widget in a real browser: Debian's Chromium (headless, Playwright) against the real daemon on 127.0.0.1
(uvicorn, SQLite in a temp dir, the echo model streaming slowly enough to watch).

One daemon, one browser and two "third-party sites" for the whole module; each test gets fresh browser
contexts (a context is a visitor: its own localStorage). Screenshots go to artifacts/screenshots/ (or docs/).
"""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import Dialog, Page, async_playwright, expect
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from bot.config import Settings
from bot.models.factory import build_chain
from surfaces.web_auth import Sessions, sign_site_token
from tests.fakes.browser import SlowEcho, launch, serving
from tests.fakes.daemon import free_port, running_daemon

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Screenshots are artifacts for people to look at (CI keeps artifacts/); HILO_SCREENSHOTS=docs refreshes the
# committed copies in docs/.
DOCS = Path(__file__).resolve().parent.parent / os.environ.get("HILO_SCREENSHOTS", "artifacts/screenshots")
DOCS.mkdir(parents=True, exist_ok=True)
SITE_SECRET = "browser-site-secret"
BROWSER_SECRET = "browser-secret"
ECHO = "[echo: dry run, no model configured]"

# Installed in the page before a message is sent: counts `hilo:delta` events and records every text the
# newest reply bubble shows while it streams.
WATCH = """() => {
  const root = document.querySelector("hilo-widget").shadowRoot;
  window.__deltas = 0; window.__done = 0; window.__states = [];
  addEventListener("hilo:delta", () => window.__deltas++);
  addEventListener("hilo:done", () => window.__done++);
  new MutationObserver(() => {
    const bubbles = root.querySelectorAll(".msg.assistant .bubble");
    if (bubbles.length) window.__states.push(bubbles[bubbles.length - 1].textContent);
  }).observe(root.querySelector(".log"), {subtree: true, childList: true, characterData: true});
}"""


@dataclass
class Site:
    daemon: str
    allowed: str  # a third-party site listed in HILO_ALLOWED_ORIGINS
    disallowed: str  # one that is not


def third_party_app(daemon: str) -> Starlette:
    """A site that embeds the widget with one tag. `?user=NAME` plays a logged-in user of that site (token on
    the tag); `?provider=NAME` the same through a JS token provider; `?stream=false` turns streaming off."""

    async def page(request: Request) -> HTMLResponse:
        q = request.query_params
        head, attrs = "", ""
        if q.get("user"):
            attrs += f' data-site-token="{html.escape(sign_site_token(SITE_SECRET, q["user"]))}"'
        if q.get("provider"):
            token = json.dumps(sign_site_token(SITE_SECRET, q["provider"]))
            head = f"<script>window.siteLogin = async () => {token};</script>"
            attrs += ' data-token-provider="siteLogin"'
        if q.get("stream"):
            attrs += f' data-stream="{html.escape(q["stream"])}"'
        return HTMLResponse(
            f'<!doctype html><html lang="en"><head><title>shop</title>{head}</head><body><h1>A shop</h1>'
            f'<script src="{daemon}/widget.js" defer data-title="Shop help"{attrs}></script></body></html>'
        )

    return Starlette(routes=[Route("/", page)])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def site(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Site]:
    allowed_port = free_port()
    settings = Settings(
        database_url=f"sqlite:///{tmp_path_factory.mktemp('widget') / 'hilo.db'}",
        secret_key=BROWSER_SECRET,
        allowed_origins=(f"http://127.0.0.1:{allowed_port}",), site_secret=SITE_SECRET,
        rate_limit_ip=10_000, rate_limit_visitor=10_000,
    )
    chain = build_chain(settings, providers={"echo": SlowEcho(0.04)})
    async with running_daemon(settings, chain=chain) as client:
        daemon = str(client.base_url).rstrip("/")
        app = third_party_app(daemon)
        async with serving(app, allowed_port) as allowed, serving(app) as disallowed:
            yield Site(daemon, allowed, disallowed)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Any]:
    async with async_playwright() as p:
        b = await launch(p)
        yield b
        await b.close()


@dataclass
class Visitor:
    """One browser context (its own storage: one visitor, or one device) and what its page did."""

    context: Any
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)


class Visitors:
    """Makes a page per new visitor; closes them all at the end, failing on any uncaught page error."""

    def __init__(self, browser: Any) -> None:
        self.browser = browser
        self.made: list[Visitor] = []

    async def page(self, width: int = 1280, height: int = 800, **options: Any) -> Page:
        v = Visitor(await self.browser.new_context(viewport={"width": width, "height": height}, **options))
        self.made.append(v)
        page: Page = await v.context.new_page()

        async def on_dialog(dialog: Dialog) -> None:  # an alert() would mean markup ran: record, dismiss
            v.dialogs.append(dialog.message)
            await dialog.dismiss()

        page.on("dialog", on_dialog)
        page.on("pageerror", lambda e: v.errors.append(str(e)))
        page.on("console", lambda m: v.console.append(m.text))
        return page

    @property
    def last(self) -> Visitor:
        return self.made[-1]


@pytest_asyncio.fixture(loop_scope="module")
async def visitors(browser: Any) -> AsyncIterator[Visitors]:
    made = Visitors(browser)
    yield made
    for v in made.made:
        await v.context.close()
        assert not v.errors, v.errors


async def open_widget(page: Page, url: str) -> None:
    await page.goto(url)
    await page.locator(".launcher").click()
    await expect(page.locator(".panel")).to_be_visible()


async def say(page: Page, text: str) -> str:
    """Type `text`, press Enter, wait for the reply to finish streaming; the reply's text."""
    replies = page.locator(".msg.assistant .bubble")
    before = await replies.count()
    await page.locator("#hilo-input").fill(text)
    await page.locator("#hilo-input").press("Enter")
    await expect(replies).to_have_count(before + 1)
    await expect(page.locator(".send")).to_be_enabled(timeout=10_000)
    await expect(page.locator(".status")).to_have_text("")
    return str(await replies.last.text_content())


async def test_a_reply_streams_in_and_survives_a_reload(site: Site, visitors: Visitors) -> None:
    page = await visitors.page()
    await open_widget(page, site.daemon + "/")
    # keyboard and ARIA: focus moves into the panel, the launcher says what it controls
    await expect(page.locator("#hilo-input")).to_be_focused()
    await expect(page.locator(".launcher")).to_have_attribute("aria-expanded", "true")
    await expect(page.locator(".panel")).to_have_attribute("role", "dialog")

    await page.evaluate(WATCH)
    await page.locator("#hilo-input").fill("Hello hilo, what can you do?")
    await page.keyboard.press("Enter")
    await expect(page.locator(".status")).to_contain_text("typing")  # the typing state while it streams
    await expect(page.locator(".send")).to_be_enabled(timeout=10_000)
    await page.wait_for_function("() => window.__done === 1")
    final = str(await page.locator(".msg.assistant .bubble").last.text_content())
    assert final.startswith(ECHO) and "You said: Hello hilo, what can you do?" in final
    deltas = await page.evaluate("window.__deltas")
    partial = {s for s in await page.evaluate("window.__states") if s and s != final}
    assert deltas >= 3, deltas
    assert len(partial) >= 2 and all(final.startswith(s) for s in partial), partial

    reply2 = await say(page, "I like green tea")
    assert "You said: I like green tea" in reply2
    DOCS.mkdir(exist_ok=True)
    await page.locator("#hilo-input").fill("And what do you remember?")
    await page.screenshot(path=str(DOCS / "widget-desktop.png"))

    await page.reload()  # the panel reopens itself and the history comes back from the server
    bubbles = page.locator(".bubble")
    await expect(page.locator(".msg.user .bubble")).to_have_text(
        ["Hello hilo, what can you do?", "I like green tea"])
    await expect(page.locator(".msg.assistant .bubble")).to_have_count(2)
    assert final in await bubbles.all_text_contents()

    # Escape closes the panel and gives the focus back to the launcher
    await page.locator("#hilo-input").press("Escape")
    await expect(page.locator(".panel")).to_be_hidden()
    await expect(page.locator(".launcher")).to_be_focused()
    await expect(page.locator(".launcher")).to_have_attribute("aria-expanded", "false")


async def test_markup_in_a_message_is_shown_as_text(site: Site, visitors: Visitors) -> None:
    page = await visitors.page()
    await open_widget(page, site.daemon + "/")
    attack = "<img src=x onerror=alert(1)>"
    reply = await say(page, attack)
    await expect(page.locator(".msg.user .bubble")).to_have_text(attack)
    assert f"You said: {attack}" in reply
    images = "document.querySelector('hilo-widget').shadowRoot.querySelectorAll('img').length"
    assert await page.evaluate(images) == 0
    await page.wait_for_timeout(200)
    assert visitors.last.dialogs == []


async def test_another_visitor_sees_nothing_of_the_first_visitors_conversations(
    site: Site, visitors: Visitors,
) -> None:
    first = await visitors.page()
    await open_widget(first, site.daemon + "/")
    await say(first, "my secret word is tangerine")

    second = await visitors.page()
    await open_widget(second, site.daemon + "/")
    await expect(second.locator(".msg.notice .bubble")).to_be_visible()  # the greeting: nothing else
    await expect(second.locator(".msg.user")).to_have_count(0)
    await expect(second.locator("select option")).to_have_count(1)
    reply = await say(second, "what is my secret word tangerine?")
    assert "my secret word is tangerine" not in reply
    await expect(second.locator("select option")).to_have_count(1)  # only their own new conversation


async def test_new_conversation_and_switching_between_them(site: Site, visitors: Visitors) -> None:
    page = await visitors.page()
    await open_widget(page, site.daemon + "/")
    await say(page, "first topic: bicycles")
    await page.locator(".new").click()
    await expect(page.locator(".msg.user")).to_have_count(0)
    await expect(page.locator("#hilo-input")).to_be_focused()
    await say(page, "second topic: sourdough")
    options = page.locator("select option")
    await expect(options).to_have_count(2)
    assert [t.split(" · ")[0] for t in await options.all_text_contents()] == [
        "second topic: sourdough", "first topic: bicycles"]

    await page.locator("select").select_option(index=1)
    await expect(page.locator(".msg.user .bubble")).to_have_text(["first topic: bicycles"])
    await page.locator("select").select_option(index=0)
    await expect(page.locator(".msg.user .bubble")).to_have_text(["second topic: sourdough"])
    await page.reload()  # the conversation being viewed is the one restored
    await expect(page.locator(".msg.user .bubble")).to_have_text(["second topic: sourdough"])


async def test_a_site_user_is_the_same_person_on_two_devices(site: Site, visitors: Visitors) -> None:
    laptop = await visitors.page()
    await open_widget(laptop, site.allowed + "/?user=ana")  # a cross-origin page, allowed, with its own login
    await expect(laptop.locator(".panel h2")).to_have_text("Shop help")
    await say(laptop, "remember my order number 4411")

    phone = await visitors.page(375, 740)  # logs in through a token provider and does not stream
    await open_widget(phone, site.allowed + "/?provider=ana&stream=false")
    await expect(phone.locator(".msg.user .bubble")).to_have_text(["remember my order number 4411"])
    reply = await say(phone, "and my name is Ana")
    assert "You said: and my name is Ana" in reply
    await expect(phone.locator("select option")).to_have_count(1)  # the same conversation, continued

    stranger = await visitors.page()
    await open_widget(stranger, site.allowed + "/?user=bob")
    await expect(stranger.locator(".msg.user")).to_have_count(0)


async def test_a_page_on_a_disallowed_origin_is_refused(site: Site, visitors: Visitors) -> None:
    page = await visitors.page()
    refused: list[str] = []
    page.on("requestfailed", lambda r: refused.append(r.url) if "/api/" in r.url else None)
    await open_widget(page, site.disallowed + "/")
    await page.locator("#hilo-input").fill("hello from a page hilo does not know")
    await page.locator("#hilo-input").press("Enter")
    alert = page.locator(".error")
    await expect(alert).to_be_visible()
    await expect(alert).to_contain_text("Could not reach the chat service")
    await expect(page.locator(".retry")).to_be_visible()
    await expect(page.locator(".msg.unsent")).to_have_count(1)
    assert any(u.endswith("/api/messages/stream") for u in refused), refused
    # the browser was told no by the API's CORS preflight (403, no Access-Control-Allow-Origin)
    assert any("CORS" in line for line in visitors.last.console), visitors.last.console


async def test_mobile_width_spanish_and_dark_mode(site: Site, visitors: Visitors) -> None:
    page = await visitors.page(375, 740, color_scheme="dark")
    await page.goto(site.daemon + "/?lang=es")
    launcher = page.locator(".launcher")
    await expect(launcher).to_have_attribute("aria-label", "Abrir el chat")
    await launcher.click()
    panel = page.locator(".panel")
    box = await panel.bounding_box()
    assert box is not None and box["x"] == 0 and box["width"] == 375  # the whole screen at 375 px
    await expect(page.locator(".close")).to_have_attribute("aria-label", "Cerrar el chat")
    await expect(page.locator("#hilo-input")).to_have_attribute("placeholder", "Escribe un mensaje…")
    background = await panel.evaluate("e => getComputedStyle(e).backgroundColor")
    assert background == "rgb(28, 29, 34)", background  # prefers-color-scheme: dark
    await say(page, "Hola, ¿qué tal?")

    light = await visitors.page(375, 740, color_scheme="light")
    await open_widget(light, site.daemon + "/")
    await say(light, "Hi! Does this fit on a phone?")
    await light.screenshot(path=str(DOCS / "widget-mobile.png"))
    scroll_width = await light.evaluate("document.documentElement.scrollWidth")
    assert scroll_width <= 375
    await light.locator(".close").click()
    await expect(light.locator(".launcher")).to_be_focused()


async def test_errors_are_clear_and_the_retry_button_sends_again(site: Site, visitors: Visitors) -> None:
    page = await visitors.page()
    await open_widget(page, site.daemon + "/")
    cut = []

    async def drop_first(route: Any) -> None:  # the network fails once
        if not cut:
            cut.append(route.request.url)
            await route.abort()
        else:
            await route.continue_()

    await page.route("**/api/messages/stream", drop_first)
    await page.locator("#hilo-input").fill("are you there?")
    await page.locator("#hilo-input").press("Enter")
    await expect(page.locator(".error")).to_contain_text("Could not reach the chat service")
    await expect(page.locator(".msg.unsent .bubble")).to_have_text("are you there?")
    await page.locator(".retry").click()
    await expect(page.locator(".error")).to_be_hidden()
    await expect(page.locator(".msg.assistant .bubble")).to_contain_text("You said: are you there?")
    await expect(page.locator(".msg.user .bubble")).to_have_text(["are you there?"])  # sent once, shown once
    await expect(page.locator(".send")).to_be_enabled()

    too_long = "x" * 4097
    await page.locator("#hilo-input").fill(too_long)
    await page.locator("#hilo-input").press("Enter")
    await expect(page.locator(".error")).to_contain_text("That message is too long (4097 characters)")
    await expect(page.locator(".retry")).to_be_hidden()
    await expect(page.locator("#hilo-input")).to_have_value(too_long)  # back in the box, to be shortened
    await expect(page.locator(".msg.user")).to_have_count(1)


async def test_a_visitor_who_only_reads_gets_their_old_session_renewed(site: Site, visitors: Visitors) -> None:
    sessions = Sessions(BROWSER_SECRET)
    key = f"hilo:{site.daemon}:session"
    page = await visitors.page()
    await page.goto(site.allowed + "/")
    visitor, old = sessions.issue(now=time.time() - 25 * 86400)  # near the end of its 30 days
    await page.evaluate("([k, v]) => localStorage.setItem(k, v)", [key, old])
    await open_widget(page, site.allowed + "/")  # lists the conversations (a GET); nothing is sent
    await page.wait_for_function("([k, v]) => localStorage.getItem(k) !== v", arg=[key, old])
    renewed = await page.evaluate("(k) => localStorage.getItem(k)", key)
    checked = sessions.check(renewed)
    assert checked is not None and checked.visitor == visitor and checked.renewed is None
    await expect(page.locator(".error")).to_be_hidden()


async def test_an_old_session_is_renewed_and_an_expired_one_starts_afresh(site: Site, visitors: Visitors) -> None:
    sessions = Sessions(BROWSER_SECRET)  # the daemon's default lifetime (HILO_SESSION_MAX_AGE)
    key = f"hilo:{site.daemon}:session"
    page = await visitors.page()
    await page.goto(site.allowed + "/")
    # a visitor who last wrote 25 days ago: their token is near the end of its 30 days
    visitor, old = sessions.issue(now=time.time() - 25 * 86400)
    await page.evaluate("([k, v]) => localStorage.setItem(k, v)", [key, old])
    await open_widget(page, site.allowed + "/")
    assert "You said: still me" in await say(page, "still me")
    renewed = await page.evaluate("(k) => localStorage.getItem(k)", key)
    assert renewed != old
    checked = sessions.check(renewed)
    assert checked is not None and checked.visitor == visitor and checked.renewed is None
    # one that has expired (40 days): the API answers 401 session_expired and the widget starts a new visitor
    # without troubling the person
    _, expired = sessions.issue(now=time.time() - 40 * 86400)
    await page.evaluate("([k, v]) => localStorage.setItem(k, v)", [key, expired])
    await page.reload()
    await expect(page.locator(".panel")).to_be_visible()
    assert "You said: new start" in await say(page, "new start")
    fresh = await page.evaluate("(k) => localStorage.getItem(k)", key)
    checked = sessions.check(fresh)
    assert fresh != expired and checked is not None and checked.visitor != visitor
    await expect(page.locator(".error")).to_be_hidden()


async def test_a_message_sent_while_the_widget_loads_stays_on_screen(site: Site, visitors: Visitors) -> None:
    # The person opens the panel and writes at once, before the list of their conversations has arrived (a slow
    # network): when it arrives it must not wipe what they sent and the reply, nor forget the conversation.
    page = await visitors.page()
    await page.goto(site.allowed + "/")
    key = f"hilo:{site.daemon}:session"
    _, token = Sessions(BROWSER_SECRET).issue()  # a returning visitor (with no conversation yet): the list loads
    await page.evaluate("([k, v]) => localStorage.setItem(k, v)", [key, token])
    held: list[tuple[Any, Any]] = []
    fetched = asyncio.Event()

    async def hold(route: Any) -> None:
        # the server answers now (no conversation yet); the answer reaches the page only after the reply has
        held.append((route, await route.fetch()))
        fetched.set()

    await page.route(f"{site.daemon}/api/conversations", hold)
    await open_widget(page, site.allowed + "/")
    await expect(page.locator(".status")).to_have_text(re.compile(".+"))  # "Loading..." while the list is held
    await asyncio.wait_for(fetched.wait(), 30)
    await page.locator("#hilo-input").fill("typed right away")
    await page.locator("#hilo-input").press("Enter")
    await expect(page.locator(".msg.assistant .bubble").last).to_contain_text("You said: typed right away")
    await expect(page.locator(".send")).to_be_enabled()
    await held[0][0].fulfill(response=held[0][1])
    await expect(page.locator(".status")).to_have_text("")
    await expect(page.locator(".msg.user .bubble")).to_have_text(["typed right away"])
    await expect(page.locator(".msg.assistant .bubble").last).to_contain_text("You said: typed right away")
    await page.unroute(f"{site.daemon}/api/conversations")
    # the next message continues the same conversation, not a new one
    assert "You said: and again" in await say(page, "and again")
    listed = await page.evaluate(
        "async ([base, k]) => (await (await fetch(base + '/api/conversations', "
        "{headers: {authorization: 'Bearer ' + localStorage.getItem(k)}})).json()).conversations", [site.daemon, key])
    assert len(listed) == 1


async def test_what_i_remember_lists_the_visitors_own_memories_and_forgets_one(
    site: Site, visitors: Visitors,
) -> None:
    page = await visitors.page()
    await open_widget(page, site.allowed + "/")  # a third-party site: CORS lets it GET and DELETE
    assert "(m" in await say(page, "/remember I work at Acme")
    await say(page, "/remember my dog is Rex")
    await page.locator(".icon.memory").click()
    await expect(page.locator(".icon.memory")).to_have_attribute("aria-pressed", "true")
    await expect(page.locator(".log")).to_be_hidden()
    await expect(page.locator(".memories h3")).to_have_text("What I remember")
    items = page.locator(".memories li span")
    await expect(items).to_have_text(["my dog is Rex", "I work at Acme"])  # newest first
    await page.screenshot(path=str(DOCS / "widget-memories.png"))
    await page.get_by_role("button", name="Forget: I work at Acme").click()
    await expect(items).to_have_text(["my dog is Rex"])
    # another visitor sees none of it
    other = await visitors.page()
    await open_widget(other, site.allowed + "/")
    await other.locator(".icon.memory").click()
    await expect(other.locator(".memories .empty")).to_have_text(
        "Nothing yet. Write /remember and something about you.")
    await expect(other.locator(".memories li")).to_have_count(0)
    # typed commands work too, and writing brings the conversation back
    reply = await say(page, "/forget Rex")
    await expect(page.locator(".memories")).to_be_hidden()
    assert reply.startswith("Forgotten (m") and "my dog is Rex" in reply
    await page.locator(".icon.memory").click()
    await expect(page.locator(".memories .empty")).to_be_visible()
    await page.locator(".icon.memory").click()
    await expect(page.locator(".log")).to_be_visible()
    assert visitors.last.errors == []
