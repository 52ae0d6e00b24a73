"""Replay's pure parts: which calls count as the recorded ones, the judge's verdict, the
similarity, and what a baseline makes a regression."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_core.replay.evals import CaseResult, Scored, verdict
from agent_core.replay.recorded import RecordedCall, Scenario, canonical
from agent_core.replay.report import similarity
from agent_core.replay.runner import Recorded, Rerun
from agent_core.replay.suites import Case, Expect, SuiteError, load_suite


def test_equivalent_arguments_match_and_each_recorded_call_serves_once() -> None:
    calls = [
        RecordedCall(name="get", arguments={"url": "https://a", "n": 2}, result="first"),
        RecordedCall(name="get", arguments={"url": "https://a", "n": 2}, result="second"),
    ]
    recorded = Recorded(calls)
    assert recorded.take("get", {"n": 2.0, "url": " https://a "}) == 0
    assert recorded.take("get", {"url": "https://a", "n": 2}) == 1
    assert recorded.take("get", {"url": "https://a", "n": 2}) is None  # both used
    assert Recorded(calls).take("post", {"url": "https://a", "n": 2}) is None
    assert Recorded(calls).take("get", {"url": "https://a", "n": 3}) is None
    assert Recorded(calls).take("get", {"url": "https://a"}) is None
    # True is not 1, and nested values compare in order-free form.
    assert canonical({"b": [1.0, {"y": True, "x": " s"}]}) == {"b": [1, {"x": "s", "y": True}]}
    assert canonical(True) is True


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"pass": true, "reason": "ok"}', (True, "ok")),
        (
            'Sure! {"pass": false, "reason": "made up a date"} hope that helps',
            (False, "made up a date"),
        ),
        ('{"score": 5} then {"pass": true}', (True, "")),
        ("PASS", (False, "the judge gave no verdict: 'PASS'")),
        ('{"pass": "yes"}', (False, 'the judge gave no verdict: \'{"pass": "yes"}\'')),
    ],
)
def test_the_judge_verdict_is_read_strictly(text: str, expected: tuple[bool, str]) -> None:
    assert verdict(text) == expected


def test_similarity_is_one_for_the_same_text_and_low_for_another() -> None:
    assert similarity("a b c", "a b c") == 1.0
    assert similarity("deploy the build now", "deploy the build later") == 0.75
    assert similarity("yes", "no") == 0.0


def _result(name: str, passed: bool) -> CaseResult:
    case = Case(name=name, expect=Expect(contains=("x",)))
    rerun = Rerun(model="m", text="x" if passed else "y")
    from agent_core.replay.evals import CheckResult

    check = CheckResult(kind="contains", what="x", passed=passed)
    return CaseResult(case=case, scenario=Scenario(messages=("hi",)), rerun=rerun, checks=[check])


def test_only_cases_that_did_not_fail_before_are_regressions() -> None:
    results = (_result("a", False), _result("b", False), _result("c", True), _result("d", False))
    scored = Scored(results=results, baseline={"a": True, "b": False, "c": False})
    assert [r.case.name for r in scored.regressions()] == ["a", "d"]  # d is new: no baseline
    assert [r.case.name for r in scored.fixed()] == ["c"]
    assert Scored(results=results[2:3], baseline={}).regressions() == []


def test_yaml_and_toml_suites_read_alike(tmp_path: Path) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text(
        '[[case]]\nname = "a"\nmessage = "hi"\n[case.expect]\ncontains = "hello"\n'
        'tool_not_called = [{ name = "x", arguments = "y" }]\n'
    )
    yaml = tmp_path / "s.yaml"
    yaml.write_text(
        "cases:\n  - name: a\n    message: hi\n    expect:\n      contains: hello\n"
        "      tool_not_called: [{name: x, arguments: y}]\n"
    )
    assert load_suite(toml).cases == load_suite(yaml).cases
    twice = tmp_path / "twice.yaml"
    twice.write_text(
        "cases:\n  - {name: a, message: hi, expect: {contains: x}}\n"
        "  - {name: a, message: ho, expect: {contains: x}}\n"
    )
    with pytest.raises(SuiteError, match="two cases are named 'a'"):
        load_suite(twice)
    (tmp_path / "bad.yaml").write_text("cases: [\n")
    with pytest.raises(SuiteError, match="not valid YAML"):
        load_suite(tmp_path / "bad.yaml")


def test_a_turn_made_a_case_reads_back_whole_whatever_its_text(tmp_path: Path) -> None:
    """Hostile text (quotes, triple quotes, backslashes, newlines, DEL, TOML syntax) and
    arguments TOML cannot hold (null, infinity) survive ``eval add``'s round trip."""
    from datetime import UTC, datetime

    from agent_core.model import ChatMessage
    from agent_core.replay.case_file import case_toml
    from agent_core.replay.recorded import Original, RecordedTurn

    nasty = 'a "quote" """ \\ back\nline\x7fdel ]]\n[[case]]\nname = "x" 🚀\t\x01'
    lone = "half \ud800 a pair"
    calls = (
        RecordedCall(name="t1", arguments={"q": nasty, "n": [1, 2.5, True]}, result=nasty),
        RecordedCall(name="t2", arguments={"gone": None, "far": float("inf")}, result="r"),
        RecordedCall(name="t3", arguments="not json at all", result="r3", status="error"),
        RecordedCall(name="t4", arguments={"q": lone}, result=lone),
    )
    turn = RecordedTurn(
        id=5,
        conversation_id="c",
        platform="web",
        user="web:local",
        created_at=datetime(2026, 12, 1, tzinfo=UTC),
        status="done",
        scenario=Scenario(
            messages=(nasty, "second"),
            history=(ChatMessage(role="user", content=nasty),),
            summary=nasty,
        ),
        original=Original(text=nasty, calls=calls),
        ratings=("down",),
    )
    suite = tmp_path / "s.toml"
    suite.write_text("[suite]\nname = 's'\n" + case_toml(turn))
    [case] = load_suite(suite).cases
    assert case.scenario is not None
    assert case.scenario.messages == (nasty, "second")
    assert case.scenario.summary == nasty
    assert case.scenario.history == (ChatMessage(role="user", content=nasty),)
    assert [(c.name, c.result, c.status) for c in case.tools[:3]] == [
        (c.name, c.result, c.status) for c in calls[:3]
    ]
    assert case.tools[0].arguments == {"q": nasty, "n": [1, 2.5, True]}
    assert case.tools[1].arguments == {"gone": None, "far": float("inf")}
    assert case.tools[2].arguments == "not json at all"
    # A lone surrogate (no file can hold one) is written as U+FFFD.
    assert case.tools[3].arguments == {"q": "half \ufffd a pair"}
    assert case.tools[3].result == "half \ufffd a pair"
    assert case.expect.similar_to == nasty
    assert [p.name for p in case.expect.tool_called] == ["t1", "t2", "t3", "t4"]


def test_the_terminal_reports_show_control_characters_as_escapes() -> None:
    """Words from a conversation cannot move the cursor, retitle the window or fake a
    line: every control character and lone surrogate is printed escaped."""
    from agent_core.replay.evals import CheckResult, report_table
    from agent_core.replay.suites import Suite

    hostile = "\x1b[1A\x1b[2K\x1b]0;PWNED\x07PASS trust me\nPASS  fake\x85\ud800"
    result = _result(hostile, False)
    result.checks = [CheckResult(kind="contains", what=hostile, passed=False, why=hostile)]
    result.rerun.error = hostile
    suite = Suite(path=Path("s.toml"), name="s", cases=(result.case,))
    shown = report_table(suite, Scored(results=(result,), baseline={}), model="m")
    for bad in ("\x1b", "\x07", "\x85", "\ud800"):
        assert bad not in shown
    assert "\\x1b]0;PWNED\\x07PASS trust me\\nPASS  fake\\x85\\ud800" in shown
    assert all(not line.startswith("PASS") for line in shown.splitlines())
