"""Where an approval prompt is shown (a policy rule's ``route``), and passing it on.

``here``: in the conversation, as always. ``approvers``: in a DM to each approver the rule
names as a person, with where it was asked; the conversation sees "waiting for approval by
...", and that message is the one a decision edits there. ``both``: the prompt in the
conversation and the DMs. Each DM copy is stored, so a decision made anywhere edits every
copy. An approver on another platform than the conversation's is not reached by DM (a
conversation's platform is where its people are); when no DM reaches anyone, the prompt
shows in the conversation.

``escalate_to``: when nobody decided by the timeout, the prompt goes to those people's DMs
(once), they join its approvers, and it waits as long again.
"""

from __future__ import annotations

import dataclasses

import structlog

from agent_core import questions
from agent_core.delivery import Outbound
from agent_core.events import ApprovalPrompt, Edit, MessageRef, Reply, utcnow
from agent_core.records import ApprovalRecord
from agent_core.stores import ApprovalStore

log = structlog.get_logger("chatgate.approvals")


def people(approvers: tuple[str, ...], platform: str) -> list[str]:
    """The approvers who are people of ``platform`` (not roles, not other platforms)."""
    return [a for a in approvers if a.startswith(f"{platform}:")]


def waiting_text(approval: ApprovalRecord, reached: list[str]) -> str:
    """What the conversation sees while the approvers decide in their DMs."""
    return (
        f"Waiting for approval of {approval.tool} by {', '.join(reached)} "
        f"(asked by {approval.requested_by}; approval {approval.id})."
    )


async def show(
    outbound: Outbound, store: ApprovalStore, approval: ApprovalRecord, prompt: ApprovalPrompt
) -> str:
    """Show the prompt where its route says; the receipt of what the conversation shows
    (the prompt, or the waiting note)."""
    if approval.route == "here":
        return await outbound.send(prompt)
    reached = await send_copies(
        outbound,
        store,
        approval,
        prompt,
        people(approval.approvers, approval.conversation.platform),
    )
    if approval.route == "both" or not reached:
        return await outbound.send(prompt)
    note = Reply(
        conversation=prompt.conversation,
        text=waiting_text(approval, reached),
        reply_to=prompt.reply_to,
        idempotency_key=prompt.idempotency_key,
        resend=prompt.resend,
    )
    return await outbound.send(note)


async def send_copies(
    outbound: Outbound,
    store: ApprovalStore,
    approval: ApprovalRecord,
    prompt: ApprovalPrompt,
    to: list[str],
) -> list[str]:
    """A copy of the prompt in each person's DM (recorded, so a decision edits it); the
    people it reached. One who cannot be reached is logged and skipped."""
    reached: list[str] = []
    for person in to:
        try:
            where = await outbound.direct(person, workspace=approval.conversation.workspace)
            if where is None:
                continue
            copy = dataclasses.replace(
                prompt,
                conversation=where,
                reply_to=None,
                idempotency_key=f"{prompt.idempotency_key}:{person}",
                origin=approval.conversation,
                # Away from the conversation, "Allow in this conversation" would grant
                # the approver's own calls there: each call is decided on its own.
                always_allow=False,
            )
            receipt = await outbound.send(copy)
        except Exception as exc:
            # One approver not reached is not the prompt lost: the others, or the
            # conversation, still show it.
            log.warning(
                "approval prompt not sent to a DM",
                approval_id=approval.id,
                to=person,
                error=f"{type(exc).__name__}: {exc}",
            )
            continue
        await store.add_approval_copy(approval.id, where, message_id=receipt, sent_to=person)
        reached.append(person)
    return reached


def prompt_of(
    approval: ApprovalRecord, *, key: str, reply_to: str | None = None, resend: bool = False
) -> ApprovalPrompt:
    """The prompt of a stored approval or question, delivered under ``key`` (as an answer
    to ``reply_to``; ``resend``: an earlier attempt may have sent it)."""
    return ApprovalPrompt(
        conversation=approval.conversation,
        approval_id=approval.id,
        tool=approval.tool,
        arguments=approval.arguments if isinstance(approval.arguments, dict) else {},
        requested_by=approval.requested_by,
        reply_to=reply_to,
        idempotency_key=key,
        resend=resend,
        recovery=approval.kind == "recovery",
        always_allow=approval.always_allow,
        question=questions.asked(approval.arguments) if approval.kind == "question" else None,
    )


async def pass_on(
    outbound: Outbound, store: ApprovalStore, approval: ApprovalRecord
) -> ApprovalRecord | None:
    """Nobody decided in time: send the prompt to ``escalate_to``'s DMs, let them decide,
    and wait as long again; None when it has nobody to pass it on to (it expires)."""
    waited = (
        approval.expires_at - approval.created_at
        if approval.created_at is not None
        else approval.expires_at - utcnow()
    )
    passed = await store.escalate_approval(approval.id, until=utcnow() + waited)
    if passed is None:
        return None
    # Reached as route's approvers are: on the conversation's platform.
    to = [
        person
        for person in people(approval.escalate_to, approval.conversation.platform)
        if person not in approval.approvers
    ]
    prompt = prompt_of(passed, key=f"{approval.id}:escalated")
    reached = await send_copies(outbound, store, passed, prompt, to)
    note = (
        f"Nobody decided on {approval.tool} in time: passed on to {', '.join(reached)}."
        if reached
        else f"Nobody decided on {approval.tool} in time, and "
        f"{', '.join(to) or 'nobody it names here'} could not be reached: it still waits here."
    )
    try:
        await outbound.send(
            Reply(
                conversation=approval.conversation,
                text=note,
                idempotency_key=f"{approval.id}:escalated:note",
            )
        )
    except Exception:
        log.warning("escalation note not sent", approval_id=approval.id)
    log.info("approval passed on", approval_id=approval.id, to=reached)
    return passed


async def edit_copies(
    outbound: Outbound, store: ApprovalStore, approval: ApprovalRecord, text: str
) -> None:
    """Show the decision (``text``) on every DM copy of the prompt, its buttons gone."""
    for where, message_id in await store.approval_copies(approval.id):
        try:
            await outbound.edit(
                Edit(
                    message=MessageRef(conversation=where, message_id=message_id),
                    text=text,
                    idempotency_key=f"{approval.id}:decided:{where.channel}",
                )
            )
        except Exception:
            # The decision stands; only this copy's display is stale.
            log.exception("could not show the decision on a copy", approval_id=approval.id)
