"""The store's reads and writes about people: what the agent remembers of them (and its
upkeep), and who may talk to it (pairing, revocation, what a person owns). One façade with
:class:`~agent_core.storage.store.Store`, which inherits them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from agent_core.events import utcnow
from agent_core.journaled import Spend
from agent_core.records import (
    MemoryRecord,
    MemoryScope,
    OwnedWork,
    PairedUser,
    PairingOutcome,
    PairingRequest,
)
from agent_core.storage import access as access_sql
from agent_core.storage import memory as memory_sql
from agent_core.storage import owners as owner_sql
from agent_core.storage import upkeep
from agent_core.storage.database import Database


class PeopleRows:
    """Memory and access, over :attr:`database`."""

    database: Database

    # -- memory and its upkeep (see ``agent_core.storage.upkeep``) -------------------------

    async def remember(
        self,
        *,
        user: str,
        conversation_id: str,
        scope: MemoryScope,
        fact: str,
        about: str | None,
        source: str,
        turn_id: int | None = None,
    ) -> tuple[int, int]:
        """Store a fact (superseding the person's older fact about the same thing);
        return its id and how many facts it superseded. (Drawn from turn ``turn_id``
        after its message was deleted: stored forgotten.)"""
        return await self.database.write(
            memory_sql.remember,
            user=user,
            conversation_id=conversation_id,
            scope=scope,
            fact=fact,
            about=about,
            source=source,
            now=utcnow(),
            turn_id=turn_id,
        )

    async def recall(
        self, *, user: str, conversation_id: str, query: str, limit: int = 8
    ) -> list[MemoryRecord]:
        """The live facts matching ``query`` that this person may see here, best first."""
        return await self.database.read(
            memory_sql.recall,
            user=user,
            conversation_id=conversation_id,
            query=query,
            now=utcnow(),
            limit=limit,
        )

    async def forget(
        self, *, user: str, conversation_id: str, memory_id: int, admin: bool = False
    ) -> bool:
        """Forget a fact this person may forget (see ``memory.forget``); False when there is
        none by that id."""
        return await self.database.write(
            memory_sql.forget,
            user=user,
            conversation_id=conversation_id,
            memory_id=memory_id,
            admin=admin,
            now=utcnow(),
        )

    async def finish_extraction(
        self,
        job_id: int,
        *,
        owner: str,
        turn_id: int,
        facts: Sequence[tuple[str, str | None]],
        spend: Spend,
    ) -> int | None:
        """Close an extract job with its facts and spend, if it is still ours (else None)."""
        return await self.database.write(
            upkeep.finish_extraction,
            job_id,
            owner=owner,
            turn_id=turn_id,
            facts=facts,
            spend=spend,
            now=utcnow(),
        )

    async def plan_maintenance(self, *, slot: datetime) -> list[int]:
        """Claim a maintenance slot and queue its per-person jobs (empty: not ours)."""
        return await self.database.write(upkeep.plan_maintenance, slot=slot, now=utcnow())

    async def unreviewed_facts(
        self, user: str, *, after: int = 0, limit: int
    ) -> list[MemoryRecord]:
        """A person's live facts maintenance has not looked at, oldest first, after an id."""
        return await self.database.read(upkeep.unreviewed, user, after=after, limit=limit)

    async def similar_older_facts(
        self, user: str, newer: MemoryRecord, *, limit: int
    ) -> list[MemoryRecord]:
        """The person's live facts older than ``newer`` sharing words with it."""
        return await self.database.read(upkeep.similar_older, user, newer, limit=limit)

    async def review_fact(
        self, user: str, fact: MemoryRecord, *, obsolete: Sequence[int] | None, spend: Spend | None
    ) -> int:
        """Let ``fact`` supersede the ``obsolete`` older facts and mark it reviewed (None:
        leave it for the next review), and count the model call's spend, in one
        transaction; returns how many it superseded."""

        return await self.database.write(
            upkeep.review, user, fact.id, obsolete=obsolete, spend=spend, now=utcnow()
        )

    # -- access ----------------------------------------------------------------------------

    async def is_paired(self, user: str) -> bool:
        """True when an admin let this user in and nobody revoked them since."""
        return await self.database.read(access_sql.is_paired, user)

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
        return await self.database.write(
            access_sql.request_code,
            platform=platform,
            user=user,
            conversation_id=conversation_id,
            code=code,
            expires_at=expires_at,
            max_pending=max_pending,
        )

    async def approve_pairing(self, code: str, *, actor: str) -> PairingRequest:
        """Let the code's user in (audited); raises ``PairingRefused``."""
        return await self.database.write(access_sql.approve, code, actor=actor)

    async def revoke_user(self, user: str, *, actor: str) -> bool:
        """Shut a paired user out (audited); False when they were not paired."""
        return await self.database.write(access_sql.revoke, user, actor=actor)

    async def pairing_listing(self) -> tuple[list[PairingRequest], list[PairedUser]]:
        """Pending requests and paired users."""
        return await self.database.read(access_sql.listing)

    async def latest_revocation(self) -> datetime | None:
        """When anyone was last revoked (None: never)."""
        return await self.database.read(owner_sql.latest_revocation)

    async def revoked_since(self, since: datetime | None) -> list[str]:
        """Users revoked after ``since`` (all revoked users when None)."""
        return await self.database.read(owner_sql.revoked_since, since)

    async def owned_work(self, users: Sequence[str] | None) -> list[OwnedWork]:
        """Pending approvals and active schedules of ``users`` (everyone's when None)."""
        return await self.database.read(owner_sql.owned_work, users)

    async def pause_for_access(self, work: OwnedWork, *, note: str) -> int | None:
        """Pause a schedule whose owner lost access, with a note; the note's id, or None
        when it was not active any more."""
        return await self.database.write(owner_sql.pause_schedule, work, note=note)
