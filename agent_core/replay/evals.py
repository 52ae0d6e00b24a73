"""Eval runs: each case of a suite (``agent_core.replay.suites``) run against a model, its
checks applied (a judge model for rubrics), the run scored against a stored baseline, and
reported (terminal, JSON, HTML)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from agent_core.errors import ModelError
from agent_core.model import ChatMessage, Model
from agent_core.replay.recorded import RecordedTurn, Scenario, arguments_text, plain
from agent_core.replay.report import call_html, page, similarity, transcript_html
from agent_core.replay.runner import Rerun
from agent_core.replay.suites import Case, Suite, SuiteError


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    """One check: what it asked, whether it held, and why not."""

    kind: str
    what: str
    passed: bool
    why: str = ""

    def to_json(self) -> dict[str, JsonValue]:
        """For the JSON and the baseline."""
        return {"kind": self.kind, "what": self.what, "passed": self.passed, "why": self.why}


@dataclass(slots=True, kw_only=True)
class CaseResult:
    """A case after its run."""

    case: Case
    scenario: Scenario
    rerun: Rerun
    checks: list[CheckResult] = field(default_factory=list)
    # The recorded turn a ``turn =`` case came from.
    turn: RecordedTurn | None = None

    @property
    def passed(self) -> bool:
        """Every check held (and the run reached an answer)."""
        return self.rerun.error is None and all(c.passed for c in self.checks)

    def to_json(self) -> dict[str, JsonValue]:
        """For the JSON report and the baseline."""
        return {
            "name": self.case.name,
            "passed": self.passed,
            "error": self.rerun.error,
            "text": self.rerun.text,
            "calls": [
                {"name": c.name, "arguments": c.arguments, "served": c.served}
                for c in self.rerun.calls
            ],
            "cost_usd": self.rerun.cost_usd,
            "tokens": self.rerun.prompt_tokens + self.rerun.completion_tokens,
            "seconds": round(self.rerun.seconds, 3),
            "checks": [c.to_json() for c in self.checks],
        }


Judge = Callable[[str, Scenario, str], Awaitable[tuple[bool, str]]]
"""Asked (rubric, what the model saw, its answer): whether the answer passes, and why."""


async def check(
    case: Case, scenario: Scenario, rerun: Rerun, judge: Judge | None
) -> list[CheckResult]:
    """Every check of the case against the run."""
    expect = case.expect
    text = rerun.text
    folded = text.casefold()
    results: list[CheckResult] = []
    for wanted in expect.contains:
        ok = wanted.casefold() in folded
        results.append(
            CheckResult(
                kind="contains", what=wanted, passed=ok, why="" if ok else "not in the reply"
            )
        )
    for unwanted in expect.omits:
        ok = unwanted.casefold() not in folded
        results.append(
            CheckResult(kind="omits", what=unwanted, passed=ok, why="" if ok else "in the reply")
        )
    for pattern in expect.tool_called:
        made = [c for c in rerun.calls if c.name == pattern.name]
        ok = any(pattern.matches(c.name, c.arguments) for c in made)
        why = (
            ""
            if ok
            else (
                f"called with {'; '.join(arguments_text(c.arguments) for c in made)}"
                if made
                else "not called"
            )
        )
        results.append(CheckResult(kind="tool_called", what=str(pattern), passed=ok, why=why))
    for pattern in expect.tool_not_called:
        hits = [c for c in rerun.calls if pattern.matches(c.name, c.arguments)]
        ok = not hits
        why = "" if ok else f"called with {arguments_text(hits[0].arguments)}"
        results.append(CheckResult(kind="tool_not_called", what=str(pattern), passed=ok, why=why))
    if expect.max_cost_usd is not None:
        ok = rerun.cost_usd <= expect.max_cost_usd
        results.append(
            CheckResult(
                kind="max_cost_usd",
                what=f"${expect.max_cost_usd:.4f}",
                passed=ok,
                why="" if ok else f"cost ${rerun.cost_usd:.4f}",
            )
        )
    if expect.similar_to is not None:
        score = similarity(expect.similar_to, text)
        ok = score >= expect.min_similarity
        results.append(
            CheckResult(
                kind="similar_to",
                what=f"at least {expect.min_similarity:.0%} like the expected answer",
                passed=ok,
                why=f"{score:.0%} alike",
            )
        )
    if expect.judge is not None:
        if judge is None:
            results.append(
                CheckResult(
                    kind="judge",
                    what=expect.judge,
                    passed=False,
                    why="no judge model (--judge-model or suite.judge_model)",
                )
            )
        else:
            ok, why = await judge(expect.judge, scenario, text)
            results.append(CheckResult(kind="judge", what=expect.judge, passed=ok, why=why))
    return results


JUDGE_SYSTEM = (
    "You grade one answer of an AI assistant against a rubric. Read the conversation and the "
    "answer, then reply with a JSON object and nothing else: "
    '{"pass": true or false, "reason": "one short sentence"}.'
)


def model_judge(model: Model, *, on_spend: Callable[[Any], Awaitable[None]] | None = None) -> Judge:
    """A judge backed by ``model``; an answer without a verdict fails the check."""
    from agent_core.journaled import Spend

    async def decide(rubric: str, scenario: Scenario, answer: str) -> tuple[bool, str]:
        shown = "\n".join(f"{m.role}: {m.content}" for m in scenario.history[-10:])
        asked = "\n".join(f"user: {m}" for m in scenario.messages)
        prompt = [
            ChatMessage(role="system", content=JUDGE_SYSTEM),
            ChatMessage(
                role="user",
                content=f"Rubric:\n{rubric}\n\nConversation:\n{shown}\n{asked}\n\n"
                f"Answer to grade:\n{answer}",
            ),
        ]
        try:
            reply = await model.complete(prompt, max_tokens=300)
        except ModelError as exc:
            return False, f"the judge could not be reached: {exc}"
        if on_spend is not None:
            await on_spend(
                Spend(
                    model=reply.model,
                    prompt_tokens=reply.prompt_tokens,
                    completion_tokens=reply.completion_tokens,
                    cost_usd=reply.cost_usd,
                )
            )
        return verdict(reply.text)

    return decide


def verdict(text: str) -> tuple[bool, str]:
    """The judge's ``{"pass": ..., "reason": ...}`` out of its reply."""
    start = text.find("{")
    while start != -1:
        try:
            found, _end = json.JSONDecoder().raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(found, dict) and isinstance(found.get("pass"), bool):
            return found["pass"], str(found.get("reason", ""))[:500]
        start = text.find("{", start + 1)
    return False, f"the judge gave no verdict: {text[:200]!r}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Scored:
    """A suite's run against its baseline."""

    results: tuple[CaseResult, ...]
    # Case name -> passed, from the baseline (empty without one).
    baseline: Mapping[str, bool]

    @property
    def passed(self) -> int:
        """Cases that passed."""
        return sum(1 for r in self.results if r.passed)

    def regressions(self) -> list[CaseResult]:
        """Failing cases that did not fail in the baseline (every failing case, without
        one): what makes ``chatgate eval`` exit non-zero."""
        return [r for r in self.results if not r.passed and self.baseline.get(r.case.name, True)]

    def fixed(self) -> list[CaseResult]:
        """Cases that failed in the baseline and pass now."""
        return [r for r in self.results if r.passed and self.baseline.get(r.case.name) is False]


def read_baseline(path: Path) -> dict[str, bool]:
    """Case name -> passed, from a baseline file (empty when there is none)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise SuiteError(f"baseline {path}: {exc}") from None
    cases = document.get("cases") if isinstance(document, dict) else None
    if not isinstance(cases, list):
        raise SuiteError(f"baseline {path}: no cases")
    return {
        str(c["name"]): bool(c.get("passed")) for c in cases if isinstance(c, dict) and "name" in c
    }


def report_json(suite: Suite, scored: Scored, *, model: str) -> str:
    """The run as JSON; also what ``--save-baseline`` stores."""
    return json.dumps(
        {
            "suite": suite.name,
            "model": model,
            "passed": scored.passed,
            "cases": [r.to_json() for r in scored.results],
            "regressions": [r.case.name for r in scored.regressions()],
        },
        ensure_ascii=False,
        indent=2,
    )


def report_table(suite: Suite, scored: Scored, *, model: str) -> str:
    """The terminal report."""
    lines = [f"eval {suite.name} against {model}"]
    for result in scored.results:
        before = scored.baseline.get(result.case.name)
        mark = "PASS" if result.passed else "FAIL"
        note = ""
        if before is True and not result.passed:
            note = "  (regression: passed in the baseline)"
        elif before is False and result.passed:
            note = "  (fixed: failed in the baseline)"
        elif before is False:
            note = "  (failed in the baseline too)"
        lines.append(f"{mark}  {result.case.name}  ${result.rerun.cost_usd:.4f}{note}")
        if result.rerun.error:
            lines.append(f"      no answer: {result.rerun.error}")
        for c in result.checks:
            if not c.passed:
                lines.append(f"      {c.kind} {c.what}: {c.why}")
    total = len(scored.results)
    was = sum(1 for v in scored.baseline.values() if v)
    against = f" (baseline: {was} of {len(scored.baseline)})" if scored.baseline else ""
    lines.append(
        f"{scored.passed} of {total} cases passed{against}; {len(scored.regressions())} regressions"
    )
    return "\n".join(plain(line) for line in lines)


def report_html(suite: Suite, scored: Scored, *, model: str) -> str:
    """The HTML report: the score, then each case's transcript and checks."""
    import html as html_lib

    def esc(value: object) -> str:
        return html_lib.escape(str(value))

    parts = [
        f"<h1>Eval {esc(suite.name)} against {esc(model)}</h1>",
        f'<p id="score">{scored.passed} of {len(scored.results)} cases passed; '
        f"{len(scored.regressions())} regressions.</p>",
    ]
    for result in scored.results:
        state = "pass" if result.passed else "fail"
        mark = "PASS" if result.passed else "FAIL"
        calls = [
            call_html(c.name, c.arguments, c.result, css="new" if c.served == "unavailable" else "")
            for c in result.rerun.calls
        ]
        checks = "".join(
            f'<li class="{"pass" if c.passed else "fail"}">{"✓" if c.passed else "✗"} '
            f"{esc(c.kind)} {esc(c.what)}{(': ' + esc(c.why)) if c.why else ''}</li>"
            for c in result.checks
        )
        parts.append(
            f'<section class="case {state}"><h2 class="{state}">{mark}'
            f" · {esc(result.case.name)}</h2><ul>{checks}</ul>"
            + transcript_html(
                result.scenario.messages,
                calls,
                result.rerun.text,
                title=f"{result.rerun.model} · ${result.rerun.cost_usd:.4f}",
            )
            + "</section>"
        )
    return page(f"chatgate eval: {suite.name}", "".join(parts))
