"""Deciding approvals: who may, first answer wins, the prompt edited, the turn resumed.

Any process may take a decision (a button press lands on whichever gateway Slack picked):
the decision is a compare-and-set in the database, and the turn goes back in the queue
of its conversation, wherever it will run next. The caller wakes that conversation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection

import structlog

from agent_core.delivery import Outbound
from agent_core.errors import AlreadyDecided, ApprovalNotFound, NotAllowedToDecide
from agent_core.events import Edit, MessageRef, Reply
from agent_core.records import ApprovalDecision, ApprovalRecord, ApprovalStatus
from agent_core.storage.store import Store

log = structlog.get_logger("chatgate.approvals")

_STATUS: dict[ApprovalDecision, ApprovalStatus] = {
    "approve": "approved",
    "allow_conversation": "allowed",
    "deny": "denied",
}
_VERB: dict[str, str] = {
    "approved": "approved",
    "allowed": "allowed for this conversation",
    "denied": "denied",
    "expired": "expired:",
}


class Approvals:
    """Takes decisions on pending approvals."""

    def __init__(
        self,
        store: Store,
        outbound: Outbound,
        *,
        admins: Collection[str],
        is_member: Callable[[str], Awaitable[bool]] | None = None,
    ) -> None:
        self._store = store
        self._outbound = outbound
        self._admins = frozenset(admins)
        self._is_member = is_member

    async def may_decide(self, approval: ApprovalRecord, user: str) -> bool:
        """The requester, an admin, or an approver the policy names: a user, or a role
        (``role:admin``, ``role:member`` = anyone who may talk to the agent)."""
        if user == approval.requested_by or user in self._admins or user in approval.approvers:
            return True
        if "role:member" in approval.approvers and self._is_member is not None:
            return await self._is_member(user)
        return False

    async def decide(
        self, approval_id: str, *, decision: ApprovalDecision, user: str
    ) -> ApprovalRecord:
        """Decide once. Raises ApprovalNotFound, NotAllowedToDecide or AlreadyDecided."""
        approval = await self._store.approval(approval_id)
        if approval is None:
            raise ApprovalNotFound(approval_id)
        if not await self.may_decide(approval, user):
            raise NotAllowedToDecide(approval_id, user)
        if approval.status != "pending":
            raise AlreadyDecided(approval_id, approval.status, approval.decided_by)
        status = _STATUS[decision]
        if approval.kind == "recovery" and status == "allowed":
            status = "approved"  # a re-run is allowed once; nothing to remember
        decided = await self._store.decide_approval(
            approval_id, status=status, user=user, note=_note(approval, status, user)
        )
        if decided is None:
            raise AlreadyDecided(approval_id)
        log.info("approval decided", approval_id=approval_id, status=status, user=user)
        await self._edit_prompt(decided)
        return decided

    async def expire_due(self) -> list[ApprovalRecord]:
        """Expire every pending approval whose time is up; their turns resume with a denial."""
        expired: list[ApprovalRecord] = []
        for approval_id in await self._store.due_approvals():
            approval = await self._store.approval(approval_id)
            if approval is None:
                continue
            decided = await self._store.decide_approval(
                approval_id,
                status="expired",
                user="chatgate",
                note=_note(approval, "expired", "chatgate"),
            )
            if decided is not None:
                log.info("approval expired", approval_id=approval_id)
                await self._edit_prompt(decided)
                expired.append(decided)
        return expired

    async def _edit_prompt(self, approval: ApprovalRecord) -> None:
        """Show the decision on the prompt; when the prompt's receipt was never stored (the
        process stopped between sending it and recording it), say it in a new message."""
        text = _note(approval, approval.status, approval.decided_by or "chatgate")
        key = f"{approval.id}:decided"
        try:
            if approval.prompt_message_id is None:
                await self._outbound.send(
                    Reply(conversation=approval.conversation, text=text, idempotency_key=key)
                )
            else:
                where = MessageRef(
                    conversation=approval.conversation, message_id=approval.prompt_message_id
                )
                await self._outbound.edit(Edit(message=where, text=text, idempotency_key=key))
        except Exception:
            # The decision stands; only its display is stale.
            log.exception("could not show the decision", approval_id=approval.id)


def _note(approval: ApprovalRecord, status: ApprovalStatus, user: str) -> str:
    if status == "expired":
        return f"The approval for {approval.tool} expired: nobody decided in time."
    if approval.kind == "recovery":
        action = "chose to run it again" if status == "approved" else "chose to skip it"
        return f"{user} {action}: {approval.tool}"
    return f"{user} {_VERB[status]} {approval.tool}"
