"""People's decisions and access: approvals, pairing, revocation."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from agent_core.events import ConversationKey
from agent_core.records import (
    ApprovalRecord,
    ApprovalRequest,
    ApprovalStatus,
    OwnedWork,
    PairedUser,
    PairingOutcome,
    PairingRequest,
    TurnRecord,
)


class ApprovalStore(Protocol):
    """Approvals: asked, prompted, decided, expired; and the grants they leave."""

    async def request_approval(
        self, turn: TurnRecord, seq: int, request: ApprovalRequest
    ) -> ApprovalRecord:
        """Ask (once per turn and step): the approval row, its prompt and its journal step."""
        ...

    async def approval_prompt_sent(self, approval_id: str, *, turn_id: int, receipt: str) -> bool:
        """The prompt is delivered: record its receipt and let the turn wait (False: it
        was decided already, so the turn goes on instead)."""
        ...

    async def decide_approval(
        self,
        approval_id: str,
        *,
        status: ApprovalStatus,
        user: str,
        note: str,
        answer: str | None = None,
    ) -> ApprovalRecord | None:
        """First decision wins; None when it was already decided. ``answer``: what a
        question (``ask_user``) was answered."""
        ...

    async def mark_answering(self, approval_id: str, user: str) -> ApprovalRecord | None:
        """``user`` pressed a question's "Other": their next message here answers it (None:
        the question is over, or another person pressed "Other" first)."""
        ...

    async def approval(self, approval_id: str) -> ApprovalRecord | None:
        """One approval by id."""
        ...

    async def approval_for_step(self, turn_id: int, seq: int) -> ApprovalRecord | None:
        """The approval a turn asked for at a journal step, if any."""
        ...

    async def add_approval_copy(
        self, approval_id: str, where: ConversationKey, *, message_id: str, sent_to: str
    ) -> None:
        """A copy of the prompt was sent to ``sent_to``'s DM (a decision edits it too)."""
        ...

    async def approval_copies(self, approval_id: str) -> list[tuple[ConversationKey, str]]:
        """The prompt's copies outside its conversation: where, and the message."""
        ...

    async def escalate_approval(
        self, approval_id: str, *, until: datetime
    ) -> ApprovalRecord | None:
        """Pass a pending approval on to its ``escalate_to`` (once), waiting ``until``;
        None when it is decided or has nobody to pass it on to."""
        ...

    async def due_approvals(self) -> list[str]:
        """Pending approvals whose time is up."""
        ...

    async def grants(self, conversation_id: str, user: str) -> frozenset[str]:
        """Tools this person allowed in this conversation ("Allow in this conversation"
        covers the calls of whoever pressed it)."""
        ...


class AccessStore(Protocol):
    """Who may talk to the agent: pairing, revocation, and what a person owns."""

    async def is_paired(self, user: str) -> bool:
        """True when an admin let this user in and nobody revoked them since."""
        ...

    async def request_pairing(
        self,
        *,
        platform: str,
        user: str,
        conversation_id: str,
        code: str,
        expires_at: datetime,
        max_pending: int,
    ) -> tuple[PairingOutcome, PairingRequest | None]:
        """A new code for a stranger, the one still pending, or none (too many pending)."""
        ...

    async def approve_pairing(self, code: str, *, actor: str) -> PairingRequest:
        """Let the code's user in (audited); raises ``PairingRefused``."""
        ...

    async def revoke_user(self, user: str, *, actor: str) -> bool:
        """Shut a paired user out (audited); False when they were not paired."""
        ...

    async def pairing_listing(self) -> tuple[list[PairingRequest], list[PairedUser]]:
        """Pending requests and paired users."""
        ...

    async def latest_revocation(self) -> datetime | None:
        """When anyone was last revoked (None: never)."""
        ...

    async def revoked_since(self, since: datetime | None) -> list[str]:
        """Users revoked after ``since`` (all revoked users when None)."""
        ...

    async def owned_work(self, users: Sequence[str] | None) -> list[OwnedWork]:
        """Pending approvals and active schedules of ``users`` (everyone's when None)."""
        ...

    async def pause_for_access(self, work: OwnedWork, *, note: str) -> int | None:
        """Pause a schedule whose owner lost access, with a note; the note's id, or None
        when it was not active any more."""
        ...
