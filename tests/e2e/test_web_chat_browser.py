"""The web chat in real headless Chromium (Debian's), driven by Playwright."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from tests.fakes.gateway import GatewayProcess
from tests.fakes.model_server import FakeModelServer, Scripted

pytestmark = [pytest.mark.browser, pytest.mark.any_database]
# The first reply waits for litellm's import in a fresh gateway (seconds on a busy machine).
expect.set_options(timeout=30_000)


def test_send_a_message_see_the_reply_then_reload_and_see_history(
    browser: Browser, database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """Type, see the model's reply arrive without reloading, reload, history is still there."""
    model_server.script(Scripted(text="Hello from the fake model", delay=0.3), "Second answer")
    gateway = GatewayProcess(database_url=database_url, workdir=tmp_path, **model_server.settings())
    gateway.start(command="run")
    try:
        page = browser.new_page()
        page.goto(gateway.url + "/")
        page.get_by_label("New conversation name").fill("browser test")
        page.get_by_role("button", name="Open").click()
        page.get_by_label("Message").fill("hi from chromium")
        page.keyboard.press("Enter")
        messages = page.locator("#messages li")
        expect(messages.nth(0)).to_have_text("hi from chromium")
        expect(page.locator("#messages li.assistant")).to_have_text("Hello from the fake model")
        expect(page.locator("#conversations li")).to_have_text(["browser test"])

        page.get_by_label("Message").fill("and again")
        page.get_by_role("button", name="Send").click()
        expect(page.locator("#messages li.assistant")).to_have_count(2)

        page.reload()
        expect(messages).to_have_text(
            ["hi from chromium", "Hello from the fake model", "and again", "Second answer"]
        )
        expect(page.locator("#title")).to_have_text("browser test")
        page.screenshot(path=str(tmp_path / "web-chat.png"))
    finally:
        gateway.stop()


def test_a_slow_reply_grows_on_the_page_before_it_is_finished(
    browser: Browser, database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """A reply the model writes slowly (an 8-character piece every 0.1 s, 4 s in all) shows
    on the page as it grows, well before its end, in one bubble; the stored reply then
    takes that bubble's place, whole, and a reload shows it once. The Stop button shows
    while the agent works and stops the next reply midway."""
    answer = " ".join(f"piece{i:02d}" for i in range(40))  # 319 characters: 41 chunks
    model_server.script(Scripted(text=answer, chunk_delay=0.1))
    gateway = GatewayProcess(database_url=database_url, workdir=tmp_path, **model_server.settings())
    gateway.start(command="run")
    try:
        page = browser.new_page()
        page.goto(gateway.url + "/")
        page.get_by_label("New conversation name").fill("streaming")
        page.get_by_role("button", name="Open").click()
        page.get_by_label("Message").fill("write slowly")
        page.keyboard.press("Enter")
        draft = page.locator("#messages li.draft .text")
        expect(draft).to_contain_text("piece05")
        seen = draft.text_content() or ""
        chunks_by_then = model_server.chunks_sent
        assert answer.startswith(seen)
        assert len(seen) < len(answer) // 2
        assert chunks_by_then < 25  # of 43 (role, 41 pieces, the end)
        expect(draft).to_contain_text("piece30")  # still growing, in the same bubble
        final = page.locator("#messages li.assistant:not(.draft)")
        expect(final).to_have_text(answer)
        expect(page.locator("#messages li.draft")).to_have_count(0)
        page.reload()
        expect(page.locator("#messages li")).to_have_text(["write slowly", answer])
        page.screenshot(path=str(tmp_path / "streamed.png"))
        stop = page.get_by_role("button", name="Stop")
        expect(stop).to_be_hidden()  # nothing runs

        # Stop, pressed while the reply is being written: the turn ends, saying who
        # stopped it, long before the model would have finished; the button goes away.
        model_server.script(Scripted(text=answer * 3, chunk_delay=0.1))
        page.get_by_label("Message").fill("write a lot")
        page.keyboard.press("Enter")
        expect(draft).to_contain_text("piece05")
        expect(stop).to_be_visible()
        stop.click()
        expect(page.locator("#messages li.system")).to_have_text(["Stopped by web:local."])
        expect(stop).to_be_hidden()
        expect(page.locator("#messages li.draft")).to_have_count(0)
        assert model_server.chunks_sent < 43 + 80
    finally:
        gateway.stop()


def test_an_approval_prompt_is_pressed_and_the_result_appears(
    browser: Browser, database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """The agent asks to run a command: the card shows the tool and its arguments with
    three buttons; Approve runs it and the model's answer appears; reload keeps it."""
    model_server.script(
        Scripted(
            tool_calls=[
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "run_command",
                        "arguments": '{"command": "echo approved-output"}',
                    },
                }
            ]
        ),
        "The command said approved-output.",
    )
    gateway = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        **model_server.settings(),
    )
    gateway.start(command="run")
    try:
        page = browser.new_page()
        page.goto(gateway.url + "/")
        page.get_by_label("New conversation name").fill("ops")
        page.get_by_role("button", name="Open").click()
        page.get_by_label("Message").fill("run the echo")
        page.keyboard.press("Enter")
        card = page.locator("#messages li.approval")
        expect(card.locator(".title")).to_have_text("Allow run_command?")
        expect(card.locator("pre")).to_contain_text('"command": "echo approved-output"')
        expect(card.get_by_role("button")).to_have_text(
            ["Approve", "Allow in this conversation", "Deny"]
        )
        card.get_by_role("button", name="Approve", exact=True).click()
        expect(card.locator(".decided")).to_have_text("approved by web:local")
        expect(page.locator("#messages li.assistant")).to_have_text(
            "The command said approved-output."
        )
        assert "approved-output" in model_server.requests[1]["messages"][-1]["content"]
        page.reload()
        expect(page.locator("#messages li.approval .decided")).to_have_text("approved by web:local")
        expect(page.locator("#messages li.assistant")).to_have_text(
            "The command said approved-output."
        )
    finally:
        gateway.stop()


def test_jobs_lists_schedules_with_working_pause_resume_delete_buttons(
    browser: Browser, database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """/jobs draws each schedule with its buttons: Pause stops it firing, Resume brings it
    back, Delete removes it; reload shows the state the buttons left."""
    model_server.script(
        Scripted(
            tool_calls=[
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "schedule_task",
                        "arguments": '{"prompt": "tick", "schedule": "every 2s"}',
                    },
                }
            ]
        ),
        "Scheduled it.",
    )
    gateway = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_SCHEDULE_TICK_SECONDS="0.3",
        CHATGATE_SCHEDULE_MIN_SECONDS="1",
        **model_server.settings(),
    )
    gateway.start(command="run")
    try:
        page = browser.new_page()
        page.goto(gateway.url + "/")
        page.get_by_label("New conversation name").fill("jobs")
        page.get_by_role("button", name="Open").click()
        page.get_by_label("Message").fill("say tick every 2 seconds")
        page.keyboard.press("Enter")
        expect(page.locator("#messages li.assistant").first).to_have_text("Scheduled it.")
        # The schedule fires (the fake model echoes its prompt) ...
        expect(page.locator("#messages li.assistant", has_text="echo: tick").first).to_be_visible()
        page.get_by_label("Message").fill("/jobs")
        page.keyboard.press("Enter")
        row = page.locator("#messages li.jobs .schedule").last
        expect(row.locator(".schedule-status")).to_contain_text("active")
        expect(row.get_by_role("button")).to_have_text(["Pause", "Delete"])
        row.get_by_role("button", name="Pause").click()
        expect(row.locator(".schedule-status")).to_have_text("paused")
        expect(row.get_by_role("button")).to_have_text(["Resume", "Delete"])
        # ... and, paused, fires no more.
        fired = len(model_server.requests)
        page.wait_for_timeout(3000)
        assert len(model_server.requests) == fired
        row.get_by_role("button", name="Resume").click()
        expect(row.locator(".schedule-status")).to_contain_text("active")
        model_server.wait_for_requests(fired + 1, timeout=15)  # resumed: it fires again
        row.get_by_role("button", name="Delete").click()
        expect(row.locator(".schedule-status")).to_have_text("deleted")
        expect(row.get_by_role("button")).to_have_count(0)
        page.wait_for_timeout(1000)
        after_delete = len(model_server.requests)
        page.wait_for_timeout(2500)
        assert len(model_server.requests) == after_delete
        page.reload()
        expect(page.locator("#messages li.jobs").last).to_contain_text("No schedules")
        page.screenshot(path=str(tmp_path / "jobs.png"))
    finally:
        gateway.stop()


def test_with_a_token_the_page_signs_in_and_no_url_carries_the_token(
    browser: Browser, database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """CHATGATE_WEB_TOKEN set: the page asks for the token once, signs in (an HttpOnly
    cookie the page's script cannot read), and chats; the token is in no URL it requests,
    the stream's included, and not in the page's storage."""
    token = "browser-test-token-0123456789"
    model_server.script(Scripted(text="signed in and answered", delay=0.2))
    gateway = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_WEB_TOKEN=token,
        **model_server.settings(),
    )
    gateway.start()
    try:
        page = browser.new_page()
        urls: list[str] = []
        page.on("request", lambda request: urls.append(request.url))
        page.goto(gateway.url + "/")
        expect(page.get_by_label("Web chat token")).to_be_visible()
        page.get_by_label("Web chat token").fill(token)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_label("Web chat token")).to_be_hidden()
        page.get_by_label("New conversation name").fill("with a token")
        page.get_by_role("button", name="Open").click()
        page.get_by_label("Message").fill("hello")
        page.keyboard.press("Enter")
        expect(page.locator("#messages li.assistant")).to_have_text("signed in and answered")
        assert any("/stream" in url for url in urls)
        assert all(token not in url for url in urls), urls
        assert page.evaluate("document.cookie") == ""
        stored = page.evaluate("JSON.stringify(Object.assign({}, localStorage, sessionStorage))")
        assert token not in stored
    finally:
        gateway.stop()


def test_files_attached_and_dropped_reach_the_model_and_a_sent_file_shows(
    browser: Browser, database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """Attach a CSV with the button and drop another on the page: both go up with the
    message and the model reads them; the reply that used them appears. A PNG the agent
    sends back shows as a link with the picture."""
    import base64

    from tests.fakes.files import png
    from tests.scenario.test_approvals_api import tool_call

    picture = png(6, 4)
    make = f"echo {base64.b64encode(picture).decode()} | base64 -d > dot.png"
    model_server.script(
        "North sold 4242 and the dropped file says 17.",
        tool_call("run_command", {"command": make}),
        tool_call("send_file", {"path": "dot.png"}, "c2"),
        "Here is the dot.",
    )
    (tmp_path / "chatgate.toml").write_text(
        '[[policy]]\ntool = "run_command"\ndecision = "allow"\n'
    )
    gateway = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        CHATGATE_CONFIG=str(tmp_path / "chatgate.toml"),
        CHATGATE_STREAM_REPLIES="false",
        **model_server.settings(),
    )
    gateway.start(command="run")
    try:
        page = browser.new_page()
        page.goto(gateway.url + "/")
        page.get_by_label("New conversation name").fill("figures")
        page.get_by_role("button", name="Open").click()
        page.set_input_files(
            "#attach-input",
            files=[{"name": "sales.csv", "mimeType": "text/csv",
                    "buffer": b"region,revenue\nnorth,4242\n"}],
        )  # fmt: skip
        dropped = page.evaluate_handle(
            """() => {
                const data = new DataTransfer();
                data.items.add(new File(["count\\n17\\n"], "dropped.csv", {type: "text/csv"}));
                return data;
            }"""
        )
        page.dispatch_event("main", "drop", {"dataTransfer": dropped})
        expect(page.locator("#attachments li")).to_have_count(2)
        page.get_by_label("Message").fill("what do these say?")
        page.keyboard.press("Enter")
        expect(page.locator("#messages li.assistant")).to_have_text(
            ["North sold 4242 and the dropped file says 17."]
        )
        expect(page.locator("#attachments li")).to_have_count(0)
        expect(page.locator("#messages li.user .attached")).to_have_text(
            "📎 sales.csv, dropped.csv"
        )
        users = [m for m in model_server.requests[0]["messages"] if m["role"] == "user"]
        content = str(users[-1]["content"])
        assert "what do these say?" in content
        assert "north,4242" in content
        assert "[Attached file: dropped.csv" in content

        page.get_by_label("Message").fill("draw a dot")
        page.keyboard.press("Enter")
        link = page.locator("#messages li.file a")
        expect(link).to_have_text(f"Sent dot.png ({len(picture)} bytes).")
        expect(page.locator("#messages li.file img")).to_be_visible()
        href = link.get_attribute("href")
        assert href is not None
        assert page.request.get(gateway.url + href).body() == picture
        expect(page.locator("#messages li.assistant").last).to_have_text("Here is the dot.")
        page.screenshot(path=str(tmp_path / "files.png"))
    finally:
        gateway.stop()


def test_a_reply_has_thumbs_buttons_and_a_thumbs_down_asks_what_went_wrong(
    browser: Browser, database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """Under the agent's reply, 👍 and 👎: 👎 is pressed and shown pressed, the agent asks
    what went wrong, the answer is thanked for without going to the model; after a reload
    the 👎 is still shown pressed, and pressing it again takes it off."""
    model_server.script("The answer is 41.")
    gateway = GatewayProcess(database_url=database_url, workdir=tmp_path, **model_server.settings())
    gateway.start(command="run")
    try:
        page = browser.new_page()
        page.goto(gateway.url + "/")
        page.get_by_label("New conversation name").fill("rated")
        page.get_by_role("button", name="Open").click()
        page.get_by_label("Message").fill("what is six times seven?")
        page.keyboard.press("Enter")
        reply = page.locator("#messages li.assistant")
        expect(reply).to_have_text("The answer is 41.")
        down = reply.get_by_role("button", name="Bad reply")
        expect(reply.get_by_role("button", name="Good reply")).to_have_attribute(
            "aria-pressed", "false"
        )
        down.click()
        expect(down).to_have_attribute("aria-pressed", "true")
        expect(page.locator("#messages li.system").first).to_contain_text("What went wrong?")
        page.get_by_label("Message").fill("six times seven is 42")
        page.keyboard.press("Enter")
        expect(page.locator("#messages li.system").last).to_have_text("Thanks — noted.")
        assert len(model_server.requests) == 1
        page.reload()
        down = page.locator("#messages li.assistant").get_by_role("button", name="Bad reply")
        expect(down).to_have_attribute("aria-pressed", "true")
        down.click()
        expect(down).to_have_attribute("aria-pressed", "false")
    finally:
        gateway.stop()


def test_a_question_shows_its_options_and_a_press_or_typed_answer_goes_on(
    browser: Browser, database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """``ask_user``: the card shows the question with a button per option and "Other…";
    after a restart of the gateway the button still answers it; "Other…" then a typed
    message answers the second; reload shows both answers."""

    def ask(question: str, options: list[str], call_id: str) -> Scripted:
        arguments = {"question": question, "options": options, "allow_other": True}
        return Scripted(
            tool_calls=[
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "ask_user", "arguments": json.dumps(arguments)},
                }
            ]
        )

    model_server.script(
        ask("Which environment?", ["staging", "production"], "call_1"),
        ask("When?", ["now", "tonight"], "call_2"),
        "Deploying to production after lunch.",
    )
    gateway = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        **model_server.settings(),
    )
    gateway.start(command="run")
    try:
        page = browser.new_page()
        page.goto(gateway.url + "/")
        page.get_by_label("New conversation name").fill("ops")
        page.get_by_role("button", name="Open").click()
        page.get_by_label("Message").fill("deploy it")
        page.keyboard.press("Enter")
        card = page.locator("#messages li.approval").first
        expect(card.locator(".title")).to_have_text("Which environment?")
        expect(card.get_by_role("button")).to_have_text(["staging", "production", "Other…"])
        gateway.stop()
        gateway.start(command="run")
        page.reload()
        card = page.locator("#messages li.approval").first
        card.get_by_role("button", name="production").click()
        expect(card.locator(".decided")).to_have_text("web:local answered: production")
        second = page.locator("#messages li.approval").nth(1)
        expect(second.locator(".title")).to_have_text("When?")
        second.get_by_role("button", name="Other…").click()
        expect(second.locator(".decided")).to_contain_text("type your answer")
        page.get_by_label("Message").fill("after lunch")
        page.keyboard.press("Enter")
        expect(page.locator("#messages li.assistant")).to_have_text(
            "Deploying to production after lunch."
        )
        page.reload()
        expect(page.locator("#messages li.approval .decided")).to_have_text(
            ["web:local answered: production", "web:local answered: after lunch"]
        )
        assert len(model_server.requests) == 3
    finally:
        gateway.stop()
