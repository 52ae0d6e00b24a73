"""``chatgate eval``: a suite with every check kind, scored against two fake models (one
passes, one regresses and exits 1), a case made from a journaled turn, and bad suites
refused with exit 2. The real CLI, the real litellm, fake OpenAI-compatible servers."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.model_server import FakeModelServer
from tests.scenario.conftest import ClientFactory
from tests.scenario.test_replay import call, chatgate

# About suites and checks, not the storage (test_replay reads turns on both databases):
# the SQLite pass runs it (tests/conftest.py).
pytestmark = pytest.mark.any_database

SUITE = """
[suite]
name = "support"
system_prompt = "You are the shop's support agent."

[[case]]
name = "refund window"
message = "How long do I have to return a parcel?"
history = [{ role = "user", text = "hi" }, { role = "assistant", text = "Hello! How can I help?" }]
[[case.tools]]
name = "http_request"
arguments = { method = "GET", url = "https://shop.example/policy" }
result = "HTTP 200 OK\\n\\nReturns are accepted within 30 days of delivery."
[case.expect]
contains = ["30 days"]
omits = ["sorry"]
tool_called = [{ name = "http_request", arguments = "shop\\\\.example/policy" }]
tool_not_called = ["run_command"]
max_cost_usd = 0.0002
similar_to = "You have 30 days from delivery to return a parcel."
judge = "States the 30-day window and makes nothing up."

[[case]]
name = "no shell for greetings"
message = "good morning"
[case.expect]
tool_not_called = ["run_command", "http_request"]
contains = ["morning"]
"""

GOOD_POLICY_CALL = {"method": "GET", "url": "https://shop.example/policy"}


def _settings(model_server: FakeModelServer, database_url: str) -> dict[str, str]:
    return {"CHATGATE_DATABASE_URL": database_url, **model_server.settings()}


def test_a_suite_passes_against_one_model_and_a_regression_exits_1_against_another(
    tmp_path: Path, model_server: FakeModelServer, database_url: str
) -> None:
    """Every check kind passes against the good model (the baseline is stored); the other
    model calls the shell, writes a long apology and costs more: exit 1, each failed check
    named, the JSON and HTML reports written."""
    suite = tmp_path / "support.toml"
    suite.write_text(SUITE)
    settings = _settings(model_server, database_url)
    with FakeModelServer() as good, FakeModelServer() as judge:
        good.script(
            call("http_request", {"url": "https://shop.example/policy", "method": "GET"}, "g1"),
            "You have 30 days from delivery to return a parcel.",
            "Good morning! What can I do for you?",
        )
        judge.script('{"pass": true, "reason": "states 30 days"}')
        passed = chatgate(
            "eval", str(suite), "--model", "openai/gpt-4o-mini", "--api-base", good.base_url,
            "--judge-model", "openai/judge", "--judge-api-base", judge.base_url,
            "--save-baseline", cwd=tmp_path, **settings,
        )  # fmt: skip
        assert passed.returncode == 0, passed.stdout + passed.stderr
        assert "2 of 2 cases passed" in passed.stdout
        # The served result reached the model; the suite's system prompt and history too.
        first = good.requests[0]["messages"]
        assert first[0] == {"role": "system", "content": "You are the shop's support agent."}
        assert [m["content"] for m in first[1:3]] == ["hi", "Hello! How can I help?"]
        tool = [m for m in good.requests[1]["messages"] if m["role"] == "tool"]
        assert tool[0]["content"].endswith("Returns are accepted within 30 days of delivery.")
        # The judge saw the rubric and the answer.
        assert "States the 30-day window" in judge.requests[0]["messages"][-1]["content"]
        assert "You have 30 days" in judge.requests[0]["messages"][-1]["content"]
    baseline = json.loads((tmp_path / "support.baseline.json").read_text())
    assert [(c["name"], c["passed"]) for c in baseline["cases"]] == [
        ("refund window", True),
        ("no shell for greetings", True),
    ]
    kinds = {check["kind"] for case in baseline["cases"] for check in case["checks"]}
    assert kinds == {
        "contains", "omits", "tool_called", "tool_not_called", "max_cost_usd", "similar_to",
        "judge",
    }  # fmt: skip

    with FakeModelServer() as bad, FakeModelServer() as judge:
        bad.script(
            call("run_command", {"command": "cat /etc/policy"}, "b1"),
            call("http_request", {"method": "GET", "url": "https://other.example/"}, "b2"),
            "I am so sorry, I could not find it. " * 20,
            call("http_request", {"method": "GET", "url": "https://shop.example/"}, "b3"),
            "Hello.",
        )
        judge.script('{"pass": false, "reason": "no 30-day window"}')
        report = tmp_path / "report.json"
        page = tmp_path / "report.html"
        failed = chatgate(
            "eval", str(suite), "--model", "openai/gpt-4o", "--api-base", bad.base_url,
            "--judge-model", "openai/judge", "--judge-api-base", judge.base_url,
            "--json", str(report), "--html", str(page), cwd=tmp_path, **settings,
        )  # fmt: skip
        assert failed.returncode == 1, failed.stdout + failed.stderr
        # The calls the bad model made were never run: each was answered from the suite
        # or as "not available".
        served = [m["content"] for m in bad.requests[2]["messages"] if m["role"] == "tool"]
        assert all(s.startswith("not available in replay") for s in served)
    out = failed.stdout
    assert "FAIL  refund window" in out
    assert "(regression: passed in the baseline)" in out
    assert "0 of 2 cases passed (baseline: 2 of 2); 2 regressions" in out
    for line in (
        "contains 30 days: not in the reply",
        "omits sorry: in the reply",
        "tool_called http_request ~ /shop\\.example/policy/: called with",
        "tool_not_called run_command: called with",
        "max_cost_usd $0.0002: cost $",
        "similar_to at least 60% like the expected answer",
        "judge States the 30-day window and makes nothing up.: no 30-day window",
        "tool_not_called http_request: called with",
        "contains morning: not in the reply",
    ):
        assert line in out, line
    document = json.loads(report.read_text())
    assert document["regressions"] == ["refund window", "no shell for greetings"]
    assert "FAIL · refund window" in page.read_text()

    # Against its own baseline a case that failed before and still fails is no regression.
    (tmp_path / "support.baseline.json").write_text(report.read_text())
    with FakeModelServer() as bad:
        bad.script("nothing useful", "nothing useful")
        still = chatgate(
            "eval", str(suite), "--model", "openai/gpt-4o", "--api-base", bad.base_url,
            cwd=tmp_path, **settings,
        )  # fmt: skip
    assert still.returncode == 0, still.stdout
    assert "(failed in the baseline too)" in still.stdout
    assert "no judge model" in still.stdout


async def _answered(client: Any, text: str) -> int:
    body = await (
        await client.post("/api/messages", json={"conversation": "eval", "text": text})
    ).json()
    path = f"/api/conversations/{body['conversation_id']}/messages"
    deadline = time.monotonic() + 20
    while True:
        items = (await (await client.get(path)).json())["items"]
        if any(i["role"] == "assistant" for i in items):  # the conversation's only turn
            return int(body["turn_id"])
        assert time.monotonic() < deadline, items
        await asyncio.sleep(0.05)


async def test_a_journaled_turn_becomes_a_case_and_runs_from_the_suite_alone(
    make_client: ClientFactory, model_server: FakeModelServer, database_url: str, tmp_path: Path
) -> None:
    """``eval add TURN`` writes the turn whole into the suite (its message, history and
    recorded tool results, checks drawn from what it did); the suite then runs with no
    database behind it; ``turn = ID`` cases read the journal; bad suites exit 2."""
    model_server.script(
        call("remember", {"fact": "the office plant is a fern"}, "m1"),
        "Noted: the office plant is a fern.",
    )
    client = await make_client(model_server)
    turn_id = await _answered(client, "remember that the office plant is a fern")
    settings = _settings(model_server, database_url)
    suite = tmp_path / "from-turns.toml"
    added = chatgate("eval", "add", str(turn_id), "--to", str(suite), cwd=tmp_path, **settings)
    assert added.returncode == 0, added.stderr
    text = suite.read_text()
    assert f"# From turn {turn_id} (web" in text
    assert 'tool_called = ["remember"]' in text
    assert 'similar_to = "Noted: the office plant is a fern."' in text

    # Another place, no database of its own: the suite carries everything.
    elsewhere = tmp_path / "ci"
    elsewhere.mkdir()
    alone = {
        "CHATGATE_DATABASE_URL": f"sqlite+aiosqlite:///{elsewhere / 'empty.db'}",
        **model_server.settings(),
    }
    with FakeModelServer() as candidate:
        candidate.script(
            call("remember", {"fact": "the office plant is a fern"}, "x1"),
            "Noted: the office plant is a fern.",
        )
        ran = chatgate(
            "eval", str(suite), "--model", "openai/candidate", "--api-base", candidate.base_url,
            cwd=elsewhere, **alone,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "1 of 1 cases passed" in ran.stdout
        # The recorded result was served, not the tool run.
        tool = [m for m in candidate.requests[1]["messages"] if m["role"] == "tool"]
        assert len(tool) == 1
        assert tool[0]["content"] == _recorded_result(text)

    live = tmp_path / "live.yaml"
    live.write_text(
        f"suite: {{name: live}}\ncases:\n  - name: from the journal\n    turn: {turn_id}\n"
        "    expect: {contains: [fern], tool_called: [remember]}\n"
    )
    with FakeModelServer() as candidate:
        candidate.script("I have no tools today.")
        ran = chatgate(
            "eval", str(live), "--model", "openai/candidate", "--api-base", candidate.base_url,
            cwd=tmp_path, **settings,
        )  # fmt: skip
    assert ran.returncode == 1, ran.stdout
    assert "tool_called remember: not called" in ran.stdout
    assert "contains fern: not in the reply" in ran.stdout

    for body, message in (
        ("[[case]]\nname='x'\nmessage='hi'\n", "needs at least one check"),
        ("[[case]]\nmessage='hi'\n[case.expect]\nrhymes = true\n", "unknown check 'rhymes'"),
        ("[[case]]\nmessage='hi'\n[case.expect]\ntool_called=[{name='a', arguments='('}]\n",
         "bad regular expression"),
        ("[[case]]\n[case.expect]\ncontains=['a']\n", "needs a message"),
        ("[suite\n", "not valid TOML"),
        ("[suite]\nname='empty'\n", "no cases"),
    ):  # fmt: skip
        bad = tmp_path / "bad.toml"
        bad.write_text(body)
        refused = chatgate("eval", str(bad), cwd=tmp_path, **settings)
        assert refused.returncode == 2, (body, refused.stdout, refused.stderr)
        assert message in refused.stderr, (body, refused.stderr)
    missing = chatgate("eval", "add", "999999", "--to", str(suite), cwd=tmp_path, **settings)
    assert missing.returncode == 1
    assert "turn 999999 does not exist" in missing.stderr


def _recorded_result(suite_text: str) -> str:
    import tomllib

    return str(tomllib.loads(suite_text)["case"][0]["tools"][0]["result"])
