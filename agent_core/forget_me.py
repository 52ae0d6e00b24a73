"""``forget me`` in a chat: the confirmation it asks with buttons, and what a press says.

A press carries everything it needs (stateless, so a restart between question and press
loses nothing): erase or keep, when it was asked, and a tag of who asked. It counts only
when the person pressing is the one who asked, within ``LIFETIME``; it only ever erases the
presser's own data."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Literal

from pydantic import JsonValue

from agent_core.journaled import Choice, Choices

LIFETIME = timedelta(minutes=15)
QUESTION = (
    "This erases everything chatgate holds about you: your messages and the replies to them "
    "(each becomes a note that it was erased), what it remembers about you, your schedules "
    "and your files. How much you used is kept, without any words. It cannot be undone. "
    "Erase your data?"
)


def _tag(user: str) -> str:
    return hashlib.sha256(f"chatgate forget {user}".encode()).hexdigest()[:12]


def question(user: str, *, now: datetime) -> tuple[str, dict[str, JsonValue]]:
    """The text and the buttons (Erase my data, Keep it) that ask ``user``."""
    asked = f"{int(now.timestamp()) // 60:x}_{_tag(user)}"
    buttons = Choices(
        choices=(
            Choice(label="Erase my data", action="forget", value=f"y_{asked}"),
            Choice(label="Keep it", action="forget", value=f"n_{asked}"),
        )
    )
    return QUESTION, buttons.to_payload()


def answer(value: str, *, user: str, now: datetime) -> Literal["erase", "keep"] | str:
    """What a press means: ``erase`` or ``keep``, or why it counts for nothing."""
    verdict, _, rest = value.partition("_")
    minute, _, tag = rest.partition("_")
    try:
        asked = datetime.fromtimestamp(int(minute, 16) * 60, tz=now.tzinfo)
    except (ValueError, OverflowError, OSError):
        return "That button is not one of chatgate's."
    if verdict not in ("y", "n") or tag != _tag(user):
        return "Only the person who asked to be forgotten can answer that."
    if now - asked > LIFETIME:
        return "That question has expired: send `forget me` again."
    return "erase" if verdict == "y" else "keep"


def receipt_text(receipt: dict[str, JsonValue]) -> str:
    """What the chat is told once a person is erased."""
    return (
        f"Erased {receipt.get('user')}'s data: {receipt.get('messages')} messages, "
        f"{receipt.get('memories')} memories, {receipt.get('schedules')} schedules and "
        f"{receipt.get('files')} files. Usage counts stay, without any words."
    )
