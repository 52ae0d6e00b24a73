"""A journaled turn written as a suite's case (``chatgate eval add``): TOML text that reads
back whole, whatever the turn's text holds."""

from __future__ import annotations

import json
import math

from pydantic import JsonValue

from agent_core.replay.recorded import RecordedTurn, well_formed


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
