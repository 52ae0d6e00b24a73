"""Approval prompts and ``jobs`` listings as Telegram HTML and inline keyboards."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from adapters.telegram.parse import CHOICE_ACTIONS
from agent_core.approval_text import for_prompt
from agent_core.events import ApprovalPrompt, Question
from agent_core.journaled import Choice, ScheduleItem

if TYPE_CHECKING:
    from telegram import InlineKeyboardMarkup

BUTTONS = (("ap", "Approve"), ("ac", "Allow in this conversation"), ("dn", "Deny"))
RECOVERY_BUTTONS = (("ap", "Retry"), ("dn", "Skip"))
_JOB_BUTTONS = {
    "active": (("jp", "Pause"), ("jd", "Delete")),
    "paused": (("jr", "Resume"), ("jd", "Delete")),
    "done": (("jd", "Delete"),),
}
MAX_CALLBACK_DATA = 64
_MAX_JOBS = 20


def callback_data(verb: str, value: str) -> str:
    """A button's callback data, checked against Telegram's 64-byte limit (which PTB does
    not check: Telegram would answer ``BUTTON_DATA_INVALID``)."""
    data = f"{verb}:{value}"
    if len(data.encode()) > MAX_CALLBACK_DATA:
        raise ValueError(f"callback data over {MAX_CALLBACK_DATA} bytes: {data!r}")
    return data


def approval_text(prompt: ApprovalPrompt) -> str:
    """The prompt's words (HTML): what would run, with which arguments; or the question."""
    from html import escape

    if prompt.question is not None:
        return f"<b>{escape(prompt.question.text)}</b>"

    shown = for_prompt(prompt.arguments)
    warning = f"\n⚠ {escape(shown.warning)}" if shown.warning else ""
    if prompt.recovery:
        return (
            f"<b>Run {escape(prompt.tool)} again?</b> chatgate restarted while it ran: it may "
            f"or may not have happened. (approval <code>{escape(prompt.approval_id)}</code>)"
            f"{warning}\n<pre>{escape(shown.text)}</pre>"
        )
    return (
        f"<b>Allow {escape(prompt.tool)}?</b> "
        f"(approval <code>{escape(prompt.approval_id)}</code>){warning}{_origin(prompt)}\n"
        f"<pre>{escape(shown.text)}</pre>"
    )


def approval_keyboard(prompt: ApprovalPrompt) -> InlineKeyboardMarkup:
    """The buttons (three, or Retry and Skip for a recovery), the approval id in each
    button's callback data."""
    from telegram import InlineKeyboardButton, InlineKeyboardMarkup

    if prompt.question is not None:
        return question_keyboard(prompt.approval_id, prompt.question)
    buttons = [
        InlineKeyboardButton(label, callback_data=callback_data(verb, prompt.approval_id))
        for verb, label in _offered(prompt)
    ]
    return InlineKeyboardMarkup([buttons[:2], buttons[2:]] if len(buttons) > 2 else [buttons])


def question_keyboard(approval_id: str, question: Question) -> InlineKeyboardMarkup:
    """One button per option, two to a row, and "Other" alone on the last."""
    from telegram import InlineKeyboardButton, InlineKeyboardMarkup

    buttons = [
        InlineKeyboardButton(option, callback_data=callback_data("qa", f"{approval_id}:{index}"))
        for index, option in enumerate(question.options)
    ]
    rows = [buttons[i : i + 2] for i in range(0, len(buttons), 2)]
    if question.allow_other:
        rows.append(
            [InlineKeyboardButton("Other…", callback_data=callback_data("qo", approval_id))]
        )
    return InlineKeyboardMarkup(rows)


def _origin(prompt: ApprovalPrompt) -> str:
    """A copy in an approver's private chat: who asked, and in which chat."""
    from html import escape

    if prompt.origin is None:
        return ""
    asked = f"Asked by {prompt.requested_by} in chat {prompt.origin.channel}"
    return f"\n<i>{escape(asked)}</i>"


def stop_keyboard(turn: str) -> InlineKeyboardMarkup | None:
    """A reply shown as it is written: one button that stops its turn (none without a turn
    id to name)."""
    from telegram import InlineKeyboardButton, InlineKeyboardMarkup

    if not turn.isdigit():
        return None
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton("Stop", callback_data=callback_data("st", turn))]]
    )


def jobs_keyboard(jobs: Sequence[ScheduleItem]) -> InlineKeyboardMarkup | None:
    """One row per schedule: pause or resume, and delete."""
    from telegram import InlineKeyboardButton, InlineKeyboardMarkup

    rows = []
    for job in jobs[:_MAX_JOBS]:
        schedule_id = job.id
        buttons = _JOB_BUTTONS.get(job.status, ())
        if schedule_id and buttons:
            rows.append(
                [
                    InlineKeyboardButton(
                        f"{label} {schedule_id}", callback_data=callback_data(verb, schedule_id)
                    )
                    for verb, label in buttons
                ]
            )
    return InlineKeyboardMarkup(rows) if rows else None


def choices_keyboard(choices: Sequence[Choice]) -> InlineKeyboardMarkup | None:
    """A question's answers, side by side."""
    from telegram import InlineKeyboardButton, InlineKeyboardMarkup

    verbs = {action: verb for verb, action in CHOICE_ACTIONS.items()}
    row = [
        InlineKeyboardButton(
            choice.label, callback_data=callback_data(verbs[choice.action], choice.value)
        )
        for choice in choices[:4]
        if choice.action in verbs
    ]
    return InlineKeyboardMarkup([row]) if row else None


def _offered(prompt: ApprovalPrompt) -> tuple[tuple[str, str], ...]:
    """The prompt's buttons: Retry and Skip for a recovery; else Approve, Allow in this
    conversation (when offered) and Deny."""
    if prompt.recovery:
        return RECOVERY_BUTTONS
    return BUTTONS if prompt.always_allow else (BUTTONS[0], BUTTONS[2])
