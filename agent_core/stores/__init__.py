"""The storage port: what the core asks of the database, one Protocol per concern.

Consumers depend on the narrow Protocols they use (the turn runner on the ``Journal``, the
gatekeeper on the ``Ledger`` and ``AccessStore`` ...); ``agent_core.storage.store.Store``
implements them all over SQLAlchemy, and only the bootstraps (``gateway.app``,
``workers.bootstrap``, the CLI) build it. :class:`Storage` is every concern at once, for the
processes' runtimes. The Protocols live by what they are about: ``conversations`` (the
ledger, the journal, marks), ``people`` (approvals, access), ``work`` (schedules, jobs,
locks), ``memory`` (memory, usage), ``feedback`` (ratings of replies) and ``home`` (one
person's things across conversations).
"""

from __future__ import annotations

from typing import Protocol

from agent_core.stores.conversations import Journal, Ledger, Marks
from agent_core.stores.feedback import FeedbackStore
from agent_core.stores.files import FileRecords
from agent_core.stores.home import HomeStore
from agent_core.stores.memory import MemoryStore, UsageStore
from agent_core.stores.people import AccessStore, ApprovalStore
from agent_core.stores.work import JobStore, LockStore, ScheduleStore

__all__ = [
    "AccessStore",
    "ApprovalStore",
    "FeedbackStore",
    "FileRecords",
    "HomeStore",
    "JobStore",
    "Journal",
    "Ledger",
    "LockStore",
    "Marks",
    "MemoryStore",
    "ScheduleStore",
    "Storage",
    "UsageStore",
]


class Storage(
    Ledger,
    Journal,
    FileRecords,
    FeedbackStore,
    HomeStore,
    ApprovalStore,
    AccessStore,
    ScheduleStore,
    JobStore,
    MemoryStore,
    UsageStore,
    LockStore,
    Protocol,
):
    """Every concern at once: what a process's runtime holds."""
