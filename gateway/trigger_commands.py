"""``/triggers`` in a chat: the triggers that post here, their latest fires, and (admins)
pause, resume and delete. Creating one is the CLI's (``chatgate trigger create``): its
secret is shown once, to whoever runs it, never in a chat."""

from __future__ import annotations

from typing import get_args

from agent_core.errors import TriggerError
from agent_core.triggers import TriggerAction, Triggers, describe, fire_line

HOW = (
    "/triggers pause ID, /triggers resume ID or /triggers delete ID (admins). A trigger is "
    "made with chatgate trigger create --conversation ... --prompt ... on the server."
)
NONE_HERE = (
    "No triggers post here. On the server, chatgate trigger create --conversation ID "
    "--prompt TEXT makes one: a request to its URL then has me look at what it carries here."
)


async def answer(triggers: Triggers, args: str, *, user: str, scope: list[str]) -> str:
    """The listing, or the change ``args`` asks for (``pause ID`` ...), in words."""
    action, _sep, trigger_id = args.strip().partition(" ")
    if action:
        if action not in get_args(TriggerAction) or not trigger_id.strip():
            return HOW
        try:
            changed = await triggers.change(
                trigger_id.strip(),
                action,  # type: ignore[arg-type]
                actor=user,
                conversation_ids=scope,
            )
        except TriggerError as exc:
            return f"Could not {action} it: {exc}."
        return f"Trigger {changed.id} is {changed.status} now."
    found = await triggers.listing(scope, fires=3)
    if not found:
        return NONE_HERE
    lines = ["Triggers that post here:"]
    for trigger in found:
        lines.append(describe(trigger))
        lines.extend(f"    {fire_line(fire)}" for fire in trigger.fires)
    lines.append(HOW)
    return "\n".join(lines)
