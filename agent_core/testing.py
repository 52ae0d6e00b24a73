"""Fakes of the core's ports, shipped beside them for tests (ours and other people's)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Protocol

from agent_core.budgets import BudgetLimits
from agent_core.delivery import ChunkSent, Outbound
from agent_core.errors import ModelError
from agent_core.events import ApprovalPrompt, ConversationKey, Edit, OutgoingFile, Reply
from agent_core.faults import FaultPoints
from agent_core.loop import TurnRunner, TurnStore
from agent_core.model import ChatMessage, Model, ModelReply, TextSoFar
from agent_core.permissions import Permissions
from agent_core.records import TurnState
from agent_core.secrets import Secrets
from agent_core.tool_steps import ToolRound, ToolRoundStore
from agent_core.tools.registry import ToolRegistry


class ScriptedModel:
    """A model that answers from a script, then echoes; records every prompt it gets.

    A script item that is an exception instance is raised instead of answered.
    """

    def __init__(self, *answers: str | ModelReply | ModelError, window: int = 8192) -> None:
        self.prompts: list[list[ChatMessage]] = []
        self.tools: list[list[str]] = []
        self.streamed = 0  # how many calls were asked to stream
        self._answers: deque[str | ModelReply | ModelError] = deque(answers)
        self._window = window
        self.vision = False

    @property
    def name(self) -> str:
        """Always ``scripted``."""
        return "scripted"

    async def warm_up(self) -> None:
        """Nothing to prepare."""

    async def aclose(self) -> None:
        """Nothing to let go of."""

    def context_window(self) -> int:
        """The window given at construction."""
        return self._window

    def count_tokens(self, messages: Sequence[ChatMessage]) -> int:
        """One token per four characters, four per message for framing."""
        return sum(len(m.content) // 4 + 4 for m in messages)

    def sees_images(self) -> bool:
        """``vision`` (False unless a test sets it)."""
        return self.vision

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int,
        tools: Sequence[Mapping[str, Any]] = (),
        on_text: TextSoFar | None = None,
    ) -> ModelReply:
        """The next scripted answer, or ``echo: <last message>``; streamed a word at a time
        to ``on_text`` when given."""
        self.prompts.append(list(messages))
        self.tools.append([str(t["function"]["name"]) for t in tools])
        await asyncio.sleep(0)
        answer = self._answers.popleft() if self._answers else f"echo: {messages[-1].content}"
        if isinstance(answer, ModelError):
            raise answer
        reply = (
            answer
            if isinstance(answer, ModelReply)
            else ModelReply(text=answer, model=self.name, prompt_tokens=1, completion_tokens=1)
        )
        if on_text is not None:
            self.streamed += 1
            words = reply.text.split(" ")
            for count in range(1, len(words) + 1):
                on_text(" ".join(words[:count]))
                await asyncio.sleep(0)
        return reply


class RecordingLiveReply:
    """A live reply that records every update it is asked to show, and its close."""

    def __init__(
        self, key: str, *, interval: float, message: str | None = None, posts: bool = False
    ) -> None:
        self.key = key
        self.interval = interval
        self.shown: list[tuple[str, str | None]] = []
        self.closed = False
        # With ``posts``, the first update "posts" a message (``live-<key>``), as a chat
        # platform's live reply does; ``message`` is the one a resumed turn goes on in.
        self.message = message
        self.posts = posts
        self.resumed_in = message
        self.recovered = False

    async def show(self, text: str, *, status: str | None) -> None:
        """Record the update."""
        self.shown.append((text, status))
        if self.posts and self.message is None:
            self.message = f"live-{self.key}"

    async def recover(self) -> None:
        """Find the message as the first update would have posted it."""
        self.recovered = True
        if self.posts:
            self.message = f"live-{self.key}"

    async def close(self) -> None:
        """Record the close."""
        self.closed = True


class RecordingOutbound:
    """An outbound port that records what it was asked to send and returns receipts; with
    ``live_interval`` it offers a :class:`RecordingLiveReply` per turn (``lives``)."""

    def __init__(self, *, live_interval: float | None = None, live_posts: bool = False) -> None:
        self.sent: list[Reply | ApprovalPrompt] = []
        self.files: list[OutgoingFile] = []
        self.edits: list[Edit] = []
        self.lives: list[RecordingLiveReply] = []
        self.marks: list[tuple[str, TurnState, TurnState | None]] = []
        self.sessions: list[tuple[TurnState, str]] = []
        self._live_interval = live_interval
        self._live_posts = live_posts

    async def mark(
        self,
        conversation: ConversationKey,
        message_id: str,
        state: TurnState,
        *,
        previous: TurnState | None,
    ) -> None:
        """Record the mark."""
        self.marks.append((message_id, state, previous))

    async def session(
        self, conversation: ConversationKey, state: TurnState, *, title: str, user: str
    ) -> None:
        """Record the session status."""
        self.sessions.append((state, title))

    async def direct(self, user: str, *, workspace: str) -> ConversationKey | None:
        """A DM named after the person: ``dm-USER`` on their platform."""
        platform, _, bare = user.partition(":")
        return ConversationKey(
            platform=platform,  # type: ignore[arg-type]
            workspace=workspace,
            channel=f"dm-{bare}",
        )

    def live(
        self,
        conversation: ConversationKey,
        *,
        key: str,
        message: str | None,
        reply_to: str | None,
        user: str,
    ) -> RecordingLiveReply | None:
        """A recording live reply when asked for at construction, else None."""
        if self._live_interval is None:
            return None
        live = RecordingLiveReply(
            key, interval=self._live_interval, message=message, posts=self._live_posts
        )
        self.lives.append(live)
        return live

    async def send(
        self, reply: Reply | ApprovalPrompt, *, progress: ChunkSent | None = None
    ) -> str:
        """Record the reply; the receipt counts deliveries."""
        self.sent.append(reply)
        return f"receipt-{len(self.sent)}"

    async def send_file(self, file: OutgoingFile) -> str:
        """Record the file; the receipt counts files."""
        self.files.append(file)
        return f"file-{len(self.files)}"

    async def edit(self, edit: Edit) -> None:
        """Record the edit."""
        self.edits.append(edit)


class RecordingJobQueue:
    """A job queue that only records what it was given (the rows stay in the table)."""

    def __init__(self) -> None:
        self.jobs: list[int] = []

    async def submit(self, job_ids: Sequence[int]) -> None:
        """Record the ids."""
        self.jobs.extend(job_ids)


class RunnerStore(TurnStore, ToolRoundStore, Protocol):
    """What a turn runner and its tool round ask of the storage."""


def turn_runner(
    store: RunnerStore,
    *,
    model: Model | None,
    outbound: Outbound,
    system_prompt: str = "s",
    tools: ToolRegistry | None = None,
    tool_round: ToolRound | None = None,
    **options: Any,
) -> TurnRunner:
    """A turn runner for tests, with everything a process's bootstrap would give it made
    plain: the given tools (none by default), a tool round that pre-approves nothing and
    knows no secret, no fault points, no budgets; ``options`` go to ``TurnRunner``."""
    faults = options.pop("faults", None) or FaultPoints()
    if tool_round is None:
        tool_round = ToolRound(
            store,
            outbound=outbound,
            permissions=Permissions(),
            secrets=Secrets(),
            approval_ttl=timedelta(minutes=30),
            faults=faults,
        )
    return TurnRunner(
        store,
        model=model,
        outbound=outbound,
        system_prompt=system_prompt,
        tools=tools or ToolRegistry(),
        tool_round=tool_round,
        faults=faults,
        budgets=options.pop("budgets", None) or BudgetLimits(),
        **options,
    )
