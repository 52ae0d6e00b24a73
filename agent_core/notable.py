"""Quiet runs: a scheduled check that posts only when it finds something worth saying.

A schedule with ``notify = "if_notable"`` queues quiet turns. Their prompt asks the model
to end with a JSON object, ``{"notable": true|false, "report": "..."}``; :func:`sift`
reads it. A notable answer posts its report; one that is not posts nothing, and its
reason stays in the journal and shows in ``jobs`` and the console as "nothing to
report". An answer that does not hold the object is posted as it is: a run is never
silenced by a model that did not follow the format.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

INSTRUCTION = (
    "\n\n(This is a scheduled check that posts only when there is something worth telling "
    "the people here. When you are done, answer with only a JSON object: "
    '{"notable": true, "report": "what to post"} when the result is worth posting, or '
    '{"notable": false, "report": "in one line, why not"} when it is not.)'
)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Sifted:
    """What to do with a quiet run's answer: post ``text``, or not (``text`` is the
    model's reason then, for the journal)."""

    post: bool
    text: str


def ask(prompt: str) -> str:
    """A quiet run's prompt: the schedule's, and how to answer."""
    return prompt + INSTRUCTION


def sift(answer: str) -> Sifted:
    """Read a quiet run's final answer."""
    verdict = _object(answer)
    if verdict is None or not isinstance(verdict.get("notable"), bool):
        return Sifted(post=True, text=answer)
    report = verdict.get("report")
    text = report.strip() if isinstance(report, str) else ""
    if verdict["notable"]:
        return Sifted(post=True, text=text or answer)
    return Sifted(post=False, text=text)


def _object(answer: str) -> dict[str, object] | None:
    """The JSON object the answer is (bare or in a code fence), or holds from its first
    ``{`` to its last ``}``."""
    text = answer.strip()
    fenced = _FENCE.match(text)
    if fenced is not None:
        text = fenced.group(1)
    for candidate in (text, text[text.find("{") : text.rfind("}") + 1]):
        try:
            parsed = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            return parsed
    return None
