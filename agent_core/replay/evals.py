"""Eval suites: cases (hand-written, or taken from journaled turns) run against a model, each
with checks on its answer; scored, compared with a stored baseline, and reported.

A suite is a TOML or YAML file::

    [suite]
    name = "support"
    system_prompt = "You are ..."      # optional: the settings' otherwise
    judge_model = "openai/gpt-4o-mini" # optional: for the judge checks

    [[case]]
    name = "refund window"
    message = "How long do I have to return a parcel?"
    history = [{ role = "user", text = "hi" }, { role = "assistant", text = "Hello!" }]
    [[case.tools]]                     # results served when the model makes these calls
    name = "http_request"
    arguments = { method = "GET", url = "https://shop.example/policy" }
    result = "Returns are accepted within 30 days."
    [case.expect]
    contains = ["30 days"]
    omits = ["sorry"]
    tool_called = [{ name = "http_request", arguments = "shop\\.example" }]
    tool_not_called = ["run_command"]
    max_cost_usd = 0.01
    similar_to = "You have 30 days."   # with min_similarity (default 0.6)
    judge = "Answers with the 30-day window and nothing made up."

A case may instead name a journaled turn (``turn = 123``): its context and recorded tool
results come from the database, as in a replay.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from agent_core.errors import ModelError
from agent_core.model import ChatMessage, Model
from agent_core.replay.recorded import (
    RecordedCall,
    RecordedTurn,
    Scenario,
    arguments_text,
    history_of,
    plain,
    well_formed,
)
from agent_core.replay.report import call_html, page, similarity, transcript_html
from agent_core.replay.runner import Rerun

CHECK_KINDS = (
    "contains",
    "omits",
    "tool_called",
    "tool_not_called",
    "max_cost_usd",
    "similar_to",
    "judge",
)


class SuiteError(Exception):
    """The suite file cannot be used: what is wrong, and where."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolPattern:
    """A tool, and optionally a regular expression its arguments (as compact JSON, keys in
    order) must match."""

    name: str
    arguments: str | None = None

    def matches(self, name: str, arguments: JsonValue) -> bool:
        """Whether a call fits the pattern."""
        if name != self.name:
            return False
        return (
            self.arguments is None
            or re.search(self.arguments, arguments_text(arguments)) is not None
        )

    def __str__(self) -> str:
        return self.name if self.arguments is None else f"{self.name} ~ /{self.arguments}/"


@dataclass(frozen=True, slots=True, kw_only=True)
class Expect:
    """A case's checks."""

    contains: tuple[str, ...] = ()
    omits: tuple[str, ...] = ()
    tool_called: tuple[ToolPattern, ...] = ()
    tool_not_called: tuple[ToolPattern, ...] = ()
    max_cost_usd: float | None = None
    similar_to: str | None = None
    min_similarity: float = 0.6
    judge: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One case: what the model sees, the tool results it may be served, the checks."""

    name: str
    expect: Expect
    scenario: Scenario | None = None
    tools: tuple[RecordedCall, ...] = ()
    # A journaled turn to take the scenario and tool results from, at run time.
    turn: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Suite:
    """A suite file, read."""

    path: Path
    name: str
    cases: tuple[Case, ...]
    system_prompt: str | None = None
    judge_model: str | None = None


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise SuiteError(f"{where}: expected text or a list of texts")


def _patterns(value: Any, where: str) -> tuple[ToolPattern, ...]:
    items = value if isinstance(value, list) else [value]
    found: list[ToolPattern] = []
    for item in items:
        if isinstance(item, str):
            found.append(ToolPattern(name=item))
        elif isinstance(item, Mapping) and isinstance(item.get("name"), str):
            pattern = item.get("arguments")
            if pattern is not None and not isinstance(pattern, str):
                raise SuiteError(f"{where}: arguments is a regular expression (text)")
            if pattern is not None:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise SuiteError(
                        f"{where}: bad regular expression {pattern!r}: {exc}"
                    ) from None
            found.append(ToolPattern(name=item["name"], arguments=pattern))
        else:
            raise SuiteError(f"{where}: expected a tool name or {{name, arguments}}")
    return tuple(found)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise SuiteError(f"{where}: expected a number of at least 0")
    return float(value)


def _expect(raw: Any, where: str) -> Expect:
    if not isinstance(raw, Mapping):
        raise SuiteError(f"{where}: expected a table of checks")
    unknown = set(raw) - {*CHECK_KINDS, "min_similarity"}
    if unknown:
        raise SuiteError(
            f"{where}: unknown check {sorted(unknown)[0]!r} (known: {', '.join(CHECK_KINDS)})"
        )
    if not raw:
        raise SuiteError(f"{where}: a case needs at least one check")
    judge = raw.get("judge")
    if judge is not None and not isinstance(judge, str):
        raise SuiteError(f"{where}.judge: expected the rubric as text")
    similar = raw.get("similar_to")
    if similar is not None and not isinstance(similar, str):
        raise SuiteError(f"{where}.similar_to: expected text")
    floor = _number(raw.get("min_similarity", 0.6), f"{where}.min_similarity")
    if floor > 1:
        raise SuiteError(f"{where}.min_similarity: at most 1")
    return Expect(
        contains=_strings(raw.get("contains", []), f"{where}.contains"),
        omits=_strings(raw.get("omits", []), f"{where}.omits"),
        tool_called=_patterns(raw.get("tool_called", []), f"{where}.tool_called"),
        tool_not_called=_patterns(raw.get("tool_not_called", []), f"{where}.tool_not_called"),
        max_cost_usd=(
            _number(raw["max_cost_usd"], f"{where}.max_cost_usd") if "max_cost_usd" in raw else None
        ),
        similar_to=similar,
        min_similarity=floor,
        judge=judge,
    )


def _tools(raw: Any, where: str) -> tuple[RecordedCall, ...]:
    if not isinstance(raw, list):
        raise SuiteError(f"{where}: expected a list of {{name, arguments, result}}")
    found: list[RecordedCall] = []
    for index, item in enumerate(raw):
        here = f"{where}[{index}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise SuiteError(f"{here}: expected a table with a name")
        if not isinstance(item.get("result", ""), str):
            raise SuiteError(f"{here}.result: expected text")
        arguments = item.get("arguments", {})
        if "arguments_json" in item:
            try:
                arguments = json.loads(str(item["arguments_json"]))
            except ValueError:
                raise SuiteError(f"{here}.arguments_json: not JSON") from None
        found.append(
            RecordedCall(
                name=item["name"],
                arguments=arguments,
                result=item.get("result", ""),
                status=str(item.get("status", "ok")),
            )
        )
    return tuple(found)


def _case(raw: Any, index: int) -> Case:
    where = f"case[{index}]"
    if not isinstance(raw, Mapping):
        raise SuiteError(f"{where}: expected a table")
    name = raw.get("name", f"case {index + 1}")
    if not isinstance(name, str):
        raise SuiteError(f"{where}.name: expected text")
    where = f"case {name!r}"
    expect = _expect(raw.get("expect", {}), f"{where}.expect")
    turn = raw.get("turn")
    message = raw.get("message")
    if turn is not None:
        if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
            raise SuiteError(f"{where}.turn: expected a turn id")
        if message is not None:
            raise SuiteError(f"{where}: give either turn or message, not both")
        return Case(name=name, expect=expect, turn=turn)
    if message is None:
        raise SuiteError(f"{where}: needs a message (or a turn id)")
    messages = _strings(message, f"{where}.message")
    history = raw.get("history", [])
    if not isinstance(history, list) or not all(
        isinstance(h, Mapping) and isinstance(h.get("text"), str) for h in history
    ):
        raise SuiteError(f"{where}.history: expected a list of {{role, text}}")
    summary = raw.get("summary")
    if summary is not None and not isinstance(summary, str):
        raise SuiteError(f"{where}.summary: expected text")
    return Case(
        name=name,
        expect=expect,
        scenario=Scenario(messages=messages, history=history_of(history), summary=summary),
        tools=_tools(raw.get("tools", []), f"{where}.tools"),
    )


def load_suite(path: Path) -> Suite:
    """Read a suite file (``.toml``, ``.yaml`` or ``.yml``); ``SuiteError`` says what is
    wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"cannot read {path}: {exc}") from None
    raw: Any
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            raw = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise SuiteError(f"{path}: not valid YAML: {exc}") from None
    else:
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SuiteError(f"{path}: not valid TOML: {exc}") from None
    if not isinstance(raw, Mapping):
        raise SuiteError(f"{path}: expected a table at the top")
    head = raw.get("suite", {})
    if not isinstance(head, Mapping):
        raise SuiteError("suite: expected a table")
    cases = raw.get("case", raw.get("cases", []))
    if not isinstance(cases, list) or not cases:
        raise SuiteError(f"{path}: no cases ([[case]] tables, or a cases: list)")
    parsed = tuple(_case(c, i) for i, c in enumerate(cases))
    names = [c.name for c in parsed]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise SuiteError(f"two cases are named {twice!r}: names key the baseline")
    for key in ("system_prompt", "judge_model", "name"):
        if head.get(key) is not None and not isinstance(head.get(key), str):
            raise SuiteError(f"suite.{key}: expected text")
    return Suite(
        path=path,
        name=str(head.get("name") or path.stem),
        cases=parsed,
        system_prompt=head.get("system_prompt"),
        judge_model=head.get("judge_model"),
    )


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


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string: JSON's escapes are TOML's, and DEL, which JSON
    leaves bare and TOML refuses, is escaped too; a lone surrogate, which neither TOML nor
    UTF-8 holds, becomes U+FFFD."""
    return json.dumps(well_formed(value), ensure_ascii=False).replace("\x7f", "\\u007f")


def _inline(value: JsonValue) -> str | None:
    """``value`` as a TOML inline value, or None when TOML cannot hold it (null, inf)."""
    if isinstance(value, dict):
        parts = [(toml_string(str(k)), _inline(v)) for k, v in value.items()]
        if any(v is None for _k, v in parts):
            return None
        return "{ " + ", ".join(f"{k} = {v}" for k, v in parts) + " }"
    if isinstance(value, list):
        items = [_inline(v) for v in value]
        return None if any(i is None for i in items) else "[" + ", ".join(map(str, items)) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, str):
        return toml_string(value)
    return None


def _arguments_line(arguments: JsonValue) -> str:
    """A recorded call's arguments: a TOML table when TOML can hold them, else their JSON."""
    table = _inline(arguments) if isinstance(arguments, dict) else None
    if table is not None:
        return f"arguments = {table}"
    return f"arguments_json = {toml_string(json.dumps(arguments, ensure_ascii=False))}"


def case_toml(turn: RecordedTurn) -> str:
    """A ``[[case]]`` holding a journaled turn whole (its context and recorded tool results),
    with checks drawn from what it did: the same tools called, an answer like its own."""
    scenario = turn.scenario

    s = toml_string

    first = " ".join(scenario.messages[0].split()[:6]) if scenario.messages else ""
    lines = [
        "",
        f"# From turn {turn.id} ({turn.platform}, {turn.created_at:%Y-%m-%d %H:%M} UTC"
        + (f", rated {' '.join(turn.ratings)}" if turn.ratings else "")
        + "). Edit the checks to say what a good answer is.",
        "[[case]]",
        f"name = {s(f'turn {turn.id}: {first}')}",
        f"message = [{', '.join(s(m) for m in scenario.messages)}]",
    ]
    if scenario.summary:
        lines.append(f"summary = {s(scenario.summary)}")
    if scenario.history:
        lines.append("history = [")
        for m in scenario.history:
            lines.append(f"  {{ role = {s(m.role)}, text = {s(m.content)} }},")
        lines.append("]")
    for call in turn.original.calls:
        lines += [
            "[[case.tools]]",
            f"name = {s(call.name)}",
            _arguments_line(call.arguments),
            f"result = {s(call.result)}",
            f"status = {s(call.status)}",
        ]
    lines.append("[case.expect]")
    names = sorted({c.name for c in turn.original.calls})
    if names:
        lines.append(f"tool_called = [{', '.join(s(n) for n in names)}]")
    lines.append(f"similar_to = {s(turn.original.text)}")
    lines.append("min_similarity = 0.6")
    return "\n".join(lines) + "\n"


def summarize_checks(results: Sequence[CaseResult]) -> dict[str, int]:
    """How many checks of each kind ran."""
    counts: dict[str, int] = {}
    for result in results:
        for c in result.checks:
            counts[c.kind] = counts.get(c.kind, 0) + 1
    return counts
