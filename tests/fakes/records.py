"""Rows the tests need in place before the behaviour they check: made through the store."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from agent_core.events import InboundMessage, utcnow
from agent_core.records import ApprovalRecord, ApprovalRequest
from agent_core.storage.store import Store


async def pending_pairing(store: Store, *, user: str, code: str) -> None:
    """A Telegram stranger who wrote once and holds a pending ``code``."""
    accepted = await store.accept_inbound(
        InboundMessage(
            platform="telegram",
            workspace="bot",
            channel=user.split(":")[1],
            user=user,
            text="hi",
            platform_event_id=f"pairing-{code}",
        ),
        open_turn=False,
    )
    await store.request_pairing(
        platform="telegram",
        user=user,
        conversation_id=accepted.conversation_id,
        code=code,
        expires_at=utcnow() + timedelta(hours=1),
        max_pending=3,
    )


async def pending_approval(
    store: Store, turn_id: int, *, command: str, approvers: Sequence[str] = ()
) -> ApprovalRecord:
    """A run_command approval waiting on ``turn_id``, as the turn runner asks for one."""
    turn = await store.load_turn(turn_id)
    return await store.request_approval(
        turn,
        9,
        ApprovalRequest(
            kind="tool",
            tool="run_command",
            arguments={"command": command},
            approvers=tuple(approvers),
            expires_at=utcnow() + timedelta(minutes=5),
            prompt_text="?",
            call_id="c9",
        ),
    )
