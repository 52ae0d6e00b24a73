"""The dispatcher: every inbound event goes to the ledger first, then to its lane."""

from __future__ import annotations

import structlog

from adapters.web import WebHub
from agent_core.approvals import Approvals
from agent_core.commands import ParsedCommand, parse_command
from agent_core.errors import AlreadyDecided, ApprovalError, ApprovalNotFound
from agent_core.events import InboundMessage
from agent_core.faults import FaultPoints
from agent_core.gatekeeper import Gatekeeper
from agent_core.records import Accepted, ApprovalDecision, ApprovalRecord
from agent_core.storage.store import Store
from gateway.metrics import Metrics
from gateway.supervisor import Supervisor

log = structlog.get_logger("chatgate.dispatch")


class Dispatcher:
    """Ledger, dedupe, then hand the conversation to the supervisor; decisions too."""

    def __init__(
        self,
        store: Store,
        supervisor: Supervisor,
        *,
        approvals: Approvals,
        gate: Gatekeeper,
        metrics: Metrics,
        hub: WebHub,
        faults: FaultPoints | None = None,
    ) -> None:
        self._store = store
        self._supervisor = supervisor
        self._approvals = approvals
        self._gate = gate
        self._metrics = metrics
        self._hub = hub
        self._faults = faults or FaultPoints()

    async def accept(self, event: InboundMessage) -> Accepted:
        """Store the event durably (a duplicate is acknowledged and dropped) and act on it.

        When this returns, the message is safe: its turn runs now, or after a restart.
        ``/approve ID`` and ``/deny ID`` decide at once instead of opening a turn. Strangers
        and senders over their rate are kept (acknowledged) but open no turn.
        """
        command = parse_command(event.text)
        admission = await self._gate.admit(event)
        open_turn = admission == "allow" and command is None
        accepted = await self._store.accept_inbound(event, open_turn=open_turn)
        outcome = "duplicate" if accepted.duplicate else _OUTCOMES[admission]
        self._metrics.inbound.labels(event.platform, outcome).inc()
        log.info(
            "inbound",
            platform=event.platform,
            event_id=event.platform_event_id,
            conversation_id=accepted.conversation_id,
            turn_id=accepted.turn_id,
            outcome=outcome,
        )
        if accepted.duplicate:
            return accepted
        self._faults.hit("after_accept")
        if admission != "allow":
            await self._gate.answer(event, accepted, admission)
        elif command is not None:
            self._gate.spend(event)
            await self._command(command, event, accepted)
        else:
            self._gate.spend(event)
            self._supervisor.submit(accepted.conversation_id)
        self._hub.publish(event.conversation)
        return accepted

    async def _command(
        self, command: ParsedCommand, event: InboundMessage, accepted: Accepted
    ) -> None:
        """Text commands answered here, without the model."""
        match command.name:
            case "approve" | "deny":
                decision: ApprovalDecision = "approve" if command.name == "approve" else "deny"
                try:
                    await self.decide(command.args, decision=decision, user=event.user)
                except ApprovalError as exc:
                    await self._gate.tell(event, accepted, _refusal(exc))
            case "help":
                await self._gate.tell(event, accepted, HELP)
            case "new":
                await self._store.start_fresh(accepted.conversation_id, FRESH)
            case "usage":
                used = await self._store.usage(accepted.conversation_id)
                await self._gate.tell(
                    event,
                    accepted,
                    f"This conversation so far: {used.turns} turns, {used.model_calls} model "
                    f"calls, {used.prompt_tokens} prompt and {used.completion_tokens} "
                    "completion tokens.",
                )
            case _:
                await self._gate.tell(
                    event, accepted, f"/{command.name} is not available in this version yet."
                )

    async def decide(
        self, approval_id: str, *, decision: ApprovalDecision, user: str
    ) -> ApprovalRecord:
        """Decide an approval (first answer wins) and wake the turn that waits on it."""
        decided = await self._approvals.decide(approval_id, decision=decision, user=user)
        self._metrics.approval_ended(decided.status)
        self._supervisor.submit(decided.conversation_id)
        self._hub.publish(decided.conversation)
        return decided

    async def expire_approvals(self) -> None:
        """Expire approvals nobody decided in time and wake their turns."""
        for approval in await self._approvals.expire_due():
            self._metrics.approval_ended("expired")
            self._supervisor.submit(approval.conversation_id)
            self._hub.publish(approval.conversation)

    def reject(self, platform: str) -> None:
        """Count an inbound request that was refused before reaching the ledger."""
        self._metrics.inbound.labels(platform, "rejected").inc()


HELP = """Commands:
/help: this list
/new: start afresh (earlier messages stay here but are no longer sent to the model)
/usage: turns, model calls and tokens in this conversation
/approve ID, /deny ID: decide a pending approval (or press its buttons)"""
FRESH = "Started afresh: earlier messages stay here but are no longer sent to the model."

_OUTCOMES = {"allow": "accepted", "pair": "pairing", "refuse": "refused", "limited": "limited"}


def _refusal(error: ApprovalError) -> str:
    approval_id = error.args[0] if error.args else "?"
    if isinstance(error, ApprovalNotFound):
        return f"There is no approval {approval_id}."
    if isinstance(error, AlreadyDecided):
        return f"{approval_id} was already decided."
    return f"You may not decide {approval_id}: ask the person who asked, or an admin."
