"""What changed between a recorded turn and its replay: the final text (similarity and a
diff), the tool calls (matched, new, skipped), tokens, cost and latency; and the totals.
Shown as a terminal table, JSON, or one self-contained HTML page with the transcripts side
by side (no script, every text escaped)."""

from __future__ import annotations

import difflib
import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from agent_core.replay.recorded import RecordedCall, RecordedTurn, arguments_text, plain
from agent_core.replay.runner import ReplayedCall, Rerun


def similarity(before: str, after: str) -> float:
    """How alike two answers are, 0 to 1 (difflib's ratio over words)."""
    if before == after:
        return 1.0
    return difflib.SequenceMatcher(None, before.split(), after.split(), autojunk=False).ratio()


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """One turn, as recorded and as replayed."""

    turn: RecordedTurn
    rerun: Rerun
    similarity: float
    diff: str
    # Recorded calls the replay did not make.
    skipped: tuple[RecordedCall, ...]

    @property
    def new_calls(self) -> list[ReplayedCall]:
        """Calls the replay made that the recorded turn did not: divergences."""
        return [c for c in self.rerun.calls if c.served == "unavailable"]

    @property
    def matched_calls(self) -> list[ReplayedCall]:
        """Calls the replay made as recorded."""
        return [c for c in self.rerun.calls if c.served == "recorded"]

    @property
    def diverged(self) -> bool:
        """Whether the replay's tool calls differ from the recorded ones."""
        return bool(self.new_calls or self.skipped)

    def to_json(self) -> dict[str, JsonValue]:
        """The comparison as JSON (the ``--json`` report's entries)."""
        original = self.turn.original
        return {
            "turn_id": self.turn.id,
            "conversation_id": self.turn.conversation_id,
            "platform": self.turn.platform,
            "ratings": list(self.turn.ratings),
            "similarity": round(self.similarity, 4),
            "diff": self.diff,
            "diverged": self.diverged,
            "original": {
                "text": original.text,
                "model": original.model,
                "calls": [c.to_json() for c in original.calls],
                "model_calls": original.model_calls,
                "tokens": original.prompt_tokens + original.completion_tokens,
                "cost_usd": original.cost_usd,
                "seconds": round(original.seconds, 3),
            },
            "replay": {
                "text": self.rerun.text,
                "model": self.rerun.model,
                "error": self.rerun.error,
                "calls": [
                    {"name": c.name, "arguments": c.arguments, "served": c.served}
                    for c in self.rerun.calls
                ],
                "model_calls": self.rerun.model_calls,
                "tokens": self.rerun.prompt_tokens + self.rerun.completion_tokens,
                "cost_usd": self.rerun.cost_usd,
                "seconds": round(self.rerun.seconds, 3),
            },
            "new_calls": [{"name": c.name, "arguments": c.arguments} for c in self.new_calls],
            "skipped_calls": [{"name": c.name, "arguments": c.arguments} for c in self.skipped],
        }


def compare(turn: RecordedTurn, rerun: Rerun) -> Comparison:
    """The turn's recorded run beside its replay."""
    before, after = turn.original.text, rerun.text
    diff = "\n".join(
        difflib.unified_diff(
            before.splitlines(), after.splitlines(), "recorded", "replay", lineterm="", n=2
        )
    )
    used = {c.matched for c in rerun.calls if c.matched is not None}
    skipped = tuple(c for i, c in enumerate(turn.original.calls) if i not in used)
    return Comparison(
        turn=turn, rerun=rerun, similarity=similarity(before, after), diff=diff, skipped=skipped
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Totals:
    """Sums over every compared turn."""

    turns: int
    same_text: int
    diverged: int
    mean_similarity: float
    tokens_before: int
    tokens_after: int
    cost_before: float
    cost_after: float
    seconds_before: float
    seconds_after: float

    def to_json(self) -> dict[str, JsonValue]:
        """For the JSON report."""
        return {
            "turns": self.turns,
            "same_text": self.same_text,
            "diverged": self.diverged,
            "mean_similarity": round(self.mean_similarity, 4),
            "tokens": {"recorded": self.tokens_before, "replay": self.tokens_after},
            "cost_usd": {"recorded": self.cost_before, "replay": self.cost_after},
            "seconds": {
                "recorded": round(self.seconds_before, 3),
                "replay": round(self.seconds_after, 3),
            },
        }


def totals(comparisons: Sequence[Comparison]) -> Totals:
    """The run's totals."""
    count = len(comparisons)
    return Totals(
        turns=count,
        same_text=sum(1 for c in comparisons if c.similarity == 1.0),
        diverged=sum(1 for c in comparisons if c.diverged),
        mean_similarity=sum(c.similarity for c in comparisons) / count if count else 1.0,
        tokens_before=sum(
            c.turn.original.prompt_tokens + c.turn.original.completion_tokens for c in comparisons
        ),
        tokens_after=sum(c.rerun.prompt_tokens + c.rerun.completion_tokens for c in comparisons),
        cost_before=sum(c.turn.original.cost_usd for c in comparisons),
        cost_after=sum(c.rerun.cost_usd for c in comparisons),
        seconds_before=sum(c.turn.original.seconds for c in comparisons),
        seconds_after=sum(c.rerun.seconds for c in comparisons),
    )


def _calls(comparison: Comparison) -> str:
    parts = [f"{len(comparison.matched_calls)} as recorded"]
    if comparison.new_calls:
        parts.append("new: " + ", ".join(c.name for c in comparison.new_calls))
    if comparison.skipped:
        parts.append("skipped: " + ", ".join(c.name for c in comparison.skipped))
    return "; ".join(parts)


def _turns(count: int) -> str:
    return "1 turn" if count == 1 else f"{count} turns"


def _money(value: float) -> str:
    return f"${value:.4f}"


def table(comparisons: Sequence[Comparison], *, model: str) -> str:
    """The terminal report: one line per turn, then the totals."""
    header = f"{'turn':>7}  {'similar':>7}  {'tokens':>15}  {'cost':>19}  {'seconds':>13}  tools"
    lines = [f"replay against {model}", header]
    for c in comparisons:
        o, r = c.turn.original, c.rerun
        before, after = o.prompt_tokens + o.completion_tokens, r.prompt_tokens + r.completion_tokens
        lines.append(
            f"{c.turn.id:>7}  {c.similarity:>7.0%}  {before:>6} -> {after:<6}"
            f"  {_money(o.cost_usd):>8} -> {_money(r.cost_usd):<8}"
            f"  {o.seconds:>5.2f} -> {r.seconds:<5.2f}  {_calls(c)}"
            + (f"  [{r.error}]" if r.error else "")
        )
    t = totals(comparisons)
    lines.append(
        f"{_turns(t.turns)}: {t.same_text} with the same answer, {t.diverged} with different tool "
        f"calls, mean similarity {t.mean_similarity:.0%}; tokens {t.tokens_before} -> "
        f"{t.tokens_after}, cost {_money(t.cost_before)} -> {_money(t.cost_after)}, model "
        f"time {t.seconds_before:.2f} s -> {t.seconds_after:.2f} s"
    )
    return "\n".join(plain(line) for line in lines)


def to_json(comparisons: Sequence[Comparison], *, model: str, system_prompt: str) -> str:
    """The JSON report."""
    document: dict[str, Any] = {
        "model": model,
        "system_prompt": system_prompt,
        "totals": totals(comparisons).to_json(),
        "turns": [c.to_json() for c in comparisons],
    }
    return json.dumps(document, ensure_ascii=False, indent=2)


STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#1d1d1f;background:#fff}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:2em;border-top:1px solid #ddd;padding-top:1em}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.3em .6em;text-align:left}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:1em}
.side{border:1px solid #ddd;border-radius:6px;padding:.6em 1em;overflow-wrap:anywhere}
.msg{white-space:pre-wrap;margin:.4em 0}.user{color:#555}.tool{background:#f5f5f7;padding:.3em}
.new{background:#fff3cd}.skipped{background:#fde2e1}
h2.pass,li.pass{color:#1a7f37}h2.fail,li.fail{color:#c62828}
pre{white-space:pre-wrap;background:#f5f5f7;padding:.6em}
"""


def page(title: str, body: str) -> str:
    """A whole HTML page around ``body``; nothing on it runs or loads anything."""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<meta http-equiv=Content-Security-Policy "
        "content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>"
        f"<body>{body}</body></html>"
    )


def _esc(value: object) -> str:
    return html.escape(str(value))


def call_html(
    name: str, arguments: JsonValue, result: str, *, css: str = "", note: str | None = None
) -> str:
    """A tool call and its result, as a transcript shows it."""
    noted = f" <i>({_esc(note)})</i>" if note else ""
    return (
        f'<div class="msg tool {css}"><b>tool</b> {_esc(name)} '
        f"{_esc(arguments_text(arguments))}{noted}\n→ {_esc(result[:2000])}</div>"
    )


def transcript_html(messages: Sequence[str], calls: Sequence[str], text: str, *, title: str) -> str:
    """One side of a side-by-side: the turn's messages, its tool calls, its answer."""
    shown = "".join(f'<div class="msg user"><b>person</b> {_esc(m)}</div>' for m in messages)
    return (
        f'<div class="side"><h3>{_esc(title)}</h3>{shown}{"".join(calls)}'
        f'<div class="msg answer"><b>answer</b> {_esc(text)}</div></div>'
    )


def to_html(comparisons: Sequence[Comparison], *, model: str, system_prompt: str) -> str:
    """The HTML report: totals, then each turn's transcripts side by side and the diff."""
    t = totals(comparisons)
    parts = [
        f"<h1>Replay against {_esc(model)}</h1>",
        f"<p>{_turns(t.turns)}: {t.same_text} with the same answer, {t.diverged} with different "
        f"tool calls, mean similarity {t.mean_similarity:.0%}.</p>",
        "<table><tr><th></th><th>recorded</th><th>replay</th></tr>",
        f"<tr><td>tokens</td><td>{t.tokens_before}</td><td>{t.tokens_after}</td></tr>",
        f"<tr><td>cost</td><td>{_money(t.cost_before)}</td><td>{_money(t.cost_after)}</td></tr>",
        f"<tr><td>model time</td><td>{t.seconds_before:.2f} s</td>"
        f"<td>{t.seconds_after:.2f} s</td></tr></table>",
        f"<details><summary>system prompt</summary><pre>{_esc(system_prompt)}</pre></details>",
    ]
    for c in comparisons:
        o = c.turn.original
        skipped = {id(s) for s in c.skipped}
        before = [
            call_html(
                call.name,
                call.arguments,
                call.result,
                css="skipped" if id(call) in skipped else "",
                note=call.approval,
            )
            for call in o.calls
        ]
        after = [
            call_html(
                call.name,
                call.arguments,
                call.result,
                css="new" if call.served == "unavailable" else "",
            )
            for call in c.rerun.calls
        ]
        rated = f" · rated {' '.join(c.turn.ratings)}" if c.turn.ratings else ""
        parts.append(
            f'<section class="turn" id="turn-{c.turn.id}"><h2>Turn {c.turn.id} · '
            f"{_esc(c.turn.platform)}{_esc(rated)} · similarity {c.similarity:.0%}</h2>"
            f'<p class="calls">{_esc(_calls(c))}</p><div class="pair">'
            + transcript_html(
                c.turn.scenario.messages, before, o.text, title=f"recorded ({o.model or '?'})"
            )
            + transcript_html(
                c.turn.scenario.messages, after, c.rerun.text, title=f"replay ({c.rerun.model})"
            )
            + "</div>"
            + (f"<pre class=diff>{_esc(c.diff)}</pre>" if c.diff else "")
            + "</section>"
        )
    return page(f"chatgate replay: {model}", "".join(parts))
