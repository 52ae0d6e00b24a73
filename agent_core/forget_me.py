"""``forget me`` in a chat: the confirmation it asks with buttons, and what a press says.

A press carries everything it needs (stateless, so a restart between question and press
loses nothing): erase or keep, when it was asked, and a tag of who asked. It counts only
when the person pressing is the one who asked, within ``LIFETIME``; it only ever erases the
presser's own data."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timedelta
from typing import Literal

from pydantic import JsonValue

from agent_core.journaled import Choice, Choices

LIFETIME = timedelta(minutes=15)
_VALUE = re.compile(r"(?P<verdict>[yn])_(?P<minute>[0-9a-f]{1,10})_(?P<tag>[0-9a-f]{12})")
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
    shape = _VALUE.fullmatch(value)
    if shape is None:
        return "That button is not one of chatgate's."
    if shape["tag"] != _tag(user):
        return "Only the person who asked to be forgotten can answer that."
    asked = int(shape["minute"], 16) * 60
    # Asked up to a minute "from now" is another gateway whose clock runs a little ahead.
    if not -60 <= now.timestamp() - asked <= LIFETIME.total_seconds():
        return "That question has expired: send `forget me` again."
    return "erase" if shape["verdict"] == "y" else "keep"


def receipt_text(receipt: dict[str, JsonValue]) -> str:
    """What the chat is told once a person is erased."""
    return (
        f"Erased {receipt.get('user')}'s data: {receipt.get('messages')} messages, "
        f"{receipt.get('memories')} memories, {receipt.get('schedules')} schedules and "
        f"{receipt.get('files')} files. Usage counts stay, without any words."
    )
