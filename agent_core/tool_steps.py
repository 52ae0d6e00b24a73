"""One round of tool calls inside a turn: permission, approval, run, journal.

The model's n tool calls of one response take journal steps ``base + 2i`` (the approval,
when one was asked for) and ``base + 2i + 1`` (the call itself), so a resumed turn finds
every step where it left it. Per call:

- unknown tool or malformed arguments: an error result the model can correct;
- policy says deny: a denial result; allow: run; ask: an approval row, a prompt with
  buttons, and the turn waits (``Suspended``) with nothing held in memory;
- a call journaled as started but never finished (a crash in between): re-run it with the
  same idempotency key when the tool is idempotent; otherwise do not guess: ask the user
  (Retry / Skip) and wait.

Calls that may run go concurrently, bounded; results are scrubbed of secret values before
they are journaled, so the model never sees one.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal, Protocol

import structlog
from pydantic import JsonValue

from agent_core import approval_routing, questions, tracing
from agent_core.approval_text import SHOWN_LIMIT, fits
from agent_core.delivery import Outbound
from agent_core.errors import Suspended
from agent_core.events import utcnow
from agent_core.faults import FaultPoints
from agent_core.model import ToolCallRequest
from agent_core.permissions import PermissionContext, Permissions, ToolCall
from agent_core.records import ApprovalRecord, ApprovalRequest, TurnRecord
from agent_core.secrets import Secrets
from agent_core.stores import ApprovalStore, Journal
from agent_core.tools.base import InvalidArguments, Tool, ToolContext, ToolOutcome, TurnContext
from agent_core.triggers import trigger_of

log = structlog.get_logger("chatgate.tools")

Verdict = Literal["run", "denied", "expired", "skipped", "waiting", "too_long"]


class ToolRoundStore(Journal, ApprovalStore, Protocol):
    """What this module asks of the storage."""


class ToolObserver(Protocol):
    """Told about tool calls and approvals (metrics hang off this)."""

    def tool_called(self, tool: str, status: str, seconds: float | None = None) -> None:
        """A call ended with this outcome status (ok, error, denied, ...), after running
        ``seconds`` (None when it did not run)."""
        ...

    def approval_requested(self, tool: str) -> None:
        """A person was asked about a call."""
        ...


def call_seqs(base: int, index: int) -> tuple[int, int]:
    """(approval step, call step) of the index-th call of a round starting at ``base``."""
    return base + 2 * index, base + 2 * index + 1


class ToolRound:
    """Runs the tool calls of one model response."""

    def __init__(
        self,
        store: ToolRoundStore,
        *,
        outbound: Outbound,
        permissions: Permissions,
        secrets: Secrets,
        approval_ttl: timedelta,
        concurrency: int = 4,
        faults: FaultPoints | None = None,
        observer: ToolObserver | None = None,
    ) -> None:
        self._store = store
        self._outbound = outbound
        self._permissions = permissions
        self._secrets = secrets
        self._approval_ttl = approval_ttl
        self._slots = asyncio.Semaphore(concurrency)
        self._faults = faults or FaultPoints()
        self._observer = observer

    async def run(
        self,
        turn: TurnRecord,
        context: TurnContext,
        tools: Mapping[str, Tool],
        calls: Sequence[ToolCallRequest],
        *,
        base: int,
        permissions: Permissions | None = None,
    ) -> list[str]:
        """Each call's result as the model will read it; raises ``Suspended`` when a call
        waits for a person (after running every call that may run now). ``permissions``:
        the turn's profile's rules, in place of the round's own."""
        rules = permissions or self._permissions
        results: list[str | None] = [None] * len(calls)
        runnable: list[tuple[int, Tool, dict[str, Any], int, ApprovalRecord | None]] = []
        waiting = False
        granted: frozenset[str] | None = None

        async def grants() -> frozenset[str]:
            # Read once per round, and only if some call needs a permission decision.
            nonlocal granted
            if granted is None:
                # A trigger's turn has no standing allowance: its input came from outside.
                granted = (
                    frozenset()
                    if trigger_of(turn.user) is not None
                    else await self._store.grants(turn.conversation_id, turn.user)
                )
            return granted

        for index, call in enumerate(calls):
            approval_seq, call_seq = call_seqs(base, index)
            step = turn.step(call_seq)
            if step is not None and step.status == "done" and isinstance(step.output, dict):
                results[index] = str(step.output.get("content", ""))
                done = str(step.output.get("status", ""))
                tracing.mark(
                    "chatgate.tool",
                    tracing.tool_attributes(call, call_seq, outcome=done, replayed=True),
                )
                continue
            tool = tools.get(call.name)
            if tool is None:
                available = ", ".join(sorted(tools)) or "none"
                outcome = ToolOutcome(
                    status="error", output=f"unknown tool {call.name!r}; available: {available}"
                )
                results[index] = await self._record(turn, call_seq, call, outcome)
                continue
            try:
                arguments = tool.validate(call.arguments)
            except InvalidArguments as exc:
                outcome = ToolOutcome(status="invalid_arguments", output=str(exc))
                results[index] = await self._record(turn, call_seq, call, outcome)
                continue
            question: ApprovalRecord | None = None
            if tool.asks_person:
                wrong = questions.problem(_json(arguments))
                if wrong is not None and turn.step(approval_seq) is None:
                    outcome = ToolOutcome(status="invalid_arguments", output=wrong)
                    results[index] = await self._record(turn, call_seq, call, outcome)
                    continue
                verdict, question = await self._ask(turn, approval_seq, call, arguments)
            elif step is not None and not tool.is_idempotent(arguments):
                verdict = await self._recover(turn, call_seq, call, arguments, rules)
            else:
                verdict = await self._permit(turn, approval_seq, call, arguments, grants, rules)
            if verdict == "run":
                runnable.append((index, tool, arguments, call_seq, question))
            elif verdict == "waiting":
                waiting = True
                tracing.mark(
                    "chatgate.tool", tracing.tool_attributes(call, call_seq, outcome="waiting")
                )
            else:
                results[index] = await self._record(turn, call_seq, call, _refusal(verdict))
        outcomes = await asyncio.gather(
            *(
                self._execute(turn, context, calls[index], tool, arguments, seq, question)
                for index, tool, arguments, seq, question in runnable
            )
        )
        for (index, *_rest), content in zip(runnable, outcomes, strict=True):
            results[index] = content
        if waiting:
            raise Suspended(turn.id)
        return [r if r is not None else "" for r in results]

    async def _permit(
        self,
        turn: TurnRecord,
        seq: int,
        call: ToolCallRequest,
        arguments: dict[str, Any],
        grants: Callable[[], Awaitable[frozenset[str]]],
        rules: Permissions,
    ) -> Verdict:
        if turn.step(seq) is None:
            request = ToolCall(name=call.name, arguments=arguments)
            context = PermissionContext(
                user=turn.user,
                conversation_id=turn.conversation_id,
                grants=await grants(),
                external=trigger_of(turn.user) is not None,
            )
            decision = rules.decide(request, context)
            if decision != "ask":
                return "run" if decision == "allow" else "denied"
            if not fits(_json(arguments)):
                return "too_long"  # nobody could see the whole call
            asked = ApprovalRequest(
                kind="tool",
                tool=call.name,
                arguments=_json(arguments),
                approvers=_approvers(turn, rules, request),
                expires_at=utcnow() + (rules.timeout(request) or self._approval_ttl),
                prompt_text=f"Approve {call.name}? {json.dumps(arguments, ensure_ascii=False)}",
                call_id=call.id,
                self_approve=rules.self_approve(request),
                # A trigger's turn: a grant would cover no one's calls but the presser's.
                always_allow=rules.always_allow(request) and trigger_of(turn.user) is None,
                route=rules.route(request),
                escalate_to=rules.escalate_to(request),
            )
            approval = await self._store.request_approval(turn, seq, asked)
            self._faults.hit("after_approval_request")
            return await self._await_decision(turn, approval, seq, fresh=True)
        existing = await self._store.approval_for_step(turn.id, seq)
        if existing is None:  # the step exists only with its approval; never without
            return "denied"
        return await self._await_decision(turn, existing, seq, fresh=False)

    async def _ask(
        self, turn: TurnRecord, seq: int, call: ToolCallRequest, arguments: dict[str, Any]
    ) -> tuple[Verdict, ApprovalRecord | None]:
        """A question for a person (``ask_user``): ask once, wait, and once it is over
        (answered, expired, cancelled) let the call run with it."""
        approval = await self._store.approval_for_step(turn.id, seq)
        fresh = approval is None
        if approval is None:
            question = questions.asked(_json(arguments))
            asked = ApprovalRequest(
                kind="question",
                tool=call.name,
                arguments=_json(arguments),
                approvers=questions.askee(turn.user),
                expires_at=utcnow() + self._approval_ttl,
                prompt_text=f"Question: {question.text}",
                call_id=call.id,
                always_allow=False,
            )
            approval = await self._store.request_approval(turn, seq, asked)
            self._faults.hit("after_approval_request")
        if await self._await_decision(turn, approval, seq, fresh=fresh) == "waiting":
            return "waiting", None
        return "run", await self._store.approval(approval.id)

    async def _recover(
        self,
        turn: TurnRecord,
        seq: int,
        call: ToolCallRequest,
        arguments: dict[str, Any],
        rules: Permissions,
    ) -> Verdict:
        """A non-idempotent call started and never finished: ask before running it again."""
        approval = await self._store.approval_for_step(turn.id, seq)
        fresh = approval is None
        if approval is None and not fits(_json(arguments)):
            log.warning("tool outcome unknown; too long to ask about", tool=call.name, seq=seq)
            await self._store.finish_step(
                turn.id, seq, kind="tool_call", status="ambiguous", output=None
            )
            return "skipped"
        if approval is None:
            log.warning("tool outcome unknown", tool=call.name, seq=seq)
            await self._store.finish_step(
                turn.id, seq, kind="tool_call", status="ambiguous", output=None
            )
            shown = json.dumps(arguments, ensure_ascii=False)
            # Running it again is running it: the same people may decide.
            request = ToolCall(name=call.name, arguments=arguments)
            asked = ApprovalRequest(
                kind="recovery",
                tool=call.name,
                arguments=_json(arguments),
                approvers=_approvers(turn, rules, request),
                self_approve=rules.self_approve(request),
                expires_at=utcnow() + self._approval_ttl,
                prompt_text=(
                    f"chatgate restarted while running {call.name} {shown}; it may or may not "
                    "have happened. Run it again?"
                ),
                call_id=call.id,
            )
            approval = await self._store.request_approval(turn, seq, asked)
        verdict = await self._await_decision(turn, approval, None, fresh=fresh)
        return "skipped" if verdict in ("denied", "expired") else verdict

    async def _await_decision(
        self, turn: TurnRecord, approval: ApprovalRecord, seq: int | None, *, fresh: bool
    ) -> Verdict:
        """``fresh``: the approval was asked for just now, so its prompt cannot have been
        sent yet; one found in the store may have been, by an attempt that died before
        storing the receipt."""
        if approval.status == "pending":
            if approval.prompt_message_id is None:
                waiting = await self._send_prompt(turn, approval, resend=not fresh)
            else:
                waiting = await self._store.suspend_turn(turn.id, approval.id)
            if waiting:
                return "waiting"
            # Decided while the prompt was on its way: go on with the decision now.
            decided = await self._store.approval(approval.id)
            assert decided is not None
            approval = decided
        if seq is not None:
            step = turn.step(seq)
            if step is None or step.status != "done":
                output: dict[str, JsonValue] = {
                    "decision": approval.status,
                    "decided_by": approval.decided_by,
                }
                await self._store.finish_step(
                    turn.id, seq, kind="approval", status="done", output=output
                )
        if approval.approved:
            return "run"
        return "expired" if approval.status == "expired" else "denied"

    async def _send_prompt(
        self, turn: TurnRecord, approval: ApprovalRecord, *, resend: bool
    ) -> bool:
        """Send the prompt; True when the turn now waits, False when it was decided
        already (a person can press as soon as the prompt shows)."""
        if self._observer:
            self._observer.approval_requested(approval.tool)
        prompt = approval_routing.prompt_of(
            approval,
            key=f"{turn.id}:{approval.seq}:prompt",
            reply_to=turn.reply_to,
            resend=resend,
        )
        receipt = await approval_routing.show(self._outbound, self._store, approval, prompt)
        self._faults.hit("after_prompt_send")
        waiting = await self._store.approval_prompt_sent(
            approval.id, turn_id=turn.id, receipt=receipt
        )
        self._faults.hit("after_approval_prompt")
        return waiting

    async def _execute(
        self,
        turn: TurnRecord,
        context: TurnContext,
        call: ToolCallRequest,
        tool: Tool,
        arguments: dict[str, Any],
        seq: int,
        question: ApprovalRecord | None = None,
    ) -> str:
        async with self._slots:
            await self._store.begin_step(
                turn.id,
                seq,
                kind="tool_call",
                input={"call_id": call.id, "name": call.name, "arguments": _json(arguments)},
            )
            self._faults.hit("after_tool_intent")
            started = time.monotonic()
            with tracing.span("chatgate.tool", tracing.tool_attributes(call, seq)) as span:
                outcome = await tool.run(
                    arguments,
                    ToolContext(
                        turn=context,
                        call_id=call.id,
                        idempotency_key=f"{turn.id}:{seq}",
                        rerun=turn.step(seq) is not None,
                        question=question,
                    ),
                )
                span.set({"chatgate.tool.outcome": outcome.status})
                if outcome.status != "ok":
                    span.fail(outcome.status)
            seconds = time.monotonic() - started
            self._faults.hit("after_tool_run")
            return await self._record(turn, seq, call, outcome, seconds=seconds)

    async def _record(
        self,
        turn: TurnRecord,
        seq: int,
        call: ToolCallRequest,
        outcome: ToolOutcome,
        *,
        seconds: float | None = None,
    ) -> str:
        if self._observer:
            self._observer.tool_called(call.name, outcome.status, seconds)
        if seconds is None:  # it did not run, so no span timed it
            tracing.mark(
                "chatgate.tool", tracing.tool_attributes(call, seq, outcome=outcome.status)
            )
        content = self._secrets.scrub(outcome.for_model())
        await self._store.finish_step(
            turn.id,
            seq,
            kind="tool_call",
            status="done",
            output={
                "status": outcome.status,
                "content": content,
                "call_id": call.id,
                "tool": call.name,
            },
        )
        return content


def _refusal(verdict: Verdict) -> ToolOutcome:
    reasons = {
        "denied": "not run: permission denied (by policy or by the person asked)",
        "expired": "not run: nobody approved it before the approval expired",
        "skipped": "not run again: its outcome after a restart is unknown and the user "
        "chose to skip it",
        "too_long": f"not run: its arguments are too long to show whole in an approval "
        f"prompt (at most {SHOWN_LIMIT} characters, long runs of blanks folded); split the "
        "work into shorter calls",
    }
    return ToolOutcome(status="denied", output=reasons[verdict])


def _json(arguments: Mapping[str, Any]) -> JsonValue:
    converted: JsonValue = json.loads(json.dumps(arguments, default=str))
    return converted


def _approvers(turn: TurnRecord, rules: Permissions, call: ToolCall) -> tuple[str, ...]:
    """Who besides the requester and the admins may decide: the approvers the rules name;
    for a trigger's turn, which no person requested, the people of its conversation when
    the rules name nobody."""
    named = rules.approvers(call)
    if not named and trigger_of(turn.user) is not None:
        return ("role:member",)
    return named
