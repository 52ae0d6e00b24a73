"""Errors raised by the agent core.

    ChatgateError
    ├── ConfigError            a setting is missing or invalid (exit code 2)
    ├── RuntimeFailure         something failed while running (exit code 1)
    │   ├── ModelError         every model (and fallback) failed for a call
    │   ├── StorageError       the database refused or could not be reached
    │   └── DeliveryError      an outbound message could not be delivered
    ├── TriggerError           a trigger cannot fire or change (the message says why)
    │   ├── TriggerNotFound    no such trigger (or deleted)
    │   ├── TriggerPaused      it is paused: fires are refused until it is resumed
    │   └── TriggerRateLimited more fires in the last hour than it allows
    ├── ApprovalError          a decision that cannot be taken (told to the person who tried)
    │   ├── ApprovalNotFound   no approval has that id
    │   ├── AlreadyDecided     someone decided first
    │   └── NotAllowedToDecide this person may not decide it
    └── Signal                 control flow that is not a failure
        ├── LeaseLost          another process took over a conversation's lease
        ├── Suspended          the turn waits for a person; nothing waits in memory
        └── Stopped            someone said ``stop``: the turn ends at a step boundary

Exceptions keep their arguments in ``args`` so they pickle across process boundaries.
"""

from __future__ import annotations


class ChatgateError(Exception):
    """Base class of every error chatgate raises on purpose."""


class ConfigError(ChatgateError):
    """A setting is missing or has a value chatgate cannot use.

    ``key`` names the setting the way the user writes it (e.g. ``CHATGATE_PORT``).
    """

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(key, reason)
        self.key = key
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.key}: {self.reason}"


class RuntimeFailure(ChatgateError):
    """Something failed while chatgate was running."""


class ModelError(RuntimeFailure):
    """The model (and every fallback) failed for one call."""


class StorageError(RuntimeFailure):
    """The database could not be reached or refused a write."""


class DeliveryError(RuntimeFailure):
    """An outbound message could not be delivered to its platform."""


class ApprovalError(ChatgateError):
    """A decision on an approval that cannot be taken."""


class ApprovalNotFound(ApprovalError):
    """No approval has that id."""


class AlreadyDecided(ApprovalError):
    """Someone decided this approval first (first answer wins)."""


class NotAllowedToDecide(ApprovalError):
    """Only the requester, an admin or a listed approver may decide; ``reason`` says why
    this person may not: ``not_approver``, ``own_request`` (policy needs someone else) or
    ``no_access`` (they may no longer talk to the agent)."""

    def __init__(self, approval_id: str, user: str, reason: str = "not_approver") -> None:
        super().__init__(approval_id, user, reason)
        self.reason = reason


class Signal(ChatgateError):
    """Control flow that is not a failure."""


class LeaseLost(Signal):
    """This process no longer holds the conversation's lease: stop and let the holder run."""


class Suspended(Signal):
    """The turn asked a person and stops here; a decision puts it back in the queue."""


class Stopped(Signal):
    """Someone said ``stop`` to the turn (``args``: who, and the journal's next free step);
    it ends at the step boundary it reached, saying so."""

    def __init__(self, by: str, next_seq: int) -> None:
        super().__init__(by, next_seq)
        self.by = by
        self.next_seq = next_seq


class ScheduleActionError(ChatgateError):
    """A schedule could not be paused, resumed or deleted; the message says why."""


class ScheduleNotFound(ScheduleActionError):
    """No such schedule (or it is not one of this conversation's)."""


class NotAllowedToChange(ScheduleActionError):
    """Only the schedule's creator or an admin may change it."""


class TriggerError(ChatgateError):
    """A trigger cannot fire, or cannot be changed; the message says why."""


class TriggerNotFound(TriggerError):
    """No such trigger (or it was deleted, or is not this conversation's)."""

    def __str__(self) -> str:
        return f"no trigger {self.args[0]}"


class TriggerPaused(TriggerError):
    """The trigger is paused: a fire is refused (nothing queued) until it is resumed."""

    def __str__(self) -> str:
        return f"trigger {self.args[0]} is paused"


class TriggerRateLimited(TriggerError):
    """The trigger took its ``per_hour`` fires in the last hour."""

    def __init__(self, trigger_id: str, *, retry_after: float) -> None:
        super().__init__(trigger_id, retry_after)
        self.retry_after = retry_after

    def __str__(self) -> str:
        return (
            f"trigger {self.args[0]} fired as often as it may in an hour; try again in "
            f"{self.retry_after:.0f} s"
        )


class PairingRefused(Exception):
    """The code cannot be approved: ``reason`` is unknown, expired or already approved."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(code, reason)
        self.code = code
        self.reason = reason
