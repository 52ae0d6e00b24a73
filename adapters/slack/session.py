"""Slack's agent sessions: the status a thread with the agent shows (working, waiting, done)
and its title, and the native Stop button Slack shows while the session is ``processing``
(pressed, it sends ``agent_session_stopped``: ``adapters.slack.parse.parse_session_stop``);
and the suggested prompts offered when someone opens the app's Messages tab.

``agents.sessions.setStatus`` creates the session on its first call (its title is taken
then, from the message that started it) and updates it after. Sessions are thread-based,
so a conversation without a thread (a DM's top level) has none. An app that is not
declared as an agent is refused: the sender remembers it and stops asking, as it does
for streaming.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError

from adapters.slack.parse import bare_user
from agent_core.errors import DeliveryError
from agent_core.events import ConversationKey
from agent_core.records import TurnState
from agent_core.section_settings import SuggestedPrompt

if TYPE_CHECKING:
    from adapters.slack.send import SlackSender

log = structlog.get_logger("chatgate.slack")

# A turn's state as Slack's session lifecycle says it; a failed turn's session is idle
# again (the reply says what failed), like a finished one.
STATUSES: dict[TurnState, str] = {
    "received": "processing",
    "working": "processing",
    "waiting": "suspended",
    "done": "active",
    "failed": "active",
}
TITLE_LIMIT = 200


def title_of(text: str) -> str:
    """A session's title from the message that started it: its first line, clipped."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "") or "Chat"
    return line if len(line) <= TITLE_LIMIT else line[: TITLE_LIMIT - 1] + "…"


async def set_status(
    sender: SlackSender, conversation: ConversationKey, state: TurnState, *, title: str, user: str
) -> None:
    """The session's status for the turn's state (created with ``title`` when new)."""
    if sender.sessions is False or not conversation.thread:
        return
    try:
        await sender.client.agents_sessions_setStatus(
            channel_id=conversation.channel,
            thread_ts=conversation.thread,
            status=STATUSES[state],
            title=title_of(title),
            initiator_user_id=bare_user(user) if user.startswith("slack:") else None,
        )
    except SlackApiError as exc:
        error = exc.response.get("error")
        if exc.response.status_code == 429 or error == "ratelimited":
            raise DeliveryError(f"slack: {error}") from exc
        if sender.sessions is None:
            log.warning(
                "slack refused an agent session status; is the app declared as an agent "
                "(the manifest's agent_view)? Not asking again",
                error=error,
            )
            sender.sessions = False
            return
        raise DeliveryError(f"slack: {error}") from exc
    sender.sessions = True


async def suggest_prompts(sender: SlackSender, dm: str, prompts: Sequence[SuggestedPrompt]) -> None:
    """Offer ``prompts`` in the person's DM with the app, as the agent messaging experience
    has it: for the DM's latest message, without a ``thread_ts`` (which only the older
    assistant experience takes: an agent app's call with one silently does nothing). A
    refusal is logged; the DM works without them."""
    try:
        await sender.client.assistant_threads_setSuggestedPrompts(
            channel_id=dm, prompts=[{"title": p.title, "message": p.message} for p in prompts]
        )
    except SlackApiError as exc:
        log.warning("slack refused the suggested prompts", dm=dm, error=exc.response.get("error"))
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.warning("slack unreachable for the suggested prompts", dm=dm, error=str(exc))
