"""Replies, approval prompts and ``jobs`` listings as Slack Block Kit (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from adapters.markdown import escape_slack
from adapters.slack.parse import bare_user
from agent_core.approval_text import for_prompt
from agent_core.events import ApprovalPrompt, Question
from agent_core.journaled import Choice, ScheduleItem

# Slack allows 50 blocks a message: a title and up to three blocks per schedule.
_MAX_JOBS = 16
# What a section's text may hold.
_SECTION = 3000
JOB_BUTTONS = {
    "active": (("chatgate_job_pause", "Pause"), ("chatgate_job_delete", "Delete")),
    "paused": (("chatgate_job_resume", "Resume"), ("chatgate_job_delete", "Delete")),
    "done": (("chatgate_job_delete", "Delete"),),
}
BUTTONS = (
    ("chatgate_approve", "Approve", "primary"),
    ("chatgate_allow_conversation", "Allow in this conversation", None),
    ("chatgate_deny", "Deny", "danger"),
)
RECOVERY_BUTTONS = (("chatgate_approve", "Retry", "primary"), ("chatgate_deny", "Skip", None))


def _pieces(text: str, *, first: int, rest: int) -> list[str]:
    """``text`` in pieces (the first at most ``first`` characters, the others ``rest``),
    never splitting an entity."""
    pieces = []
    size = first
    while len(text) > size:
        cut = text[:size]
        entity = cut.rfind("&")
        if entity > len(cut) - 5:  # do not split &amp; / &lt; / &gt;
            cut = cut[:entity]
        pieces.append(cut)
        text = text[len(cut) :]
        size = rest
    return [*pieces, text]


def approval_blocks(prompt: ApprovalPrompt) -> list[dict[str, Any]]:
    """The prompt as Block Kit: what would run, and the three buttons (approval id in
    each button's value)."""
    if prompt.question is not None:
        return question_blocks(prompt.approval_id, prompt.question)
    shown = for_prompt(prompt.arguments)
    warning = f"\n:warning: {escape_slack(shown.warning)}" if shown.warning else ""
    header = (
        f"*Allow `{escape_slack(prompt.tool)}`?* (asked by {_asker(prompt.requested_by)}){warning}"
    )
    if prompt.origin is not None:
        header += f"\nAsked in <#{prompt.origin.channel}>, for you to decide here."
    if prompt.recovery:
        header = (
            f"*Run `{escape_slack(prompt.tool)}` again?* chatgate restarted while it ran: it "
            f"may or may not have happened.{warning}"
        )
    # A section holds 3,000 characters; escaping can grow the text, so it may take several.
    arguments = escape_slack(shown.text).replace("```", "`\u200b``")
    pieces = _pieces(arguments, first=_SECTION - len(header) - 7, rest=_SECTION - 6)
    texts = [f"```{piece}```" for piece in pieces]
    texts[0] = f"{header}\n{texts[0]}"
    sections = [{"type": "section", "text": {"type": "mrkdwn", "text": t}} for t in texts]
    return [
        *sections,
        {
            "type": "actions",
            "block_id": f"approval:{prompt.approval_id}",
            "elements": [
                {
                    "type": "button",
                    "action_id": action_id,
                    "text": {"type": "plain_text", "text": label},
                    "value": prompt.approval_id,
                    **({"style": style} if style else {}),
                }
                for action_id, label, style in _offered(prompt)
            ],
        },
    ]


def question_blocks(approval_id: str, question: Question) -> list[dict[str, Any]]:
    """An ``ask_user`` question as Block Kit: its words, and a button per option (and
    "Other"), each carrying the approval id and the option's index."""
    text = f"*{escape_slack(question.text)}*"
    buttons = [
        {
            "type": "button",
            "action_id": f"chatgate_answer:{index}",
            "text": {"type": "plain_text", "text": option[:75]},
            "value": f"{approval_id}:{index}",
        }
        for index, option in enumerate(question.options)
    ]
    if question.allow_other:
        buttons.append(
            {
                "type": "button",
                "action_id": "chatgate_other",
                "text": {"type": "plain_text", "text": "Other…"},
                "value": approval_id,
            }
        )
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": text[:_SECTION]}},
        {"type": "actions", "block_id": f"question:{approval_id}", "elements": buttons},
    ]


def jobs_blocks(text: str, jobs: Sequence[ScheduleItem]) -> list[dict[str, Any]]:
    """A ``jobs`` listing as Block Kit: each schedule with its state, latest runs, and
    buttons to pause, resume or delete it (the schedule id in each button's value)."""
    if not jobs:
        return [{"type": "section", "text": {"type": "mrkdwn", "text": escape_slack(text)}}]
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": "*Schedules in this conversation*"}}
    ]
    for job in jobs[:_MAX_JOBS]:
        lines = [
            f"`{escape_slack(job.id)}` {escape_slack(job.when)}: *{escape_slack(job.status)}*",
            escape_slack(job.prompt)[:500],
        ]
        for run in job.runs:
            at = (run.scheduled_for or run.finished_at or "")[:16]
            line = f"• {escape_slack(at.replace('T', ' '))} UTC {escape_slack(run.status)}"
            if run.lag_note():
                line += f", {'*' if run.late else ''}{run.lag_note()}{'*' if run.late else ''}"
            if run.nothing_to_report:
                line += ", nothing to report"
            if run.error:
                line += f": {escape_slack(run.error)[:200]}"
            lines.append(line)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)}})
        buttons = JOB_BUTTONS.get(job.status, ())
        if buttons:
            blocks.append(job_buttons(f"job:{job.id}", job.id, buttons))
    return blocks


def job_buttons(
    block_id: str, schedule_id: str, buttons: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    """A schedule's Pause / Resume / Delete row (Delete in red)."""
    return {
        "type": "actions",
        "block_id": block_id,
        "elements": [
            {
                "type": "button",
                "action_id": action_id,
                "text": {"type": "plain_text", "text": label},
                "value": schedule_id,
                **({"style": "danger"} if action_id.endswith("delete") else {}),
            }
            for action_id, label in buttons
        ],
    }


def choices_blocks(text: str, choices: Sequence[Choice]) -> list[dict[str, Any]]:
    """A question and its answers as Block Kit (each answer's value in its button)."""
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": escape_slack(text)[:_SECTION]}},
        {
            "type": "actions",
            "block_id": "choices",
            "elements": [
                {
                    "type": "button",
                    "action_id": f"chatgate_choice:{choice.action}:{index}",
                    "text": {"type": "plain_text", "text": choice.label[:75]},
                    "value": choice.value,
                    **({"style": "danger"} if index == 0 else {}),
                }
                for index, choice in enumerate(choices[:5])
            ],
        },
    ]


def _asker(requested_by: str) -> str:
    """Who asked: a Slack person as a mention, anyone else (a trigger) by name."""
    if requested_by.startswith("slack:"):
        return f"<@{bare_user(requested_by)}>"
    return escape_slack(requested_by.replace("trigger:", "trigger ", 1))


def _offered(prompt: ApprovalPrompt) -> tuple[tuple[str, str, str | None], ...]:
    """The prompt's buttons: Retry and Skip for a recovery; else Approve, Allow in this
    conversation (when offered) and Deny."""
    if prompt.recovery:
        return RECOVERY_BUTTONS
    return BUTTONS if prompt.always_allow else (BUTTONS[0], BUTTONS[2])
