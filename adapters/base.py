"""The port every chat platform implements, and what the gateway lends it.

A platform lives in one package, ``adapters/<platform>/``: ``parse`` and ``render`` (pure:
payloads in, events out; events in, payloads out), ``send`` (the outbound client),
``inbound`` (the :class:`ChatAdapter`: webhook routes, or the long-lived connection) and
``setup`` (what ``chatgate doctor`` and the setup commands ask the platform).
``adapters.registry`` builds the configured ones; the gateway and the workers know
platforms only through this module.

An adapter hands every message and button press to the gateway's :class:`EventSink`; the
few gateway concerns it needs besides (a lock one process holds at a time, setting an
unhandleable event aside, the test fault points, where a new session catches up from)
come as :class:`GatewayHooks`.

Errors (raised by adapters, mapped to HTTP statuses and exit codes by the gateway):

    AdapterError
    ├── BadRequest       the body is not what the platform sends (400)
    ├── Unauthorized     signature, secret or token missing or wrong (401; exit 2)
    ├── Forbidden        authenticated, but not allowed here (403)
    └── PlatformError    the platform refused a call or did not answer (exit 1)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, Self, TypeVar

from agent_core.command_registry import Suggest
from agent_core.delivery import Outbound
from agent_core.events import (
    ButtonPress,
    ConversationKey,
    InboundMessage,
    MessageDeleted,
    MessageEdited,
    Platform,
    Reaction,
)
from agent_core.faults import FaultPoints
from agent_core.files.fetching import FileSource
from agent_core.home import PersonHome
from agent_core.records import Accepted

if TYPE_CHECKING:
    from aiohttp import web


class AdapterError(Exception):
    """Base class of adapter errors."""


class BadRequest(AdapterError):
    """The request body is malformed or misses a required field."""


class Unauthorized(AdapterError):
    """The request is not authentic: bad or missing signature, secret or token."""


class Forbidden(AdapterError):
    """The caller is authentic but may not use this route from where it is."""


class PlatformError(AdapterError):
    """The platform refused a call, or could not be reached."""


class NotStoredInTime(AdapterError):
    """A message was not in the ingress ledger by the platform's deadline (the database
    is slow or down). Storing it goes on; the platform must not be told it was received,
    so that it delivers it again (the ledger drops the copy if the first one was stored)."""


Status = Literal["ok", "WARN", "FAIL"]


@dataclass(frozen=True, slots=True)
class Check:
    """One line of ``chatgate doctor``'s report."""

    name: str
    status: Status
    detail: str
    fix: str = ""

    def line(self) -> str:
        """The check as printed: status, name, detail and the fix if any."""
        text = f"{self.status:<4} {self.name:<10} {self.detail}"
        return f"{text}\n     fix: {self.fix}" if self.fix else text


class PlatformSender(Outbound, FileSource, Protocol):
    """A platform's outbound client: it holds HTTP connections, opened and closed once;
    it also fetches the files people send (``fetch``). Workers use nothing of an adapter
    but this."""

    async def open(self) -> None:
        """Open what the client keeps between calls."""
        ...

    async def close(self) -> None:
        """Close it."""
        ...


Refuse = Callable[[str], Awaitable[None]]
"""Tell the person who pressed a button, and them alone, why nothing happened."""


class EventSink(Protocol):
    """The one callable the gateway hands every adapter: where messages, presses and
    reactions go."""

    async def __call__(
        self,
        event: InboundMessage | ButtonPress | Reaction | MessageDeleted | MessageEdited,
        *,
        deadline: float | None = None,
        refuse: Refuse | None = None,
    ) -> Accepted | None:
        """A message is stored in the ingress ledger (what the ledger made of it is
        returned) and its turn runs after; a message that only replies in a thread
        (``raw["addressed"]`` False) is dropped unless the agent talks there already. A
        press is decided (an approval, or a schedule's pause, resume or delete); a person
        who may not is told through ``refuse``. A reaction (👍/👎) rates the agent's reply
        it is on (``agent_core.feedback``). A deleted message leaves the history.

        ``deadline``: return after this many seconds at most, for platforms that must
        be answered in time; the work goes on. A message not stored by then raises
        :class:`NotStoredInTime`; a press not decided by then returns None. Raises when a
        message could not be stored (the database is down), so the platform delivers it
        again."""
        ...


class Lock(Protocol):
    """A lock that one process holds at a time across every gateway (Slack's socket,
    Telegram's ``getUpdates`` and Discord's gateway session take one each)."""

    @property
    def holding(self) -> bool:
        """Whether this process holds it now."""
        ...

    async def serve(self, run: Callable[[], Awaitable[None]], stopping: asyncio.Event) -> None:
        """Until ``stopping``: run ``run()`` while this process holds the lock."""
        ...


Suggester = Callable[[Suggest, ConversationKey, str, str], Awaitable[list[tuple[str, str]]]]
"""Suggestions for a command's argument (see ``GatewayHooks.suggest``)."""


@dataclass(frozen=True, kw_only=True)
class GatewayHooks:
    """What the gateway lends an adapter besides the sink (workers lend nothing: they
    only send)."""

    # A named lock one process holds at a time.
    lock: Callable[[str], Lock]
    # Keep an event that cannot be handled (platform, event id, raw, error) so the adapter
    # can move on; False when even that could not be stored.
    set_aside: Callable[[Platform, str, Mapping[str, Any], str], Awaitable[bool]]
    # Whether the database answers (a failure is the event's fault only when it does).
    database_up: Callable[[], Awaitable[bool]]
    # Count a request refused for a bad signature or secret.
    rejected: Callable[[Platform], None]
    # The process's test fault points (crash tests only).
    faults: FaultPoints
    # Until when a platform's receiving session was last known to hear everything (kept
    # across processes; None when none ever did), and keeping it: where a new session
    # catches up from.
    heard_until: Callable[[Platform], Awaitable[datetime | None]]
    hear_until: Callable[[Platform, datetime], Awaitable[None]]
    # A platform's conversations active since a time, most recent first.
    recent: Callable[[Platform, datetime], Awaitable[list[ConversationKey]]]
    # Which of these event ids of a platform are stored already (a catch-up skips them).
    ledgered: Callable[[Platform, Collection[str]], Awaitable[set[str]]]
    # Values to suggest for a command's argument as a person types it (Discord's
    # autocomplete): ``(kind, conversation, user, typed so far)`` -> ``(value, label)``
    # pairs, best first; nothing for a person who may not talk to the agent there.
    suggest: Suggester | None = None

    # A person's own page (platform, user, their team): their schedules there, the
    # approvals they may decide, their use this month (Slack's App Home).
    home: Callable[[Platform, str, str | None], Awaitable[PersonHome]] | None = None


class Hearing:
    """What an adapter knows of its inbound side, for ``/readyz``, metrics, the log and
    ``chatgate doctor``: whether its connection is up (None where there is none to hold,
    or another process holds it), when it last received an event, and since when it has
    been deaf (disconnected, or silent while the platform holds updates for it)."""

    def __init__(self) -> None:
        self.connected: bool | None = None
        self.last_event_at: float | None = None
        self.deaf_since: float | None = None
        self.reason: str | None = None

    def heard(self) -> None:
        """An event arrived."""
        self.last_event_at = time.time()

    def connected_now(self) -> None:
        """The connection is up: hearing."""
        self.connected = True
        self.hears()

    def disconnected(self, reason: str) -> None:
        """The connection is down: deaf since the first time it was said."""
        self.connected = False
        self.silent(reason)

    def silent(self, reason: str) -> None:
        """Deaf for ``reason`` (nothing arrives although the platform has updates)."""
        if self.deaf_since is None:
            self.deaf_since = time.time()
        self.reason = reason

    def hears(self) -> None:
        """Not deaf (any more)."""
        self.deaf_since = None
        self.reason = None

    def released(self) -> None:
        """This process holds no connection (another may): nothing to say."""
        self.connected = None
        self.hears()

    def snapshot(self) -> dict[str, object]:
        """As JSON for ``/readyz``."""
        return {
            "connected": self.connected,
            "last_event_at": _iso(self.last_event_at),
            "deaf_since": _iso(self.deaf_since),
            "reason": self.reason,
        }


def _iso(at: float | None) -> str | None:
    return None if at is None else datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


def heard(sink: EventSink, hearing: Hearing) -> EventSink:
    """``sink``, noting in ``hearing`` that each event arrived."""

    async def forward(
        event: InboundMessage | ButtonPress | Reaction | MessageDeleted | MessageEdited,
        *,
        deadline: float | None = None,
        refuse: Refuse | None = None,
    ) -> Accepted | None:
        hearing.heard()
        return await sink(event, deadline=deadline, refuse=refuse)

    return forward


class ChatAdapter(Protocol):
    """One chat platform: its outbound client, and where its events come in from.

    Lifecycle: ``async with adapter:`` opens the sender's connections and closes them and
    whatever else the adapter holds. The gateway calls ``mount`` while it builds its
    routes (webhook platforms register theirs; others nothing) and runs ``run`` as a task
    while it serves (long-lived connections; others return at once)."""

    @property
    def platform(self) -> Platform:
        """Which platform this is."""
        ...

    @property
    def sender(self) -> PlatformSender:
        """The outbound client (all a worker uses)."""
        ...

    async def __aenter__(self) -> Self:
        """Open the sender."""
        ...

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Close the sender and anything the adapter still holds."""
        ...

    def mount(self, router: web.UrlDispatcher, sink: EventSink) -> None:
        """Register the platform's webhook routes, each handing its events to ``sink``."""
        ...

    async def run(self, sink: EventSink, stopping: asyncio.Event) -> None:
        """Receive from a long-lived connection into ``sink`` until ``stopping``."""
        ...

    def ready(self) -> str | None:
        """None when the adapter receives (or another process does, for a connection only
        one may hold), else why not (``/readyz`` answers 503 with it)."""
        ...

    @property
    def hearing(self) -> Hearing:
        """Its inbound side's state (connection, last event, deaf since)."""
        ...

    async def check(self) -> Check:
        """Ask the platform whether the settings work (``chatgate doctor``)."""
        ...


SenderT = TypeVar("SenderT", bound=PlatformSender)


class SenderLifecycle(Generic[SenderT]):
    """The lifecycle every adapter shares: open the sender on enter; on exit, let the
    adapter finish (:meth:`finish`), then close the sender."""

    sender: SenderT

    async def __aenter__(self) -> Self:
        await self.sender.open()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            await self.finish()
        finally:
            await self.sender.close()

    async def finish(self) -> None:
        """What the adapter still does before its sender closes (nothing by default)."""
