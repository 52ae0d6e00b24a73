"""The tables. Migrations in ``migrations/versions`` create exactly these; their metadata
and column types are in ``columns``."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
    true,
)

from agent_core.storage.columns import Id, UTCDateTime, metadata

conversations = Table(
    "conversations",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("platform", String(16), nullable=False),
    Column("workspace", String(255), nullable=False),
    Column("channel", String(255), nullable=False),
    # '' when the conversation is not a thread, so the unique key also covers it.
    Column("thread", String(255), nullable=False, default=""),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("lease_owner", String(128)),
    Column("lease_expires_at", UTCDateTime()),
    # `new` starts afresh: the model sees history after this message only.
    Column("history_from", Id),
    # The running summary of the history up to and including turn ``summary_turn``; the
    # model sees it instead of those turns' messages.
    Column("summary", Text),
    Column("summary_turn", Id),
    # What a message arriving while a turn runs does here (``/busy``); NULL: the setting.
    Column("busy_mode", String(16)),
    # What an admin chose here (``/profile NAME``, ``/model NAME``); None: the place's.
    Column("profile", String(64)),
    Column("model", String(255)),
    UniqueConstraint("platform", "workspace", "channel", "thread", name="uq_conversations_key"),
    Index("ix_conversations_platform_updated", "platform", "updated_at"),
    Index("ix_conversations_updated_at", "updated_at"),
)

messages = Table(
    "messages",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("conversation_id", String(32), ForeignKey("conversations.id"), nullable=False),
    Column("role", String(16), nullable=False),
    Column("text", Text, nullable=False),
    Column("author", String(255)),
    Column("turn_id", Id),
    # Set for messages the agent sends: makes a resend after a crash a no-op.
    Column("delivery_key", String(128), unique=True),
    Column("platform_message_id", String(255)),
    # For role "approval" (the prompt) and the note saying who decided it.
    Column("approval_id", String(32)),
    # Structured content some items carry (the ``jobs`` listing: schedules and buttons).
    Column("payload", JSON),
    # The message a person's message replies to or quotes: {"text", "author"}.
    Column("quote", JSON),
    # When its author deleted it on the platform: its text is gone, and so is it from
    # what the model sees.
    Column("deleted_at", UTCDateTime()),
    Column("created_at", UTCDateTime(), nullable=False),
    Index("ix_messages_conversation_id_id", "conversation_id", "id"),
    Index("ix_messages_conversation_turn", "conversation_id", "turn_id"),
    Index("ix_messages_turn_id", "turn_id"),
    # A person's messages (export and erasure), and the oldest ones (retention).
    Index("ix_messages_author", "author"),
    Index("ix_messages_created_at", "created_at"),
    # A reaction names the message it is on by the platform's id (``feedback``).
    Index("ix_messages_platform_message_id", "platform_message_id"),
)

# The files that came with messages (see ``agent_core.files``): one row per file, made
# with the message; fetched when a turn needs it (``stored``: the content is in the file
# store under ``sha256``), or refused (``error`` says why).
attachments = Table(
    "attachments",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("message_id", Id, ForeignKey("messages.id"), nullable=False),
    Column("conversation_id", String(32), ForeignKey("conversations.id"), nullable=False),
    Column("turn_id", Id),
    Column("position", Integer, nullable=False),
    Column("name", String(255), nullable=False),
    Column("declared_type", String(255)),
    Column("declared_size", BigInteger),
    Column("url", Text),
    Column("platform_file_id", String(255)),
    Column("status", String(16), nullable=False),
    Column("sha256", String(64)),
    Column("content_type", String(255)),
    Column("size", BigInteger),
    Column("error", Text),
    # What a transcription model heard in it (audio): heard once, whatever crashes after.
    Column("transcript", Text),
    Column("stored_at", UTCDateTime()),
    Index("ix_attachments_turn_id", "turn_id"),
    Index("ix_attachments_message_id", "message_id"),
    Index("ix_attachments_sha256", "sha256"),
)

ingress = Table(
    "ingress",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("platform", String(16), nullable=False),
    Column("event_id", String(255), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("conversation_id", String(32), ForeignKey("conversations.id"), nullable=False),
    Column("message_id", Id, ForeignKey("messages.id")),
    Column("turn_id", Id),
    Column("payload", Text, nullable=False),
    Column("received_at", UTCDateTime(), nullable=False),
    UniqueConstraint("platform", "event_id", name="uq_ingress_platform_event"),
    Index("ix_ingress_turn_id", "turn_id"),
)

turns = Table(
    "turns",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("conversation_id", String(32), ForeignKey("conversations.id"), nullable=False),
    Column("user_id", String(255), nullable=False),
    Column("reply_to", String(255)),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    # Attempts in a row that ended (the process died, or the turn raised) at the same place
    # in the journal, ``stalled_at``; any progress starts the count again. The poison guard
    # gives up on this, not on attempts: unrelated kills do not use a turn up.
    Column("stalls", Integer, nullable=False, default=0, server_default="0"),
    Column("stalled_at", Integer),
    Column("error", Text),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("started_at", UTCDateTime()),
    Column("finished_at", UTCDateTime()),
    # "inline": run by the conversation's lane on a gateway; "queued": by a job (a schedule
    # run or ``bg``), beside the conversation's own turns instead of in their queue.
    Column("lane", String(16), nullable=False, server_default="inline"),
    # What the model is asked when it is not a user message's text (schedules, ``bg``).
    Column("prompt", Text),
    # The platform message the reply is shown in while it is written (posted by the first
    # update): a resumed turn goes on in it, and the reply is delivered into it.
    Column("live_message", String(255)),
    # Who said ``stop`` to the turn: it ends at its next step boundary (see ``loop``).
    Column("stop_requested_by", String(255)),
    # The turn that took this one's message in (busy modes ``steer`` and ``collect``): this
    # one is done without a reply of its own.
    Column("merged_into", Id),
    # The state shown on the turn's message (a reaction): the next mark replaces it.
    Column("marked", String(16)),
    # A schedule run that posts only what its model marks worth posting (``notable``).
    Column("quiet", Boolean, nullable=False, default=False, server_default=false()),
    Index("ix_turns_conversation_status", "conversation_id", "status", "id"),
    Index("ix_turns_status", "status"),
    Index("ix_turns_user_id", "user_id"),
    Index("ix_turns_created_at", "created_at"),
)

turn_steps = Table(
    "turn_steps",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("turn_id", Id, ForeignKey("turns.id"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("status", String(16), nullable=False),
    Column("input", JSON),
    Column("output", JSON),
    Column("idempotency_key", String(64), nullable=False, unique=True),
    Column("started_at", UTCDateTime(), nullable=False),
    Column("finished_at", UTCDateTime()),
    UniqueConstraint("turn_id", "seq", name="uq_turn_steps_turn_seq"),
)

approvals = Table(
    "approvals",
    metadata,
    # Opaque and short: fits Telegram's 64-byte callback data with room to spare.
    Column("id", String(32), primary_key=True),
    Column("turn_id", Id, ForeignKey("turns.id"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("conversation_id", String(32), ForeignKey("conversations.id"), nullable=False),
    # "tool": may this call run?  "recovery": re-run a call whose outcome is unknown?
    Column("kind", String(16), nullable=False),
    Column("tool", String(128), nullable=False),
    Column("arguments", JSON, nullable=False),
    Column("requested_by", String(255), nullable=False),
    Column("approvers", JSON, nullable=False),
    # False: the requester may not approve it; another approver must.
    Column("self_approve", Boolean, nullable=False, server_default=true()),
    # Whether "Allow in this conversation" is offered (``always_allow`` of its rules).
    Column("always_allow", Boolean, nullable=False, server_default=true()),
    # pending -> approved | allowed (for the conversation) | denied | expired | cancelled
    # (the requester's access was revoked); a question: pending -> answered | expired ...
    Column("status", String(16), nullable=False),
    # A question's answer (the option pressed, or the words typed after "Other"), and who
    # pressed "Other": their next message in the conversation is the answer.
    Column("answer", Text),
    Column("answering", String(255)),
    # Where the prompt is shown (a policy rule's ``route``: here, approvers, both), and
    # who gets it when its time is up (``escalate_to``; None once it was passed on).
    Column("route", String(16), nullable=False, server_default="here"),
    Column("escalate_to", JSON),
    Column("decided_by", String(255)),
    Column("decided_at", UTCDateTime()),
    Column("expires_at", UTCDateTime(), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    UniqueConstraint("turn_id", "seq", name="uq_approvals_turn_seq"),
    Index("ix_approvals_status_expires", "status", "expires_at"),
    Index("ix_approvals_requested_by", "requested_by"),
)

# A prompt's copies outside its conversation (an approver's DM): a decision edits each.
approval_copies = Table(
    "approval_copies",
    metadata,
    Column("approval_id", String(32), ForeignKey("approvals.id"), primary_key=True),
    Column("platform", String(16), primary_key=True),
    Column("workspace", String(255), primary_key=True),
    Column("channel", String(255), primary_key=True),
    Column("message_id", String(255)),
    Column("sent_to", String(255), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
)

grants = Table(
    "grants",
    metadata,
    Column("conversation_id", String(32), ForeignKey("conversations.id"), primary_key=True),
    Column("tool", String(128), primary_key=True),
    # Who pressed "Allow in this conversation": the grant covers their calls only.
    Column("granted_by", String(255), primary_key=True),
    Column("approval_id", String(32)),
    Column("created_at", UTCDateTime(), nullable=False),
)

pairing_requests = Table(
    "pairing_requests",
    metadata,
    Column("code", String(16), primary_key=True),
    Column("platform", String(16), nullable=False),
    Column("user_id", String(255), nullable=False),
    Column("conversation_id", String(32), ForeignKey("conversations.id"), nullable=False),
    # pending -> approved | expired
    Column("status", String(16), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False),
    Column("decided_by", String(255)),
    Column("decided_at", UTCDateTime()),
    Index("ix_pairing_requests_platform_status", "platform", "status"),
    Index("ix_pairing_requests_user_status", "user_id", "status"),
)

paired_users = Table(
    "paired_users",
    metadata,
    Column("user_id", String(255), primary_key=True),
    Column("approved_by", String(255), nullable=False),
    Column("approved_at", UTCDateTime(), nullable=False),
    Column("code", String(16)),
    Column("revoked_by", String(255)),
    Column("revoked_at", UTCDateTime()),
)

access_events = Table(
    "access_events",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("at", UTCDateTime(), nullable=False),
    Column("actor", String(255), nullable=False),
    # approve | revoke
    Column("action", String(16), nullable=False),
    Column("user_id", String(255), nullable=False),
    Column("code", String(16)),
)

schedules = Table(
    "schedules",
    metadata,
    # Short and typeable (``cancel sc_1a2b3c4d``).
    Column("id", String(16), primary_key=True),
    # The conversation it was created in (its own results go to its targets).
    Column("conversation_id", String(32), ForeignKey("conversations.id"), nullable=False),
    Column("created_by", String(255), nullable=False),
    Column("prompt", Text, nullable=False),
    # cron | interval | once, the normalized spec, the zone it is read in, the interval anchor
    Column("kind", String(16), nullable=False),
    Column("spec", String(255), nullable=False),
    Column("timezone", String(64), nullable=False),
    Column("anchor", UTCDateTime()),
    # skip | run_once | catch_up
    Column("missed", String(16), nullable=False),
    # active | paused | done (a one-shot that fired) | deleted
    Column("status", String(16), nullable=False),
    Column("next_run_at", UTCDateTime()),
    Column("failures", Integer, nullable=False, default=0),
    # What a run does: "agent" (a turn: the model answers the prompt) or "message" (the
    # prompt is posted as it is, no model call: a reminder).
    Column("action", String(16), nullable=False, default="agent", server_default="agent"),
    # Each run starts somewhere in [slot, slot + jitter] (0: at its slot).
    Column("jitter_seconds", Integer, nullable=False, default=0, server_default="0"),
    # "always", or "if_notable": a run posts only what its model marks worth posting.
    Column("notify", String(16), nullable=False, default="always", server_default="always"),
    # The creating tool call's idempotency key: a re-run after a crash finds the same row.
    Column("creation_key", String(64), unique=True),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    # The dispatcher reads due rows only: a tick costs O(due), not O(all).
    Index("ix_schedules_status_next_run_at", "status", "next_run_at"),
    Index("ix_schedules_conversation_id", "conversation_id"),
    Index("ix_schedules_created_by", "created_by"),
)

schedule_targets = Table(
    "schedule_targets",
    metadata,
    Column("schedule_id", String(16), ForeignKey("schedules.id"), primary_key=True),
    Column("conversation_id", String(32), ForeignKey("conversations.id"), primary_key=True),
    Index("ix_schedule_targets_conversation_id", "conversation_id"),
)

schedule_runs = Table(
    "schedule_runs",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("schedule_id", String(16), ForeignKey("schedules.id"), nullable=False),
    Column("scheduled_for", UTCDateTime(), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    # When the run was planned to start: its slot, moved into the schedule's jitter window
    # (NULL in runs older than revision 0021: the slot).
    Column("due_at", UTCDateTime()),
    # When the first of its turns started (a worker claimed its job): the lag is
    # started_at - due_at.
    Column("started_at", UTCDateTime()),
    # Two dispatchers never fire one slot twice.
    UniqueConstraint("schedule_id", "scheduled_for", name="uq_schedule_runs_slot"),
    # /metrics observes the runs started since its last look.
    Index("ix_schedule_runs_started_at", "started_at"),
)

# The last sign of life of each dispatcher (role "dispatcher") and embedded job runner
# ("runner"), so ``chatgate doctor`` can say why runs start late.
beats = Table(
    "beats",
    metadata,
    Column("role", String(16), primary_key=True),
    Column("owner", String(128), primary_key=True),
    Column("beat_at", UTCDateTime(), nullable=False),
)

jobs = Table(
    "jobs",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    # "turn": run a queued turn and deliver its reply (one per schedule target, or ``bg``).
    Column("kind", String(16), nullable=False),
    # "extract": pick durable facts out of a finished turn (the turn's own job).
    # "maintain": review one person's new facts (nightly; no turn, no conversation).
    Column("turn_id", Id, ForeignKey("turns.id")),
    Column("conversation_id", String(32), ForeignKey("conversations.id")),
    Column("user_id", String(255)),
    Column("schedule_id", String(16), ForeignKey("schedules.id")),
    Column("run_id", Id, ForeignKey("schedule_runs.id")),
    # queued -> running -> done | failed, or waiting (for an approval) -> queued ...
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    # Not before this time (retry backoff).
    Column("not_before", UTCDateTime(), nullable=False),
    # Last handed to the broker (Celery profile); NULL = not yet, so the dispatcher sends it.
    Column("enqueued_at", UTCDateTime()),
    Column("lease_owner", String(128)),
    Column("lease_expires_at", UTCDateTime()),
    # The platform's message id of the delivered reply.
    Column("receipt", String(255)),
    Column("error", Text),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("finished_at", UTCDateTime()),
    Index("ix_jobs_status_not_before", "status", "not_before"),
    Index("ix_jobs_schedule_id_id", "schedule_id", "id"),
    Index("ix_jobs_turn_id", "turn_id"),
)

# Named locks for what exactly one process may do at a time (hold the Discord gateway
# connection, poll Telegram, hold the Slack socket): the owner renews before expires_at,
# and anyone may take a lock whose holder stopped renewing.
locks = Table(
    "locks",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("owner", String(128), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False),
)

# Model spend, one row per finished model call, written with the call's journal entry:
# what budgets and the usage command sum (by turn, conversation, user and UTC day).
model_usage = Table(
    "model_usage",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("day", String(10), nullable=False),
    Column("user_id", String(255), nullable=False),
    # NULL for a person's memory maintenance, which belongs to no conversation.
    Column("conversation_id", String(32), ForeignKey("conversations.id")),
    Column("turn_id", Id, ForeignKey("turns.id")),
    Column("model", String(255), nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column("cost_usd", Float, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Index("ix_model_usage_user_id_day", "user_id", "day"),
    Index("ix_model_usage_conversation_id", "conversation_id"),
    Index("ix_model_usage_day", "day"),
    Index("ix_model_usage_turn_id", "turn_id"),
)

# What the agent remembers (the remember tool): per person (``scope = user``, recalled in
# any of their conversations) or per conversation. ``about`` names what a fact is about;
# a newer fact about the same thing supersedes the older. Full-text search lives beside
# the table, per backend (migration 0008): an FTS5 table kept by triggers on SQLite, a
# generated tsvector column with a GIN index on PostgreSQL; neither is declared here.
memories = Table(
    "memories",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("user_id", String(255), nullable=False),
    Column("conversation_id", String(32), ForeignKey("conversations.id"), nullable=False),
    Column("scope", String(16), nullable=False),
    Column("about", String(200)),
    Column("fact", Text, nullable=False),
    Column("source", String(255), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("superseded_by", Id),
    Column("forgotten_at", UTCDateTime()),
    # When maintenance last compared it with the person's older facts (NULL: not yet).
    Column("reviewed_at", UTCDateTime()),
    Index("ix_memories_user_id_scope", "user_id", "scope"),
    Index("ix_memories_conversation_id", "conversation_id"),
    Index(
        "ix_memories_unreviewed",
        "user_id",
        sqlite_where=text("reviewed_at IS NULL"),
        postgresql_where=text("reviewed_at IS NULL"),
    ),
)

# The last slot of each periodic upkeep (``memory``: the nightly memory maintenance) that
# some process claimed: whoever moves ``last_slot`` forward creates that slot's jobs.
maintenance = Table(
    "maintenance",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("last_slot", UTCDateTime(), nullable=False),
)

# Until when each platform's receiving session was known to hear everything sent to it
# (Discord: a new gateway session reads what was written after this, less a margin).
hearing_marks = Table(
    "hearing_marks",
    metadata,
    Column("platform", String(16), primary_key=True),
    Column("heard_until", UTCDateTime(), nullable=False),
)

FTS_OBJECTS = ("memories_fts",)
"""Names the migrations create outside this metadata (the comparison skips them)."""

# Platform updates set aside: they failed in a way retrying cannot mend (``dead_letter``).
dead_letters = Table(
    "dead_letters",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("platform", String(16), nullable=False),
    Column("event_id", String(128), nullable=False),
    # The update as JSON with every non-ASCII character escaped (NUL included).
    Column("raw", Text, nullable=False),
    Column("error", Text, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
)

# What operators and people did, and what chatgate did on their behalf: access changes, approval
# decisions, tool calls run, settings at start, schedule changes from the console, erasures
# and retention passes. Append-only: rows are only ever added (and, past the audit
# retention, removed oldest first); ``detail`` holds names, ids and counts, never message text.
audit_log = Table(
    "audit_log",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("at", UTCDateTime(), nullable=False),
    Column("actor", String(255), nullable=False),
    Column("action", String(64), nullable=False),
    Column("subject", String(255)),
    Column("conversation_id", String(32)),
    Column("turn_id", Id),
    Column("detail", JSON),
    Index("ix_audit_log_at", "at"),
    Index("ix_audit_log_subject", "subject"),
    Index("ix_audit_log_action_id", "action", "id"),
)

# A person's 👍 or 👎 on one of the agent's replies (``agent_core.feedback``): one per turn
# and person, the latest reaction wins; removing it removes the row. ``asked_at`` is when
# "what went wrong?" was posted after a 👎; while ``comment`` is NULL and that was under
# ``feedback.ANSWER_WINDOW`` ago, the person's next message there is the comment (never
# a turn). ``comment`` is '' when they said "skip".
feedback = Table(
    "feedback",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("turn_id", Id, ForeignKey("turns.id"), nullable=False),
    Column("conversation_id", String(32), ForeignKey("conversations.id"), nullable=False),
    Column("message_id", Id, ForeignKey("messages.id")),
    Column("user_id", String(255), nullable=False),
    # "up" | "down"
    Column("rating", String(8), nullable=False),
    Column("comment", Text),
    Column("asked_at", UTCDateTime()),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    UniqueConstraint("turn_id", "user_id", name="uq_feedback_turn_user"),
    Index("ix_feedback_rating_turn", "rating", "turn_id"),
    Index("ix_feedback_conversation_id", "conversation_id"),
    Index("ix_feedback_user_id", "user_id"),
)

triggers = Table(
    "triggers",
    metadata,
    # Short and typeable (``chatgate trigger fire tr_1a2b3c4d5e``).
    Column("id", String(16), primary_key=True),
    Column("conversation_id", String(32), ForeignKey("conversations.id"), nullable=False),
    Column("prompt", Text, nullable=False),
    # Presented as a bearer token, or the key of the request body's HMAC (so kept as is).
    Column("secret", String(64), nullable=False),
    # Fires accepted in any hour, at most.
    Column("per_hour", Integer, nullable=False),
    # active | paused | deleted (kept for its fires' receipts; the secret is blanked)
    Column("status", String(16), nullable=False),
    Column("created_by", String(255), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Index("ix_triggers_conversation_id", "conversation_id"),
)

trigger_fires = Table(
    "trigger_fires",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("trigger_id", String(16), ForeignKey("triggers.id"), nullable=False),
    # The sender's Idempotency-Key: a second fire with it is the first one (NULL: none).
    Column("idempotency_key", String(255)),
    # "http" | "cli"
    Column("source", String(16), nullable=False),
    Column("bytes", Integer, nullable=False),
    Column("turn_id", Id, ForeignKey("turns.id"), nullable=False),
    Column("job_id", Id, ForeignKey("jobs.id"), nullable=False),
    Column("received_at", UTCDateTime(), nullable=False),
    UniqueConstraint("trigger_id", "idempotency_key", name="uq_trigger_fires_key"),
    Index("ix_trigger_fires_trigger_received", "trigger_id", "received_at"),
)
