"""When a person loses access, what acts for them stops.

Revoking a paired user (``chatgate pairing revoke``), or dropping their allow entry and
restarting, must reach everything that would act for them later:

- their pending approvals are cancelled (the prompt says so; the turn resumes with a denial
  and ends without another model call);
- their schedules are paused, with a note in the conversation;
- every scheduled or background run checks its owner before it calls the model
  (``JobRunner``), and so does a turn that resumes after waiting (``TurnRunner``).

:class:`Revocations` does the first two from the gateway's sweeper: a full pass at start
(the configuration may have changed), then only for users revoked since it last looked,
found with one small query per pass. Every change is a compare-and-set, so several
gateways sweeping at once act once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

import structlog

from agent_core.access import MayTalk
from agent_core.approvals import Approvals
from agent_core.delivery import Outbound
from agent_core.events import ConversationKey, Reply
from agent_core.records import ApprovalRecord, OwnedWork
from agent_core.stores import AccessStore, JobStore

log = structlog.get_logger("chatgate.access")


class RevocationStore(AccessStore, JobStore, Protocol):
    """What this module asks of the storage."""


SCHEDULE_PAUSED = (
    "I paused schedule {id}: {user}, who made it, may no longer use the agent here. An admin "
    "can resume it with /jobs."
)
JOB_REFUSED = {
    "schedule": (
        "Schedule {id} did not run and is paused: {user}, who made it, may no longer use the "
        "agent here."
    ),
    "bg": "The background task of {user} did not run: they may no longer use the agent here.",
    "trigger": "A fire of trigger {id} did not run: the trigger was deleted before its turn.",
}
NO_ACCESS = "the owner may no longer use the agent here"


class Revocations:
    """Cancels and pauses what acts for people who lost access."""

    def __init__(
        self, store: RevocationStore, outbound: Outbound, *, approvals: Approvals, may_talk: MayTalk
    ) -> None:
        self._store = store
        self._outbound = outbound
        self._approvals = approvals
        self._may_talk = may_talk
        self._swept = False
        self._seen: datetime | None = None

    async def sweep(self) -> list[ApprovalRecord]:
        """One pass; returns the approvals it cancelled (their turns need waking)."""
        latest = await self._store.latest_revocation()
        if self._swept and latest == self._seen:
            return []
        users = None if not self._swept else await self._store.revoked_since(self._seen)
        cancelled = await self._stop_work_of(users)
        # Only now: a pass that failed half-way is made again, whole, by the next sweep
        # (what it did already is a compare-and-set that does not happen twice).
        self._swept, self._seen = True, latest
        return cancelled

    async def _stop_work_of(self, users: list[str] | None) -> list[ApprovalRecord]:
        allowed: dict[tuple[str, ConversationKey], bool] = {}
        cancelled: list[ApprovalRecord] = []
        for work in await self._store.owned_work(users):
            key = (work.user, work.conversation)
            if key not in allowed:
                allowed[key] = await self._may_talk(work.user, work.conversation)
            if allowed[key]:
                continue
            if work.kind == "approval":
                decided = await self._approvals.cancel(work.id)
                if decided is not None:
                    cancelled.append(decided)
            else:
                await self._pause(work)
        return cancelled

    async def _pause(self, work: OwnedWork) -> None:
        text = SCHEDULE_PAUSED.format(id=work.id, user=work.user)
        note_id = await self._store.pause_for_access(work, note=text)
        if note_id is None:
            return
        log.info("schedule paused: its owner lost access", schedule_id=work.id, user=work.user)
        await deliver_note(
            self._store, self._outbound, work.conversation, note_id, text, key=f"note:{note_id}"
        )


async def deliver_note(
    store: JobStore,
    outbound: Outbound,
    where: ConversationKey,
    note_id: int,
    text: str,
    *,
    key: str,
) -> None:
    """Send a stored system note and record its receipt (a failure is logged: the note
    stays in the history)."""
    try:
        receipt = await outbound.send(Reply(conversation=where, text=text, idempotency_key=key))
    except Exception:
        log.exception("could not deliver a note", note_id=note_id)
        return
    await store.note_sent(note_id, receipt=receipt)
