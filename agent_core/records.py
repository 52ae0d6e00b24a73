"""Plain records the storage layer returns: no SQLAlchemy objects leave ``storage``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, NamedTuple, TypeAlias

from pydantic import JsonValue

from agent_core.events import ConversationKey, Rating

# A schedule run that starts later than this after it was planned to is marked late.
LATE_AFTER = timedelta(minutes=1)

Role: TypeAlias = Literal["user", "assistant", "approval", "system"]
TurnStatus: TypeAlias = Literal["pending", "running", "waiting", "done", "failed"]
ApprovalKind: TypeAlias = Literal["tool", "recovery", "question"]
ApprovalStatus: TypeAlias = Literal[
    "pending", "approved", "allowed", "denied", "expired", "cancelled", "answered"
]
ApprovalRoute: TypeAlias = Literal["here", "approvers", "both"]
ApprovalDecision: TypeAlias = Literal["approve", "allow_conversation", "deny"]
StepKind: TypeAlias = Literal["model_call", "tool_call", "approval", "reply", "steer"]
BusyMode: TypeAlias = Literal["queue", "steer", "interrupt", "collect"]
TurnState: TypeAlias = Literal["received", "working", "waiting", "done", "failed"]
"""What a turn is doing, as shown on the message that opened it (``Outbound.mark``):
``received`` is a message waiting behind the conversation's running turn."""
StepStatus: TypeAlias = Literal["started", "done", "failed", "ambiguous"]
ScheduleStatus: TypeAlias = Literal["active", "paused", "done", "deleted"]
MissedPolicy: TypeAlias = Literal["skip", "run_once", "catch_up"]
# ``catch_up`` (what people and the model say) -> the policy as stored.
CATCH_UP: dict[str, MissedPolicy] = {"skip": "skip", "latest": "run_once", "all": "catch_up"}
JobStatus: TypeAlias = Literal["queued", "running", "waiting", "done", "failed"]
JobKind: TypeAlias = Literal["turn", "message", "extract", "maintain"]
# What a schedule's run does: a turn, or post its text as it is (a reminder).
RunAction: TypeAlias = Literal["agent", "message"]
# Whether a schedule's run posts its answer always, or only when its model marks it notable.
Notify: TypeAlias = Literal["always", "if_notable"]
TriggerStatus: TypeAlias = Literal["active", "paused", "deleted"]
PairingOutcome: TypeAlias = Literal["new", "pending", "throttled"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationRecord:
    """A conversation and when it last saw activity."""

    id: str
    key: ConversationKey
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRecord:
    """A question to a person: may this tool call run (or re-run after a crash)? Or, for
    ``kind="question"``, what the model asked with ``ask_user``."""

    id: str
    turn_id: int
    seq: int
    conversation_id: str
    conversation: ConversationKey
    kind: ApprovalKind
    tool: str
    arguments: JsonValue
    requested_by: str
    approvers: tuple[str, ...]
    status: ApprovalStatus
    decided_by: str | None
    expires_at: datetime
    prompt_message_id: str | None = None
    created_at: datetime | None = None
    decided_at: datetime | None = None
    # False: the requester may not approve it (a ``self_approve = false`` policy rule).
    self_approve: bool = True
    # Whether "Allow in this conversation" is offered (a policy rule's ``always_allow``;
    # never for a trigger's turn, whose grant would be no one's).
    always_allow: bool = True
    # Set by a decision: the jobs of a queued turn that are due again because of it.
    requeued_jobs: tuple[int, ...] = ()
    # A question's answer, and who pressed "Other" (their next message answers it).
    answer: str | None = None
    answering: str | None = None
    # Where the prompt shows (a policy rule's ``route``), and who gets it when its time is
    # up (a rule's ``escalate_to``; empty once passed on, or when the rule names nobody).
    route: ApprovalRoute = "here"
    escalate_to: tuple[str, ...] = ()

    @property
    def approved(self) -> bool:
        """True when the call may run."""
        return self.status in ("approved", "allowed")


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequest:
    """What a turn asks a person, before it becomes an :class:`ApprovalRecord`."""

    kind: ApprovalKind
    tool: str
    arguments: JsonValue
    approvers: tuple[str, ...]
    expires_at: datetime
    prompt_text: str
    call_id: str
    self_approve: bool = True
    always_allow: bool = True
    route: ApprovalRoute = "here"
    escalate_to: tuple[str, ...] = ()


class HistoryLine(NamedTuple):
    """What a model call sees of one past message: who said it, what, in which turn (a
    row read as it comes, for the up to hundreds a prompt may take)."""

    role: Role
    text: str
    turn_id: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageRecord:
    """One item of a conversation's history, in the order it happened."""

    id: int
    conversation_id: str
    role: Role
    text: str
    author: str | None
    turn_id: int | None
    platform_message_id: str | None
    created_at: datetime
    approval: ApprovalRecord | None = None
    payload: JsonValue = None
    # The names of the files that came with it.
    files: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord:
    """One journaled step of a turn (see ``agent_core.loop`` for the step kinds)."""

    turn_id: int
    seq: int
    kind: StepKind
    status: StepStatus
    input: JsonValue
    output: JsonValue
    idempotency_key: str


@dataclass(frozen=True, slots=True)
class FinishedStep:
    """A step's outcome not yet journaled, to be written with the next journal entry."""

    seq: int
    kind: StepKind
    status: StepStatus
    output: JsonValue


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnRecord:
    """A turn: the message that triggered it and the steps journaled so far."""

    id: int
    conversation_id: str
    conversation: ConversationKey
    status: TurnStatus
    attempts: int
    user: str
    trigger_text: str
    reply_to: str | None
    created_at: datetime
    steps: tuple[StepRecord, ...] = ()
    error: str | None = None
    # Run by a job (a schedule's run, ``bg``) rather than opened by a person's message.
    queued: bool = False
    # A schedule run with ``notify = "if_notable"``: its answer is posted only when its
    # model marks it worth posting (``agent_core.notable``).
    quiet: bool = False
    # Attempts before this one that ended, in a row, at the same place in the journal
    # (the process died there, or the turn raised): what the poison guard counts.
    stalls: int = 0
    # The platform message its reply is being shown in as it is written, once one is.
    live_message: str | None = None
    # Who asked it to stop (``stop``), when someone did.
    stop_requested_by: str | None = None
    # Its conversation's busy mode (``/busy``), None for the setting's.
    busy_mode: BusyMode | None = None
    # The state shown on its message (``Outbound.mark``), so the next mark replaces it,
    # also after a restart.
    marked: TurnState | None = None
    # Files came with its message (``agent_core.files``).
    has_files: bool = False
    # The profile and the model an admin chose for its conversation (``agent_core.profiles``).
    pinned_profile: str | None = None
    pinned_model: str | None = None

    def step(self, seq: int) -> StepRecord | None:
        """The journaled step with this sequence number, if any."""
        for step in self.steps:
            if step.seq == seq:
                return step
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class StopRequest:
    """``stop`` said to a conversation: its current turn, what it was doing, and who asked
    first."""

    turn_id: int
    status: TurnStatus
    by: str
    # The approvals the turn waits for (to cancel: it stops once they are out of its way).
    approvals: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Accepted:
    """What the ingress ledger made of an inbound event."""

    conversation_id: str
    message_id: int
    turn_id: int
    duplicate: bool
    # The conversation's own busy mode (``/busy``), read with it; None for the setting's.
    busy_mode: BusyMode | None = None
    # A lane held the conversation's lease when the message came: its turn waits.
    behind: bool = False
    # The feedback row this message answered ("what went wrong?"): no turn was opened.
    answered: int | None = None
    # The question (``ask_user``) this message answered after its sender pressed "Other":
    # no turn was opened; the asking turn resumes.
    question: ApprovalRecord | None = None
    # The profile an admin chose for the conversation (``/profile``), if any.
    pinned_profile: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RatedMessage:
    """One of the agent's messages a person may rate: which turn sent it, and where."""

    message_id: int
    turn_id: int
    conversation_id: str
    conversation: ConversationKey
    platform_message_id: str | None
    # When it was written (an old reply's 👎 asks nothing).
    sent_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RatingChange:
    """What a 👍/👎 (or taking one off) did to a person's rating of a turn."""

    feedback_id: int | None
    rating: Rating | None
    previous: Rating | None
    # When "what went wrong?" was posted for this rating (None: not yet).
    asked_at: datetime | None = None

    @property
    def changed(self) -> bool:
        """Whether the rating is not what it was."""
        return self.rating != self.previous


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """What a conversation has spent so far."""

    turns: int
    model_calls: int
    prompt_tokens: int
    completion_tokens: int


MemoryScope: TypeAlias = Literal["user", "conversation"]
AttachmentStatus: TypeAlias = Literal["pending", "stored", "refused"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AttachmentRecord:
    """A file that came with a message: what the platform said of it (name, type, size,
    where to fetch it), and once fetched (``stored``), its content's hash, the type
    sniffed from it and its size; or why it was not (``refused``: too large, unreadable)."""

    id: int
    message_id: int
    conversation_id: str
    # The turn its message opened (another than the one reading it: a message taken in).
    turn_id: int | None
    position: int
    name: str
    declared_type: str | None
    declared_size: int | None
    url: str | None
    platform_file_id: str | None
    status: AttachmentStatus
    sha256: str | None = None
    content_type: str | None = None
    size: int | None = None
    error: str | None = None
    transcript: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryRecord:
    """A remembered fact: whose (the person's, or the conversation's), about what, where
    it came from and when."""

    id: int
    scope: MemoryScope
    about: str | None
    fact: str
    source: str
    created_at: datetime


PairingStatus: TypeAlias = Literal["pending", "approved", "expired", "refused"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PairingRequest:
    """A stranger asked to talk to the agent; an admin approves the code."""

    code: str
    platform: str
    user: str
    conversation_id: str
    status: PairingStatus
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class PairedUser:
    """Someone an admin let in (until revoked)."""

    user: str
    approved_by: str
    approved_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class NewSchedule:
    """A schedule about to be stored (``agent_core.scheduling.recurrence`` reads its
    recurrence)."""

    conversation_id: str
    created_by: str
    prompt: str
    kind: str
    spec: str
    timezone: str
    anchor: datetime | None
    missed: MissedPolicy
    next_run_at: datetime
    targets: tuple[str, ...]
    creation_key: str | None = None
    # At most this many live schedules in the conversation (None: no limit).
    limit: int | None = None
    # Each run starts at a moment in [slot, slot + jitter_seconds], spread evenly.
    jitter_seconds: int = 0
    action: RunAction = "agent"
    notify: Notify = "always"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """One delivery of a schedule run (or a ``bg`` turn): the job's outcome."""

    job_id: int
    conversation_id: str
    status: JobStatus
    scheduled_for: datetime | None
    created_at: datetime
    finished_at: datetime | None
    receipt: str | None
    error: str | None
    attempts: int
    # When the run was planned to start (its slot, or a moment in its jitter window) and
    # when its first turn started; None for a ``bg`` turn or a run not started yet.
    due_at: datetime | None = None
    started_at: datetime | None = None
    # Its turn was quiet (``notify = "if_notable"``): done without a receipt is "nothing
    # to report".
    quiet: bool = False

    @property
    def nothing_to_report(self) -> bool:
        """A quiet run that finished and posted nothing (its model found nothing notable)."""
        return self.quiet and self.status == "done" and self.receipt is None

    @property
    def lag(self) -> float | None:
        """Seconds between the planned start and the start (None until it started)."""
        planned = self.due_at or self.scheduled_for
        if planned is None or self.started_at is None:
            return None
        return max(0.0, (self.started_at - planned).total_seconds())

    @property
    def late(self) -> bool:
        """Started more than ``LATE_AFTER`` after it was planned to."""
        lag = self.lag
        return lag is not None and lag > LATE_AFTER.total_seconds()


class StartedRun(NamedTuple):
    """A schedule run that started: its id, when, and its lag in seconds."""

    id: int
    started_at: datetime
    lag: float


@dataclass(frozen=True, slots=True, kw_only=True)
class LagReport:
    """How schedule runs started lately (``chatgate doctor``): runs started in the window,
    how many of them late, the worst lag in seconds; runs due over a minute ago and not
    started; active schedules whose slot passed over a minute ago unfired; each role's
    ("dispatcher", "runner") last sign of life."""

    started: int
    late: int
    worst: float | None
    waiting: int
    overdue: int
    beats: dict[str, datetime]


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleRecord:
    """A schedule as stored, with its targets and (when asked for) its latest runs."""

    id: str
    conversation_id: str
    created_by: str
    prompt: str
    kind: str
    spec: str
    timezone: str
    anchor: datetime | None
    missed: MissedPolicy
    status: ScheduleStatus
    next_run_at: datetime | None
    failures: int
    created_at: datetime
    targets: tuple[str, ...] = ()
    runs: tuple[RunRecord, ...] = ()
    jitter_seconds: int = 0
    action: RunAction = "agent"
    notify: Notify = "always"


@dataclass(frozen=True, slots=True, kw_only=True)
class DueSchedule:
    """What the dispatcher's planner sees of a due schedule."""

    id: str
    kind: str
    spec: str
    timezone: str
    anchor: datetime | None
    missed: MissedPolicy
    next_run_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRecord:
    """Queued work. ``turn``: a queued turn (a schedule run's delivery to one target, or a
    ``bg`` turn); ``extract``: pick durable facts out of a finished turn; ``maintain``: review
    one person's new facts (``user``; no turn, no conversation)."""

    id: int
    kind: JobKind
    turn_id: int | None
    conversation_id: str | None
    schedule_id: str | None
    user: str | None = None
    status: JobStatus
    attempts: int
    # The schedule run it delivers (None for ``bg`` and upkeep jobs).
    run_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOutcome:
    """What finishing a job changed: the schedule it paused, if it failed too often."""

    paused: ScheduleRecord | None = None
    note_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OwnedWork:
    """Something that acts for a person later (a pending approval of theirs, a schedule
    they made): stopped once they may no longer talk to the agent there."""

    kind: Literal["approval", "schedule"]
    id: str
    user: str
    conversation_id: str
    conversation: ConversationKey


Planner: TypeAlias = Callable[[DueSchedule], tuple[list[datetime], datetime | None]]
"""A due schedule's slots to fire now, and its next fire time (None: it is done)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TriggerRecord:
    """A trigger: a request to ``POST /api/triggers/{id}`` (or ``chatgate trigger fire``)
    queues a turn in its conversation, asking its prompt about what the request carried."""

    id: str
    conversation_id: str
    conversation: ConversationKey
    prompt: str
    per_hour: int
    status: TriggerStatus
    created_by: str
    created_at: datetime
    # Its latest fires, newest first, when asked for.
    fires: tuple[FireRecord, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class FireRecord:
    """One fire of a trigger and what became of its turn (its job's receipt)."""

    id: int
    trigger_id: str
    source: str
    bytes: int
    received_at: datetime
    job_id: int
    turn_id: int
    status: JobStatus
    receipt: str | None
    error: str | None
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Fired:
    """What a fire did: its receipt, and whether it was a repeat of an earlier request
    with the same Idempotency-Key (then nothing new was queued)."""

    fire: FireRecord
    duplicate: bool
