"""The eval and replay HTML reports in real headless Chromium (Debian's): they render, show
every case's checks and the transcripts side by side, run no script and load nothing (a
hostile answer stays text). Screenshots are kept in ``.artifacts/replay/`` for review."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from agent_core.replay.evals import CaseResult, CheckResult, Scored, report_html
from agent_core.replay.recorded import Original, RecordedCall, RecordedTurn, Scenario
from agent_core.replay.report import compare, to_html
from agent_core.replay.runner import ReplayedCall, Rerun
from agent_core.replay.suites import Case, Expect, Suite
from tests.fakes.gateway import ROOT

pytestmark = pytest.mark.browser
SHOTS = ROOT / ".artifacts" / "replay"
HOSTILE = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'


def _scored() -> tuple[Suite, Scored]:
    scenario = Scenario(messages=("How long do I have to return a parcel?",))
    good = CaseResult(
        case=Case(name="refund window", expect=Expect(contains=("30 days",))),
        scenario=scenario,
        rerun=Rerun(
            model="openai/candidate",
            text="You have 30 days.",
            calls=[
                ReplayedCall(
                    name="http_request",
                    arguments={"url": "https://shop.example/policy"},
                    served="recorded",
                    result="Returns within 30 days.",
                    matched=0,
                )
            ],
        ),
        checks=[CheckResult(kind="contains", what="30 days", passed=True)],
    )
    bad = CaseResult(
        case=Case(name="no shell", expect=Expect(tool_not_called=())),
        scenario=Scenario(messages=(HOSTILE,)),
        rerun=Rerun(model="openai/candidate", text=HOSTILE),
        checks=[
            CheckResult(kind="omits", what="<script>", passed=False, why="in the reply"),
            CheckResult(kind="judge", what="Polite.", passed=True, why="it was"),
        ],
    )
    suite = Suite(path=Path("support.toml"), name="support", cases=(good.case, bad.case))
    return suite, Scored(results=(good, bad), baseline={"refund window": True, "no shell": True})


def test_the_eval_report_renders_its_cases_and_runs_nothing(
    browser: Browser, tmp_path: Path
) -> None:
    suite, scored = _scored()
    path = tmp_path / "eval.html"
    path.write_text(report_html(suite, scored, model="openai/candidate"), encoding="utf-8")
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(path.as_uri())
    expect(page.locator("h1")).to_have_text("Eval support against openai/candidate")
    expect(page.locator("#score")).to_have_text("1 of 2 cases passed; 1 regressions.")
    expect(page.locator("section.case")).to_have_count(2)
    expect(page.locator("section.case.pass h2")).to_have_text("PASS · refund window")
    expect(page.locator("section.case.fail li.fail")).to_have_text("✗ omits <script>: in the reply")
    expect(page.locator("section.case.pass .tool")).to_contain_text("shop.example/policy")
    # The hostile answer is shown as text: no image loaded, no script ran.
    expect(page.locator("section.case.fail .side")).to_contain_text("<script>document.title")
    assert page.title() == "chatgate eval: support"
    assert page.locator("img").count() == 0
    assert requests == [path.as_uri()]
    assert errors == []
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "eval.png"), full_page=True)
    page.close()


def test_the_replay_report_shows_the_transcripts_side_by_side(
    browser: Browser, tmp_path: Path
) -> None:
    recorded = RecordedCall(
        name="http_request", arguments={"method": "POST", "url": "https://x/deploy"},
        result="HTTP 200 OK", approval="approved by web:local",
    )  # fmt: skip
    turn = RecordedTurn(
        id=7, conversation_id="c1", platform="slack", user="slack:U1",
        created_at=datetime(2026, 12, 1, 9, tzinfo=UTC), status="done",
        scenario=Scenario(messages=("deploy it",)),
        original=Original(text="Deployed.", model="openai/old", calls=(recorded,), model_calls=2,
                          prompt_tokens=100, completion_tokens=10, seconds=1.5),
        ratings=("down",),
    )  # fmt: skip
    rerun = Rerun(
        model="openai/new", text="I deployed it, after checking.", model_calls=3,
        calls=[ReplayedCall(name="http_request", arguments={"method": "GET", "url": "https://x/"},
                            served="unavailable", result="not available in replay: ...")],
    )  # fmt: skip
    path = tmp_path / "replay.html"
    path.write_text(to_html([compare(turn, rerun)], model="openai/new", system_prompt="Be terse."))
    page = browser.new_page()
    page.goto(path.as_uri())
    expect(page.locator("h1")).to_have_text("Replay against openai/new")
    section = page.locator("#turn-7")
    expect(section.locator("h2")).to_contain_text("Turn 7 · slack · rated down")
    sides = section.locator(".side")
    expect(sides).to_have_count(2)
    expect(sides.nth(0)).to_contain_text("recorded (openai/old)")
    expect(sides.nth(0).locator(".skipped")).to_contain_text("https://x/deploy")
    expect(sides.nth(1).locator(".new")).to_contain_text("not available in replay")
    expect(section.locator(".calls")).to_have_text(
        "0 as recorded; new: http_request; skipped: http_request"
    )
    box = [sides.nth(i).bounding_box() for i in range(2)]
    assert box[0] is not None
    assert box[1] is not None
    assert box[0]["y"] == box[1]["y"]
    assert box[0]["x"] < box[1]["x"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "replay.png"), full_page=True)
    page.close()
