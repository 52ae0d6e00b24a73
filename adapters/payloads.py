"""Bodies from outside, checked before anything reads them: valid UTF-8, JSON that is not
absurdly deep, and text a database can store (no NUL, no unpaired surrogate; PostgreSQL
refuses the first, every encoder the second). Whatever fails is a :class:`BadRequest`
(400), never an exception that reaches the error handler as a 500."""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping, Sequence
from urllib.parse import parse_qsl

from adapters.base import BadRequest

# Nothing chatgate reads nests deeper than a few levels.
MAX_DEPTH = 64


def load_json(raw: bytes) -> object:
    """Parse a JSON body, refusing what could not be stored or processed safely."""
    text = decode(raw)
    try:
        value = json.loads(text)
    except RecursionError:
        raise BadRequest(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from None
    check(value)
    return value


def decode(raw: bytes) -> str:
    """The body as text: UTF-8 or a 400."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("body is not valid UTF-8") from None


def load_form(raw: bytes) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body, every value checked."""
    try:
        fields = dict(parse_qsl(decode(raw), keep_blank_values=True, errors="strict"))
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("body is not a valid form") from None
    check(fields)
    return fields


def check(value: object) -> None:
    """Raise :class:`BadRequest` when a string inside ``value`` (keys included) holds a NUL
    or an unpaired surrogate, or when it nests deeper than :data:`MAX_DEPTH`."""
    pending: list[tuple[object, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise BadRequest(f"JSON nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, Mapping):
            for key, child in item.items():
                _check_text(str(key))
                pending.append((child, depth + 1))
        elif isinstance(item, Sequence) and not isinstance(item, bytes):
            pending.extend((child, depth + 1) for child in item)


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise BadRequest("text must not contain NUL characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest("text must not contain unpaired surrogates") from None


def same_secret(presented: str, expected: str) -> bool:
    """Constant-time comparison of a value from a request header (which may hold any byte,
    a non-UTF-8 one arriving as a lone surrogate) with a configured secret."""
    return hmac.compare_digest(
        presented.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")
    )
