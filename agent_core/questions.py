"""``ask_user``: the model asks a person a question with a button per option, and the turn
waits for the answer as it waits for an approval.

A question is an approval of kind ``question``: its row is the waiting (nothing is held in
memory, so a restart between question and press loses nothing), a press is a
compare-and-set on it (the first answer wins), and the turn resumes with the answer as the
tool's result. Only the person asked answers: the turn's user, or, for a trigger's turn,
which no person asked for, anyone who may talk to the agent in that conversation. "Other"
(``allow_other``) takes the presser's next message in the conversation as the answer. When
nobody answers in time the model is told so.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field, JsonValue

from agent_core.events import Question
from agent_core.records import ApprovalRecord
from agent_core.tools.base import Tool, ToolContext, ToolFailed, TurnContext
from agent_core.triggers import trigger_of

# Buttons a question may carry besides "Other": what every platform lays out readably
# (a Discord row holds 5, Telegram's keyboard rows of two or three).
MAX_OPTIONS = 8
# A button's label: Slack cuts at 75 characters, Discord at 80.
MAX_OPTION_CHARS = 75
OTHER = "other"
# How much of the question a decided prompt repeats above what happened to it.
QUESTION_SHOWN = 200


def asked(arguments: JsonValue) -> Question:
    """The question a call's (validated) arguments ask."""
    fields: dict[str, Any] = arguments if isinstance(arguments, dict) else {}
    options = fields.get("options")
    return Question(
        text=str(fields.get("question", "")),
        options=tuple(str(o) for o in options) if isinstance(options, list) else (),
        allow_other=bool(fields.get("allow_other", False)),
    )


def askee(user: str) -> tuple[str, ...]:
    """Who answers a question a turn of ``user`` asks: that person; for a trigger's turn,
    the conversation's members."""
    return ("role:member",) if trigger_of(user) is not None else (user,)


def chosen(approval: ApprovalRecord, choice: str | None) -> str | None:
    """The option a press means (its index as text), or None when it names none."""
    options = asked(approval.arguments).options
    # ASCII digits only: "²" is a digit to ``str.isdigit`` and not to ``int``.
    if choice is None or not (choice.isascii() and choice.isdigit()):
        return None
    index = int(choice)
    return options[index] if index < len(options) else None


def result(approval: ApprovalRecord | None) -> str:
    """What the model reads once the question is over: the answer, or why there is none."""
    if approval is None:
        return json.dumps({"answer": None, "error": "the question was never asked"})
    if approval.status == "answered":
        typed = approval.answer not in asked(approval.arguments).options
        return json.dumps(
            {"answer": approval.answer, "answered_by": approval.decided_by, "typed": typed},
            ensure_ascii=False,
        )
    if approval.status == "expired":
        reason = "nobody answered before the question expired; go on without the answer"
    else:
        reason = f"the question was {approval.status} (by {approval.decided_by})"
    return json.dumps({"answer": None, "error": reason})


def answered_note(approval: ApprovalRecord) -> str:
    """What the history and the prompt say once it is answered."""
    return f"{approval.decided_by} answered: {approval.answer}"


def shown_with(question: str, note: str) -> str:
    """A question's prompt once something happened to it: the question (its start, when
    long: a platform that cuts a long edit must not cut the note) and the note."""
    head = question if len(question) <= QUESTION_SHOWN else question[:QUESTION_SHOWN] + "…"
    return f"{head}\n{note}"


def ask_user_factory() -> Callable[[TurnContext], list[Tool]]:
    """The factory of ``ask_user`` (built once)."""

    async def ask_user(
        context: ToolContext,
        question: Annotated[str, Field(min_length=1, max_length=1500)],
        options: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=MAX_OPTION_CHARS)]],
            Field(min_length=1, max_length=MAX_OPTIONS),
        ],
        allow_other: bool = False,
    ) -> str:
        """Ask the person a question and wait for their answer, instead of guessing.

        Each of `options` (short: at most 75 characters, at most 8 of them) becomes a
        button; `allow_other` adds an "Other" button that lets the person type their own
        answer. The result is JSON: {"answer": ..., "answered_by": ..., "typed": bool},
        or {"answer": null, "error": ...} when nobody answered in time. Ask only when the
        answer changes what you do; one question at a time.
        """
        del question, options, allow_other  # shown on the prompt; the answer is the result
        if context.question is None:
            raise ToolFailed("there is nobody to ask here")
        return result(context.question)

    tool = Tool(ask_user, idempotent=True, asks_person=True)

    def factory(turn: TurnContext) -> list[Tool]:
        del turn
        return [tool]

    return factory


def problem(arguments: JsonValue) -> str | None:
    """What is wrong with a question's options (a blank or repeated one), or None."""
    shown = [option.strip() for option in asked(arguments).options]
    if any(not option for option in shown):
        return "options: an option is blank"
    if len(set(shown)) != len(shown):
        return "options: two options are the same"
    return None
