"""What every Slack Web API call chatgate makes shares: Slack's refusals as ours, the
metadata that names a delivery, and the model's text with Slack's mention syntax broken."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from slack_sdk.errors import SlackApiError

from agent_core.errors import DeliveryError


@contextlib.contextmanager
def delivered() -> Iterator[None]:
    """Slack's refusals as ours (the error code, e.g. ``channel_not_found``)."""
    try:
        yield
    except SlackApiError as exc:
        raise DeliveryError(f"slack: {exc.response.get('error', exc)}") from exc


DELIVERY_EVENT = "chatgate_delivery"
"""The ``event_type`` of the message metadata every message chatgate posts carries: its
``event_payload`` holds the delivery key, so a resend can find what was posted already."""


@contextlib.contextmanager
def unless(error: str) -> Iterator[None]:
    """Slack's ``error`` is no error here (a reaction already there, or gone already)."""
    try:
        yield
    except SlackApiError as exc:
        if exc.response.get("error") != error:
            raise


UNMARKED = ""
"""Where ``SlackSender._posted`` puts the bot's first message that carries no delivery key."""
STREAM_PREFIX = "stream:"
"""How a live message that is a chat stream is journaled (``stream:<ts>``); a posted one is
its bare ``ts``."""


def is_dm(channel: str) -> bool:
    """A direct message with the app (only the person and the bot are in it)."""
    return channel.startswith("D")


def delivery_metadata(key: str) -> dict[str, object]:
    """The message metadata naming a delivery (a reply's chunk, a prompt)."""
    return {"event_type": DELIVERY_EVENT, "event_payload": {"key": key}}


_MENTION = re.compile(r"<(?=[!@#])")


def defang(markdown: str) -> str:
    """The model's Markdown for a chat stream, with Slack's mention syntax broken
    (``<!channel>``, ``<@U123>``, ``<#C123>``: a zero-width space after the ``<``), as the
    posted replies' rendering escapes it: nothing the model writes pings anyone."""
    return _MENTION.sub("<\u200b", markdown)


def sendable(text: str) -> str:
    """What of the text so far may go to the stream: defanged, and without a last ``<``
    whose next character (a mention's?) is not written yet."""
    safe = defang(text)
    return safe[:-1] if safe.endswith("<") else safe
