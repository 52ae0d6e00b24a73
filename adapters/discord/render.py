"""Approval prompts and ``jobs`` listings as Discord messages with buttons (discord.py
``ui`` views of one ``DynamicItem`` class, so buttons sent before a restart still work)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from adapters.discord.parse import CUSTOM_ID
from agent_core.approval_text import for_prompt
from agent_core.events import ApprovalPrompt
from agent_core.journaled import Choice, ScheduleItem

if TYPE_CHECKING:
    import discord

BUTTONS = (("approve", "Approve", "success"), ("allow", "Allow in this conversation", "primary"),
           ("deny", "Deny", "danger"))  # fmt: skip
RECOVERY_BUTTONS = (("approve", "Retry", "primary"), ("deny", "Skip", "secondary"))
_JOB_BUTTONS = {
    "active": (("pause", "Pause"), ("delete", "Delete")),
    "paused": (("resume", "Resume"), ("delete", "Delete")),
    "done": (("delete", "Delete"),),
}
# A nonce is at most 25 characters.
_NONCE_CHARS = 25
# Five rows of up to five buttons: two per schedule leaves room for 10 schedules.
_MAX_JOBS = 10


def nonce(key: str) -> str:
    """A stable nonce (at most 25 characters) for a delivery: Discord returns the message
    already sent with it instead of sending it twice."""
    return hashlib.sha256(key.encode()).hexdigest()[:_NONCE_CHARS]


def approval_content(prompt: ApprovalPrompt) -> str:
    """The prompt's words: what would run, with which arguments (in a code block); or the
    question."""
    if prompt.question is not None:
        return f"**{prompt.question.text}**"
    shown = for_prompt(prompt.arguments)
    arguments = shown.text.replace("```", "`\u200b``")
    warning = f"\n⚠ {shown.warning}" if shown.warning else ""
    if prompt.recovery:
        return (
            f"**Run `{prompt.tool}` again?** chatgate restarted while it ran: it may or may "
            f"not have happened. (approval `{prompt.approval_id}`){warning}\n"
            f"```json\n{arguments}\n```"
        )
    origin = ""
    if prompt.origin is not None:
        where = prompt.origin.thread or prompt.origin.channel
        origin = f"\nAsked by <@{prompt.requested_by.removeprefix('discord:')}> in <#{where}>."
    return (
        f"**Allow `{prompt.tool}`?** (approval `{prompt.approval_id}`){warning}{origin}\n"
        f"```json\n{arguments}\n```"
    )


def custom_id(kind: str, action: str, target: str) -> str:
    """A button's custom_id, checked against our template."""
    value = f"cg:{kind}:{action}:{target}"
    if CUSTOM_ID.fullmatch(value) is None:
        raise ValueError(f"not a chatgate custom_id: {value!r}")
    return value


_BUTTON_CLASS: Any = None


def _dynamic_button() -> Any:
    global _BUTTON_CLASS
    if _BUTTON_CLASS is not None:
        return _BUTTON_CLASS
    import discord
    from discord import ui

    class ChatgateButton(ui.DynamicItem[ui.Button[Any]], template=CUSTOM_ID):
        """One of our buttons. Rebuilt from its custom_id by any client that registered the
        class, so buttons on messages sent before a restart still work."""

        def __init__(
            self, kind: str, action: str, target: str, label: str = "", style: str = "secondary"
        ) -> None:
            super().__init__(
                ui.Button(
                    label=label or action.title(),
                    style=getattr(discord.ButtonStyle, style),
                    custom_id=custom_id(kind, action, target),
                )
            )
            self.kind, self.action, self.target = kind, action, target

        @classmethod
        async def from_custom_id(
            cls, interaction: discord.Interaction, item: ui.Item[Any], match: re.Match[str]
        ) -> ChatgateButton:
            label = item.label if isinstance(item, ui.Button) else None
            return cls(match["kind"], match["action"], match["target"], label=label or "")

        async def callback(self, interaction: discord.Interaction) -> None:
            handler = getattr(interaction.client, "chatgate_press", None)
            if handler is not None:
                await handler(interaction, self.custom_id)

    _BUTTON_CLASS = ChatgateButton
    return ChatgateButton


def button_class() -> Any:
    """The DynamicItem class the gateway registers (``Client.add_dynamic_items``)."""
    return _dynamic_button()


def approval_view(prompt: ApprovalPrompt) -> discord.ui.View:
    """The three buttons; each custom_id carries the approval id."""
    from discord import ui

    button = _dynamic_button()
    view = ui.View(timeout=None)
    if prompt.question is not None:
        for index, option in enumerate(prompt.question.options):
            target = f"{prompt.approval_id}_{index}"
            view.add_item(button("q", "answer", target, label=option[:80], style="primary"))
        if prompt.question.allow_other:
            view.add_item(button("q", "other", prompt.approval_id, label="Other…"))
        return view
    buttons = BUTTONS if prompt.always_allow else (BUTTONS[0], BUTTONS[2])
    for action, label, style in RECOVERY_BUTTONS if prompt.recovery else buttons:
        view.add_item(button("ap", action, prompt.approval_id, label=label, style=style))
    return view


def stop_view(turn: str) -> discord.ui.View | None:
    """A reply shown as it is written: one button that stops its turn."""
    from discord import ui

    if not turn.isdigit():
        return None
    view = ui.View(timeout=None)
    view.add_item(_dynamic_button()("turn", "stop", turn, label="Stop", style="danger"))
    return view


def jobs_view(jobs: Sequence[ScheduleItem]) -> discord.ui.View | None:
    """Per schedule: pause or resume, and delete."""
    from discord import ui

    button = _dynamic_button()
    view = ui.View(timeout=None)
    for job in jobs[:_MAX_JOBS]:
        target = job.id
        for action, label in _JOB_BUTTONS.get(job.status, ()):
            view.add_item(button("job", action, target, label=f"{label} {target}"))
    return view if view.children else None


def choices_view(choices: Sequence[Choice]) -> discord.ui.View | None:
    """A question's answers, one button each (the first is the primary one)."""
    from discord import ui

    button = _dynamic_button()
    view = ui.View(timeout=None)
    for index, choice in enumerate(choices[:5]):
        style = "danger" if index == 0 else "secondary"
        view.add_item(button("ask", choice.action, choice.value, label=choice.label, style=style))
    return view if view.children else None
