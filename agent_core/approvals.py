"""Deciding approvals: who may, first answer wins, the prompt edited, the turn resumed.

Any process may take a decision (a button press lands on whichever gateway Slack picked):
the decision is a compare-and-set in the database, and the turn goes back in the queue
of its conversation, wherever it will run next. The caller wakes that conversation.
"""

from __future__ import annotations

from collections.abc import Collection

import structlog

from agent_core import approval_routing, questions
from agent_core.access import CONSOLE_OPERATOR, MayTalk
from agent_core.delivery import Outbound
from agent_core.errors import AlreadyDecided, ApprovalNotFound, NotAllowedToDecide
from agent_core.events import Edit, MessageRef, Reply
from agent_core.faults import FaultPoints
from agent_core.records import ApprovalDecision, ApprovalRecord, ApprovalStatus
from agent_core.stores import ApprovalStore

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
        store: ApprovalStore,
        outbound: Outbound,
        *,
        admins: Collection[str],
        may_talk: MayTalk | None = None,
        faults: FaultPoints | None = None,
    ) -> None:
        self._store = store
        self._outbound = outbound
        self._admins = frozenset(admins)
        self._may_talk = may_talk
        self._faults = faults or FaultPoints()

    async def refusal(
        self, approval: ApprovalRecord, user: str, *, team: str | None = None
    ) -> str | None:
        """Why ``user`` may not decide this approval (None: they may).

        The requester may (unless policy says ``self_approve = false``), as long as they may
        still talk to the agent there; so may admins, and the approvers the policy names: a
        user, or a role (``role:admin``, ``role:member`` = anyone who may talk to the agent
        in that conversation)."""
        if not approval.self_approve and _same_person(user, approval.requested_by):
            return "own_request"
        if user == approval.requested_by:
            if not await self._talks(user, approval, team):
                return "no_access"
            return None
        if user in self._admins or user in approval.approvers:
            return None
        if "role:member" in approval.approvers and await self._talks(user, approval, team):
            return None
        return "not_approver"

    async def answer_refusal(
        self, question: ApprovalRecord, user: str, *, team: str | None = None
    ) -> str | None:
        """Why ``user`` may not answer this question (None: they may): only the person
        asked does, while they may still talk to the agent; for a trigger's turn, anyone
        who may talk to it in that conversation. Not an admin on someone's behalf."""
        if "role:member" not in question.approvers and user != question.requested_by:
            return "not_asked"
        if not await self._talks(user, question, team):
            return "no_access"
        return None

    async def answer(
        self, approval_id: str, *, choice: str, user: str, team: str | None = None
    ) -> ApprovalRecord:
        """A press on a question: the option ``choice`` (its index), or ``other`` (the
        presser's next message there is the answer; the question stays pending). Raises
        ApprovalNotFound (no such question, or no such option), NotAllowedToDecide or
        AlreadyDecided."""
        question = await self._store.approval(approval_id)
        if question is None or question.kind != "question":
            raise ApprovalNotFound(approval_id)
        reason = await self.answer_refusal(question, user, team=team)
        if reason is not None:
            raise NotAllowedToDecide(approval_id, user, reason)
        if question.status != "pending":
            raise AlreadyDecided(approval_id, question.status, question.decided_by)
        asked = questions.asked(question.arguments)
        if choice == questions.OTHER and asked.allow_other:
            marked = await self._store.mark_answering(approval_id, user)
            if marked is None:
                raise AlreadyDecided(approval_id)
            await self._edit_prompt(
                marked,
                questions.shown_with(
                    asked.text, f"{user}: type your answer as your next message here."
                ),
            )
            return marked
        option = questions.chosen(question, choice)
        if option is None:
            raise ApprovalNotFound(approval_id)
        decided = await self._store.decide_approval(
            approval_id,
            status="answered",
            user=user,
            note=f"{user} answered: {option}",
            answer=option,
        )
        if decided is None:
            raise AlreadyDecided(approval_id)
        log.info("question answered", approval_id=approval_id, user=user)
        self._faults.hit("after_decision")
        await self.show_answer(decided)
        return decided

    async def show_answer(self, question: ApprovalRecord) -> None:
        """Edit an answered question's prompt to say who answered what."""
        asked = questions.asked(question.arguments)
        await self._edit_prompt(
            question, questions.shown_with(asked.text, questions.answered_note(question))
        )

    def named(self, approval: ApprovalRecord, user: str) -> bool:
        """Whether ``user`` is one of the approval's own deciders: its requester, an admin,
        or an approver the policy names as a person (``role:member`` names nobody). Only
        they are shown it, and may decide it, away from its conversation (Slack's App
        Home): a member may decide where they see the prompt, not anyone's DM from afar."""
        return user == approval.requested_by or user in self._admins or user in approval.approvers

    async def _talks(self, user: str, approval: ApprovalRecord, team: str | None) -> bool:
        return self._may_talk is None or await self._may_talk(user, approval.conversation, team)

    async def decide(
        self, approval_id: str, *, decision: ApprovalDecision, user: str, team: str | None = None
    ) -> ApprovalRecord:
        """Decide once. Raises ApprovalNotFound, NotAllowedToDecide or AlreadyDecided (a
        question is answered, not decided: :meth:`answer`)."""
        approval = await self._store.approval(approval_id)
        if approval is None or approval.kind == "question":
            raise ApprovalNotFound(approval_id)
        reason = await self.refusal(approval, user, team=team)
        if reason is not None:
            raise NotAllowedToDecide(approval_id, user, reason)
        if approval.status != "pending":
            raise AlreadyDecided(approval_id, approval.status, approval.decided_by)
        status = _STATUS[decision]
        if status == "allowed" and (approval.kind == "recovery" or not approval.always_allow):
            # A re-run is allowed once, and a prompt that did not offer "Allow in this
            # conversation" (a stale button, a typed decision) approves this call only.
            status = "approved"
        note = _note(approval, status, user)
        decided = await self._store.decide_approval(
            approval_id, status=status, user=user, note=note
        )
        if decided is None:
            raise AlreadyDecided(approval_id)
        log.info("approval decided", approval_id=approval_id, status=status, user=user)
        self._faults.hit("after_decision")
        await self._edit_prompt(decided, note)
        return decided

    async def expire_due(self) -> list[ApprovalRecord]:
        """Expire every pending approval whose time is up (their turns resume with a
        denial), or pass it on to its ``escalate_to``, once."""
        expired = []
        for approval_id in await self._store.due_approvals():
            due = await self._store.approval(approval_id)
            passed_on = (
                due is not None
                and bool(due.escalate_to)
                and await approval_routing.pass_on(self._outbound, self._store, due) is not None
            )
            if passed_on:
                continue
            expired.append(await self._close(approval_id, "expired"))
        return [approval for approval in expired if approval is not None]

    async def cancel(
        self, approval_id: str, *, stopped_by: str | None = None
    ) -> ApprovalRecord | None:
        """Cancel a pending approval whose requester may no longer talk to the agent, or
        whose turn ``stopped_by`` stopped (its turn resumes with a denial, or stops); None
        when it was decided already."""
        return await self._close(approval_id, "cancelled", stopped_by=stopped_by)

    async def _close(
        self, approval_id: str, status: ApprovalStatus, *, stopped_by: str | None = None
    ) -> ApprovalRecord | None:
        """chatgate decides a pending approval itself (expired, cancelled) and says so."""
        approval = await self._store.approval(approval_id)
        if approval is None:
            return None
        what = "question" if approval.kind == "question" else f"approval for {approval.tool}"
        note = (
            f"The {what} was cancelled: {stopped_by} stopped the turn."
            if stopped_by is not None
            else _note(approval, status, "chatgate")
        )
        decided = await self._store.decide_approval(
            approval_id, status=status, user=stopped_by or "chatgate", note=note
        )
        if decided is not None:
            log.info("approval closed by chatgate", approval_id=approval_id, status=status)
            await self._edit_prompt(decided, note)
        return decided

    async def _edit_prompt(self, approval: ApprovalRecord, text: str) -> None:
        """Show the decision (``text``) on the prompt; when the prompt's receipt was never
        stored (the process stopped between sending it and recording it), say it in a new
        message."""
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
        await approval_routing.edit_copies(self._outbound, self._store, approval, text)


def _same_person(user: str, requester: str) -> bool:
    """The web chat names its users as the request says (its one principal is whoever is on
    loopback or holds the token), so for the requester rule every web user is one person:
    a second person must decide from another platform. The operator console is that same
    principal (it has the same door), so it is that person too."""
    local = ("web:", CONSOLE_OPERATOR)
    return user == requester or (user.startswith(local) and requester.startswith(local))


def _note(approval: ApprovalRecord, status: ApprovalStatus, user: str) -> str:
    if approval.kind == "question":
        asked = questions.asked(approval.arguments).text
        if status == "expired":
            return questions.shown_with(asked, "Nobody answered in time.")
        return questions.shown_with(asked, "The question was cancelled.")
    if status == "expired":
        return f"The approval for {approval.tool} expired: nobody decided in time."
    if status == "cancelled":
        return (
            f"The approval for {approval.tool} was cancelled: {approval.requested_by} may no "
            "longer use the agent here."
        )
    if approval.kind == "recovery":
        action = "chose to run it again" if status == "approved" else "chose to skip it"
        return f"{user} {action}: {approval.tool}"
    return f"{user} {_VERB[status]} {approval.tool}"
