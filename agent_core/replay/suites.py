"""Eval suite files, read: cases (hand-written, or naming a journaled turn) and the checks
on each answer (``agent_core.replay.evals`` runs and scores them).

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
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from agent_core.replay.recorded import RecordedCall, Scenario, arguments_text, history_of

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
