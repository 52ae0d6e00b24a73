"""Secrets the model may refer to by name (``{{secret:NAME}}``) but never see.

The wiring point reads each configured environment variable once and hands the values in,
each with the hosts it may be sent to (``[secrets.NAME] hosts``; none listed: any host
``http_request`` may reach). Tools substitute them at execution; every tool output and
every log line is scrubbed before it is stored, shown to the model or written.

Scrubbing covers the ways a server (or a prompt injection steering one) could hand a value
back in disguise: the value itself, reversed, URL-encoded, base64 (standard and URL-safe,
also inside a longer base64 text such as ``Basic user:token``), hex, JSON-escaped, and any
run of 8 or more of its characters.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import traceback
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, quote_plus

_REFERENCE = re.compile(r"\{\{\s*secret:([A-Za-z0-9_]+)\s*\}\}")
_RUN = 8


def without_cut_edge(text: str) -> str:
    """Text cut off at a size limit, without its last few characters: the start of a
    secret (shorter than a run the scrubber knows) could stand there unmatched."""
    return text[: -(_RUN - 1)]


def refers_to_secret(text: str) -> bool:
    """Does ``text`` hold a ``{{secret:NAME}}`` reference (however it is spaced)?"""
    return _REFERENCE.search(text) is not None


class UnknownSecret(KeyError):
    """The model referred to a secret name that is not configured."""


@dataclass(frozen=True, slots=True)
class _Secret:
    name: str
    value: str
    # None: every host http_request may reach.
    hosts: tuple[str, ...] | None
    # The value's whole disguises; and its runs of _RUN characters, looked up per window
    # (a pattern of hundreds of alternatives is slow on a long text).
    pattern: re.Pattern[str]
    runs: frozenset[str]


class Secrets:
    """Named secret values: find references, substitute them, scrub values."""

    def __init__(
        self,
        values: Mapping[str, str] | None = None,
        *,
        hosts: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        bound = hosts or {}
        self._secrets = {
            name: _Secret(
                name=name,
                value=value,
                hosts=tuple(h.lower() for h in bound[name]) if name in bound else None,
                pattern=_disguises(value),
                runs=_runs(value),
            )
            for name, value in (values or {}).items()
            if value
        }
        # Longest first, so a value that contains another is scrubbed whole.
        self._order = sorted(self._secrets.values(), key=lambda s: -len(s.value))

    @property
    def names(self) -> tuple[str, ...]:
        """The names the model may use."""
        return tuple(sorted(self._secrets))

    def referenced(self, texts: Iterable[str]) -> list[str]:
        """The names referred to in ``texts``, in order, once each; unknown names raise."""
        found: list[str] = []
        for text in texts:
            for match in _REFERENCE.finditer(text):
                name = match.group(1)
                if name not in self._secrets:
                    raise UnknownSecret(name)
                if name not in found:
                    found.append(name)
        return found

    def hosts(self, name: str) -> tuple[str, ...] | None:
        """Where a secret may be sent (host or host:port entries); None: anywhere allowed."""
        return self._secrets[name].hosts

    def substitute(self, text: str) -> str:
        """Replace every ``{{secret:NAME}}`` with its value; unknown names raise."""

        def value(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in self._secrets:
                raise UnknownSecret(name)
            return self._secrets[name].value

        return _REFERENCE.sub(value, text)

    def scrub(self, text: str) -> str:
        """Replace every secret value in ``text``, in any of its disguises, with
        ``[secret:NAME]``. Where two secrets' matches overlap, the longer match names it."""
        found: list[tuple[int, int, str]] = []
        # Runs are looked up in lower case (a lower-casing that changes the length, as a
        # few letters' do, is not used: the windows must stay aligned with ``text``).
        folded = text.lower()
        if len(folded) != len(text):
            folded = text
        for secret in self._order:
            found += [(start, end, secret.name) for start, end in _spans(secret.pattern, text)]
            if secret.runs:
                found += [
                    (i, i + _RUN, secret.name)
                    for i in range(len(text) - _RUN + 1)
                    if folded[i : i + _RUN] in secret.runs
                ]
        if not found:
            return text
        found.sort()
        merged: list[tuple[int, int, str, int]] = []  # start, end, name, its match's length
        for start, end, name in found:
            if merged and start <= merged[-1][1]:
                first, last, named, length = merged[-1]
                if end - start > length:
                    named, length = name, end - start
                merged[-1] = (first, max(last, end), named, length)
            else:
                merged.append((start, end, name, end - start))
        parts, last = [], 0
        for start, end, name, _length in merged:
            parts += [text[last:start], f"[secret:{name}]"]
            last = end
        parts.append(text[last:])
        return "".join(parts)

    def scrub_value(self, value: Any) -> Any:
        """``scrub`` applied to a string, or to the strings inside lists, tuples and dicts."""
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, Mapping):
            return {k: self.scrub_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.scrub_value(v) for v in value)
        return value

    def __bool__(self) -> bool:
        return bool(self._secrets)


def _disguises(value: str) -> re.Pattern[str]:
    """One pattern that finds the value's disguises; matched with a look-ahead, so
    overlapping runs are all found (their spans are merged by the caller)."""
    raw = value.encode()
    forms = {
        value,
        value[::-1],
        quote(value, safe=""),
        quote_plus(value),
        "".join(f"%{byte:02X}" for byte in raw),  # every byte escaped, letters too
        raw.hex(),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
    }
    forms |= _as_in_urls(value)
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        forms |= _base64_cores(raw, encode)
    alternatives = "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True) if f)
    # In any letter case: upper-cased, %xx or %XX, hex either way (base64 matched without
    # regard to case only scrubs more).
    return re.compile(f"(?=({alternatives}))", re.IGNORECASE)


def _as_in_urls(value: str) -> set[str]:
    """The value as ``http_request``'s client (httpx) writes it into a URL's path and its
    query, where it leaves some characters raw and escapes others (a mix no other form
    matches: an echo of the request line gave a secret back whole)."""
    import httpx

    forms = set()
    for prefix, part in (("http://h/", "raw_path"), ("http://h/?q=", "query")):
        with contextlib.suppress(Exception):
            written = getattr(httpx.URL(prefix + value), part).decode()
            forms.add(written[len("/") :] if part == "raw_path" else written[len("q=") :])
    return forms


def _runs(value: str) -> frozenset[str]:
    """Every run of _RUN characters of the value (none for a shorter value)."""
    if len(value) < _RUN:
        return frozenset()
    folded = value.lower()
    return frozenset(folded[i : i + _RUN] for i in range(len(folded) - _RUN + 1))


def _base64_cores(raw: bytes, encode: Any) -> set[str]:
    """The characters of the value's base64 that do not depend on what surrounds it, for
    each of the three alignments it can have inside a longer text."""
    cores = set()
    for offset in range(3):
        encoded = encode(b"\0" * offset + raw).decode().rstrip("=")
        total = offset + len(raw)
        start = (offset * 4 + 2) // 3
        end = total // 3 * 4
        core = encoded[start:end]
        if len(core) >= min(_RUN, len(encoded)):
            cores.add(core)
    cores.add(encode(raw).decode())
    return cores


def _spans(pattern: re.Pattern[str], text: str) -> list[tuple[int, int]]:
    """Where the pattern matches, overlapping matches merged."""
    merged: list[tuple[int, int]] = []
    for match in pattern.finditer(text):
        start, end = match.start(), match.start() + len(match.group(1))
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


class LogScrubber:
    """A structlog processor (and, through :meth:`filter`, a ``logging`` filter) that
    scrubs every credential chatgate holds from each log event, exception text included."""

    def __init__(self, secrets: Secrets) -> None:
        self._secrets = secrets

    def __call__(self, _logger: object, _method: str, event: Any) -> Any:
        """Scrub an event dict's values (run it after the exception is rendered)."""
        if not self._secrets:
            return event
        return {key: self._secrets.scrub_value(value) for key, value in event.items()}

    def filter(self, record: Any) -> bool:
        """``logging.Filter`` protocol: scrub the formatted message and the exception text
        of a standard-library record (libraries log through it) before it is written."""
        if not self._secrets:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a library's own bad format string: logging reports it
            return True
        record.msg = self._secrets.scrub(message)
        record.args = None
        if record.exc_info:
            text = "".join(traceback.format_exception(*record.exc_info))
            record.exc_text = self._secrets.scrub(text)
            record.exc_info = None
        return True
