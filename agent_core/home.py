"""A person's own page (Slack's App Home): the schedules they created in any conversation,
the approvals waiting for them, their model use this month. Gathered here, drawn by the
platform that has such a page.

"Waiting for them" is what :meth:`agent_core.approvals.Approvals.refusal` says they may
decide: their own requests where self-approval is allowed, and any request where they are
an approver or an admin; the page offers exactly the presses that would be taken.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from agent_core.events import Platform
from agent_core.records import ApprovalRecord
from agent_core.scheduling.recurrence import Recurrence
from agent_core.stores.home import HomeStore, OwnSchedule, PersonUsage

# What one page shows at most (Slack's views hold 100 blocks).
MAX_SCHEDULES = 20
MAX_APPROVALS = 10
# Pending approvals looked at for one person (they expire: there are never many).
_PENDING_READ = 200


class MayDecide(Protocol):
    """:meth:`agent_core.approvals.Approvals.refusal`: why ``user`` may not decide (None:
    they may)."""

    async def __call__(
        self, approval: ApprovalRecord, user: str, *, team: str | None = None
    ) -> str | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PersonHome:
    """What one person's page shows."""

    user: str
    schedules: tuple[OwnSchedule, ...] = ()
    approvals: tuple[ApprovalRecord, ...] = ()
    usage: PersonUsage


def when(schedule: OwnSchedule) -> str:
    """A schedule's recurrence in words (``every weekday at 09:00 ...``)."""
    found = schedule.schedule
    return Recurrence.from_stored(found.kind, found.spec, found.timezone, found.anchor).describe()


def month_start(now: datetime) -> datetime:
    """00:00 UTC on the first of ``now``'s month: where "this month" starts."""
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


async def person_home(
    store: HomeStore,
    *,
    refusal: MayDecide,
    named: Callable[[ApprovalRecord, str], bool],
    user: str,
    team: str | None,
    platform: Platform,
    now: datetime,
) -> PersonHome:
    """Gather ``user``'s page: their schedules on ``platform``, the pending approvals they
    may decide and are named for (``refusal`` is None, ``named`` is true: a member's role
    reaches prompts they can see, not every DM's), their use since the month began."""
    schedules = await store.schedules_by(user, platform=platform, limit=MAX_SCHEDULES)
    waiting: list[ApprovalRecord] = []
    for approval in await store.pending_approvals(now=now, limit=_PENDING_READ):
        if named(approval, user) and await refusal(approval, user, team=team) is None:
            waiting.append(approval)
            if len(waiting) == MAX_APPROVALS:
                break
    usage = await store.usage_by(user, since=month_start(now))
    return PersonHome(user=user, schedules=tuple(schedules), approvals=tuple(waiting), usage=usage)
