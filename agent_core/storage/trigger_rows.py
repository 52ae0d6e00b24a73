"""Triggers: the transactions behind ``Store``'s trigger methods (``agent_core.storage.
triggers`` holds them), one façade with :class:`~agent_core.storage.store.Store`, which
inherits :class:`TriggerRows`."""

from __future__ import annotations

from collections.abc import Callable

from agent_core.events import utcnow
from agent_core.records import Fired, FireRecord, TriggerRecord, TriggerStatus
from agent_core.storage import triggers as trigger_sql
from agent_core.storage.database import Database


class TriggerRows:
    """Triggers, their fires and receipts, over :attr:`database`."""

    database: Database

    async def create_trigger(
        self, conversation_id: str, *, prompt: str, per_hour: int, created_by: str
    ) -> tuple[TriggerRecord, str]:
        """Store a trigger; returns it and its secret."""
        return await self.database.write(
            trigger_sql.create, conversation_id=conversation_id, prompt=prompt,
            per_hour=per_hour, created_by=created_by, now=utcnow(),
        )  # fmt: skip

    async def trigger(self, trigger_id: str) -> tuple[TriggerRecord, str] | None:
        """A trigger that is not deleted, with its secret."""
        return await self.database.read(trigger_sql.load, trigger_id)

    async def trigger_exists(self, trigger_id: str) -> bool:
        """Whether the trigger is active or paused (its queued turns may run)."""
        return await self.database.read(trigger_sql.exists, trigger_id)

    async def triggers(
        self, conversation_ids: list[str] | None = None, *, fires: int = 0
    ) -> list[TriggerRecord]:
        """Triggers (of these conversations; None: all), each with its latest ``fires``."""
        return await self.database.read(trigger_sql.listing, conversation_ids, fires=fires)

    async def set_trigger_status(
        self,
        trigger_id: str,
        *,
        status: TriggerStatus,
        allowed_from: tuple[TriggerStatus, ...],
        actor: str,
    ) -> TriggerRecord | None:
        """Pause, resume or delete (compare-and-set); None when its status did not allow it."""
        return await self.database.write(
            trigger_sql.set_status, trigger_id, status=status, allowed_from=allowed_from,
            actor=actor, now=utcnow(),
        )  # fmt: skip

    async def fire_trigger(
        self,
        trigger_id: str,
        *,
        key: str | None,
        source: str,
        size: int,
        prompt: Callable[[TriggerRecord], str],
        user: str,
    ) -> Fired:
        """Queue the trigger's turn, or find the fire made with the same ``key``."""
        return await self.database.write(
            trigger_sql.fire, trigger_id, key=key, source=source, size=size, prompt=prompt,
            user=user, now=utcnow(),
        )  # fmt: skip

    async def trigger_fire(self, trigger_id: str, fire_id: int) -> FireRecord | None:
        """One fire's receipt."""
        return await self.database.read(trigger_sql.one_fire, trigger_id, fire_id)
