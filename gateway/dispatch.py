"""The dispatcher: every inbound event goes to the ledger first, then to its lane."""

from __future__ import annotations

import structlog

from adapters.web import WebHub
from agent_core.events import InboundMessage
from agent_core.faults import FaultPoints
from agent_core.records import Accepted
from agent_core.storage.store import Store
from gateway.metrics import Metrics
from gateway.supervisor import Supervisor

log = structlog.get_logger("chatgate.dispatch")


class Dispatcher:
    """Ledger, dedupe, then hand the conversation to the supervisor."""

    def __init__(
        self,
        store: Store,
        supervisor: Supervisor,
        *,
        metrics: Metrics,
        hub: WebHub,
        faults: FaultPoints | None = None,
    ) -> None:
        self._store = store
        self._supervisor = supervisor
        self._metrics = metrics
        self._hub = hub
        self._faults = faults or FaultPoints()

    async def accept(self, event: InboundMessage) -> Accepted:
        """Store the event durably (a duplicate is acknowledged and dropped) and wake its lane.

        When this returns, the message is safe: the turn runs now, or after a restart.
        """
        accepted = await self._store.accept_inbound(event)
        outcome = "duplicate" if accepted.duplicate else "accepted"
        self._metrics.inbound.labels(event.platform, outcome).inc()
        log.info(
            "inbound",
            platform=event.platform,
            event_id=event.platform_event_id,
            conversation_id=accepted.conversation_id,
            turn_id=accepted.turn_id,
            outcome=outcome,
        )
        if not accepted.duplicate:
            self._faults.hit("after_accept")
            self._hub.publish(event.conversation)
            self._supervisor.submit(accepted.conversation_id)
        return accepted

    def reject(self, platform: str) -> None:
        """Count an inbound request that was refused before reaching the ledger."""
        self._metrics.inbound.labels(platform, "rejected").inc()
