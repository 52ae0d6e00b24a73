"""The App Home tab as Block Kit (pure): a person's usage this month, the approvals
waiting for them (with the prompt's buttons), their schedules in every conversation (with
pause, resume and delete) and "Forget me". Presses in it come as ``block_actions`` from a
view: the block ids say what each button acts on (``adapters.slack.parse``)."""

from __future__ import annotations

import json
from typing import Any

from adapters.markdown import escape_slack
from adapters.slack.parse import HOME_APPROVAL, HOME_FORGET, HOME_JOB
from adapters.slack.render import JOB_BUTTONS, approval_blocks, job_buttons
from agent_core.events import ApprovalPrompt, ConversationKey
from agent_core.home import PersonHome, when
from agent_core.records import ApprovalRecord
from agent_core.stores.home import OwnSchedule


def home_view(home: PersonHome, *, dm: str | None, notice: str | None = None) -> dict[str, Any]:
    """The ``views.publish`` view. ``dm`` is the person's DM with the app (the "Forget me"
    question is asked there; kept in ``private_metadata`` for the next redraw); ``notice``
    says why the last press did nothing."""
    blocks: list[dict[str, Any]] = [_header("chatgate")]
    if notice:
        blocks.append(_text(f":warning: {escape_slack(notice)}"))
    usage = home.usage
    blocks.append(
        _text(
            f"*Your usage this month* (since {usage.since.day} {usage.since:%B}, UTC): "
            f"{usage.turns} turns, "
            f"{usage.tokens:,} tokens ({usage.prompt_tokens:,} prompt, "
            f"{usage.completion_tokens:,} completion), ${usage.cost_usd:.4f}"
        )
    )
    blocks += [{"type": "divider"}, _header("Approvals waiting for you")]
    if not home.approvals:
        blocks.append(_context("Nothing is waiting for you."))
    for approval in home.approvals:
        blocks += _approval(approval)
    blocks += [{"type": "divider"}, _header("Your schedules")]
    if not home.schedules:
        blocks.append(_context('None. Ask me in a conversation, e.g. "every weekday at 9, ..."'))
    for own in home.schedules:
        blocks += _schedule(own)
    if dm is not None:
        blocks += [
            {"type": "divider"},
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": "*Forget me*: erase everything chatgate holds about you. "
                    "You are asked to confirm in your messages with chatgate.",
                },
                "accessory": {
                    "type": "button",
                    "action_id": HOME_FORGET,
                    "text": {"type": "plain_text", "text": "Forget me"},
                    "value": dm,
                    "style": "danger",
                },
            },
        ]
    return {
        "type": "home",
        "private_metadata": json.dumps({"dm": dm}) if dm else "",
        "blocks": blocks,
    }


def _approval(approval: ApprovalRecord) -> list[dict[str, Any]]:
    """The prompt the conversation shows, with where it was asked; its buttons' block id
    says they are the Home's."""
    prompt = ApprovalPrompt(
        conversation=approval.conversation,
        approval_id=approval.id,
        tool=approval.tool,
        arguments=approval.arguments if isinstance(approval.arguments, dict) else {},
        requested_by=approval.requested_by,
        idempotency_key=f"home:{approval.id}",
        recovery=approval.kind == "recovery",
    )
    blocks = approval_blocks(prompt)
    blocks[-1] = {**blocks[-1], "block_id": f"{HOME_APPROVAL}:{approval.id}"}
    expires = f"{approval.expires_at:%Y-%m-%d %H:%M} UTC"
    blocks.insert(-1, _context(f"In {_where(approval.conversation)}; expires {expires}."))
    return blocks


def _schedule(own: OwnSchedule) -> list[dict[str, Any]]:
    found, where = own.schedule, own.conversation
    upcoming = (
        f", next run {found.next_run_at:%Y-%m-%d %H:%M} UTC"
        if found.next_run_at is not None and found.status == "active"
        else ""
    )
    lines = [
        f"`{escape_slack(found.id)}` {escape_slack(when(own))}: *{escape_slack(found.status)}*"
        f"{upcoming}",
        escape_slack(found.prompt)[:500],
        f"In {_where(where)}",
    ]
    blocks: list[dict[str, Any]] = [_text("\n".join(lines))]
    buttons = JOB_BUTTONS.get(found.status, ())
    if buttons:
        block_id = ":".join(
            (HOME_JOB, found.id, where.workspace, where.channel, where.thread or "")
        )
        blocks.append(job_buttons(block_id, found.id, buttons))
    return blocks


def _where(conversation: ConversationKey) -> str:
    """A Slack conversation as a link (its channel; a DM with the app says so)."""
    if conversation.platform != "slack":
        return f"a {conversation.platform} conversation"
    if conversation.channel.startswith("D"):
        return "your messages with chatgate"
    shown = f"<#{conversation.channel}>"
    return f"a thread in {shown}" if conversation.thread else shown


def _header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": text}}


def _text(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}
