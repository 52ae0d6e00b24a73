"""The operator console in real headless Chromium (Debian's), driven by Playwright, beside
the web chat: search, a turn's timeline, an approval decided from the console and finished
in the chat, a schedule paused from the console, a pairing code let in. Each page's
screenshot is kept in ``.artifacts/console/`` for review."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from agent_core.events import InboundMessage, utcnow
from agent_core.storage.database import open_database
from agent_core.storage.store import Store
from tests.fakes.gateway import ROOT, GatewayProcess, http
from tests.fakes.http_echo import EchoServer
from tests.fakes.model_server import FakeModelServer, Scripted

pytestmark = [pytest.mark.browser, pytest.mark.any_database]
expect.set_options(timeout=30_000)
SHOTS = ROOT / ".artifacts" / "console"
TOKEN = "console-browser-token-5d1e7a"


def _shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


async def _stranger_asks(database_url: str) -> str:
    """A Telegram stranger wrote: the pairing code they were given."""
    async with open_database(database_url) as database:
        store = Store(database)
        accepted = await store.accept_inbound(
            InboundMessage(
                platform="telegram",
                workspace="bot1",
                channel="777",
                user="telegram:777",
                text="hello?",
                platform_event_id="tg-1",
            ),
            open_turn=False,
        )
        _outcome, request = await store.request_pairing(
            platform="telegram",
            user="telegram:777",
            conversation_id=accepted.conversation_id,
            code="K7QD-M2XP",
            expires_at=utcnow() + timedelta(hours=1),
            max_pending=10,
        )
        assert request is not None
        return request.code


def test_the_console_walkthrough(
    browser: Browser,
    database_url: str,
    model_server: FakeModelServer,
    tmp_path: Path,
) -> None:
    with EchoServer() as echo:
        config = tmp_path / "chatgate.toml"
        config.write_text(f'[tools.http_request]\nallowed_hosts = ["{echo.entry}"]\n')
        model_server.script(
            Scripted(
                tool_calls=[
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": "http_request",
                            "arguments": json.dumps(
                                {"method": "POST", "url": f"http://{echo.host}/deploy"}
                            ),
                        },
                    }
                ]
            ),
            "Deployed the pelican build.",
        )
        gateway = GatewayProcess(
            database_url=database_url,
            workdir=tmp_path,
            CHATGATE_CONFIG=str(config),
            CHATGATE_SCHEDULE_TICK_SECONDS="0.3",
            CHATGATE_SCHEDULE_MIN_SECONDS="1",
            # A Telegram stranger's conversation joins the database below: from then on the
            # console answers only with the token.
            CHATGATE_WEB_TOKEN=TOKEN,
            **model_server.settings(),
        )
        gateway.start(command="run")
        try:
            _walk(browser, gateway, model_server, echo, database_url)
        finally:
            gateway.stop()


def _walk(
    browser: Browser,
    gateway: GatewayProcess,
    model_server: FakeModelServer,
    echo: EchoServer,
    database_url: str,
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    chat = context.new_page()
    chat.goto(gateway.url + "/")
    chat.get_by_label("Web chat token").fill(TOKEN)
    chat.get_by_role("button", name="Sign in").click()
    expect(chat.get_by_label("Web chat token")).to_be_hidden()
    chat.get_by_label("New conversation name").fill("ops")
    chat.get_by_role("button", name="Open").click()
    chat.get_by_label("Message").fill("please deploy the pelican build")
    chat.keyboard.press("Enter")
    expect(chat.locator("#messages li.approval .title")).to_have_text("Allow http_request?")

    console = context.new_page()  # signed in: the session cookie is the context's
    console.goto(gateway.url + "/console")
    # Find the conversation by a word of it.
    console.get_by_label("Search conversations").fill("PELICAN")
    console.get_by_role("button", name="Search").click()
    found = console.locator("tr.conversation")
    expect(found).to_have_count(1)
    expect(found).to_contain_text("pelican")
    _shot(console, "conversations")
    found.click()
    console.locator("tr.turn").first.click()
    asking = console.locator(".step.approval")
    expect(asking.locator("h3")).to_contain_text("Approval for http_request")
    expect(asking).to_contain_text("pending")
    expect(asking).to_contain_text('"method": "POST"')
    _shot(console, "turn-waiting")
    turn_page = console.url

    # Approve it from the console: the turn finishes in the chat.
    console.get_by_role("link", name="Approvals").click()
    waiting = console.locator("tr.pending-approval")
    expect(waiting).to_have_count(1)
    expect(waiting).to_contain_text("http_request")
    _shot(console, "approvals")
    waiting.get_by_role("button", name="Approve", exact=True).click()
    expect(console.locator("tr.pending-approval")).to_have_count(0)
    expect(chat.locator("#messages li.assistant")).to_have_text("Deployed the pelican build.")
    expect(chat.locator("#messages li.approval .decided")).to_have_text(
        "approved by console:operator"
    )
    assert len(echo.requests) == 1
    # Rated 👎 in the chat, with what went wrong.
    chat.locator("#messages li.assistant").get_by_role("button", name="Bad reply").click()
    expect(chat.locator("#messages li.system").last).to_contain_text("What went wrong?")
    chat.get_by_label("Message").fill("it deployed the wrong pelican")
    chat.keyboard.press("Enter")
    expect(chat.locator("#messages li.system").last).to_have_text("Thanks — noted.")

    # The turn's timeline: the approval, who gave it, the reply's receipt, its rating.
    console.goto(turn_page)
    step = console.locator(".step.tool_call")
    expect(step.locator("h3")).to_contain_text("Tool call: http_request")
    expect(step).to_contain_text("approved by console:operator")
    expect(step).to_contain_text("Result")
    expect(console.locator(".receipts")).to_contain_text("Deployed the pelican build.")
    expect(console.locator(".receipts")).to_contain_text("delivered as")
    expect(console.locator("tr.feedback")).to_contain_text("it deployed the wrong pelican")
    _shot(console, "turn")
    console.get_by_role("link", name="Feedback").click()
    console.get_by_label("Rating").select_option("down")
    console.get_by_role("button", name="Filter").click()
    expect(console.locator("tr.feedback")).to_have_count(1)
    expect(console.locator("tr.feedback")).to_contain_text("web:local")
    console.get_by_label("Rating").select_option("up")
    console.get_by_role("button", name="Filter").click()
    expect(console.locator("p", has_text="No rated replies.")).to_be_visible()

    # A schedule made here fires; paused, it does not fire at its next slots.
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    _status, listed = http(
        "GET", f"{gateway.url}/api/console/conversations?q=pelican", headers=bearer
    )
    conversation_id = listed["items"][0]["id"]
    console.get_by_role("link", name="Schedules").click()
    console.get_by_label("Conversation id").fill(conversation_id)
    console.get_by_label("Prompt").fill("tick")
    console.get_by_label("Schedule").fill("every 2s")
    console.get_by_role("button", name="Create").click()
    card = console.locator(".schedule")
    expect(card).to_have_count(1)
    expect(card.locator("ol.fires li")).to_have_count(5)
    expect(chat.locator("#messages li.assistant", has_text="echo: tick").first).to_be_visible()
    console.reload()
    expect(card.locator("tr.run").first).to_contain_text("done")
    card.get_by_role("button", name="Pause").click()
    expect(card.locator("h3")).to_contain_text("paused")
    console.wait_for_timeout(1000)  # a run already handed out may still be delivered
    runs = card.locator("tr.run").count()
    fired = len(model_server.requests)
    console.wait_for_timeout(4500)  # two slots and more
    console.reload()
    expect(card.locator("h3")).to_contain_text("paused")
    assert card.locator("tr.run").count() == runs
    assert len(model_server.requests) == fired
    _shot(console, "schedules")

    # A stranger's pairing code, let in from the console.
    # Playwright's sync API holds this thread's event loop: the store's runs on another.
    with ThreadPoolExecutor(1) as pool:
        code = pool.submit(asyncio.run, _stranger_asks(database_url)).result()
    console.get_by_role("link", name="People").click()
    row = console.locator("tr.pairing")
    expect(row).to_contain_text(code)
    expect(row).to_contain_text("telegram:777")
    _shot(console, "people-pending")
    row.get_by_role("button", name="Let in").click()
    expect(console.locator("tr.pairing")).to_have_count(0)
    person = console.locator("tr.person", has_text="telegram:777")
    expect(person).to_contain_text("console:operator")
    expect(person.get_by_role("button", name="Revoke")).to_be_visible()
    _shot(console, "people")

    console.get_by_role("link", name="Usage").click()
    expect(console.locator("svg.chart")).to_have_count(4)
    expect(console.locator("table")).to_contain_text("Cost")
    _shot(console, "usage")
    console.get_by_role("link", name="Audit log").click()
    console.get_by_label("Search the audit log").fill("telegram:777")
    console.get_by_role("button", name="Search").click()
    expect(console.locator("tr.audit").first).to_contain_text("access.let_in")
    _shot(console, "audit")
    console.get_by_role("link", name="Health").click()
    expect(console.locator("main")).to_contain_text("Processes on this machine")
    expect(console.locator("main")).to_contain_text("MiB")
    _shot(console, "health")
