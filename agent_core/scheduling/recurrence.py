"""When scheduled jobs fire: parse what a person (or the model) typed, and compute fire times.

Pure: no I/O and no clock. Every "now" is an argument; every instant going in or out is an
aware datetime, and every instant coming out is in UTC.

Three kinds of schedule
-----------------------
``cron``
    Five fields (minute hour day-of-month month day-of-week), read in the wall-clock time of
    the schedule's IANA time zone. ``@hourly @daily @weekly @monthly @yearly`` are stored as
    their five-field equivalents; six- and seven-field expressions (seconds, years), other
    macros and the hashed/random ``H``/``R`` values are refused. Field syntax is croniter's:
    names (``mon-fri``), steps, lists, ranges, and ``L``/``#``/``W``; when both day fields
    are restricted a day matching either one fires, as in standard cron.
``interval``
    ``every N`` seconds, minutes, hours or days, stored as ``every 2h`` together with an
    *anchor*: the instant the schedule was created. ``s``/``m``/``h`` are elapsed time: fires
    are at ``anchor + k*N`` (k >= 1), computed arithmetically and untouched by daylight
    saving time. ``d`` means calendar days at the anchor's local wall-clock time: the k-th
    fire is the anchor's local date-time plus ``k*N`` days, mapped to an instant with the
    fixed-time rules below (a daily 09:00 job stays at 09:00 across a DST change).
``once``
    A single instant, stored as an ISO-8601 UTC string. Typed as ``in 2h`` (now plus an
    absolute duration) or as a date-time (``2026-12-01 09:00``, optional seconds, optional
    ``Z`` or ``+01:00``); without an offset it is wall-clock time in the schedule's zone.
    A date-time that does not exist there (the clocks skip it) is refused; an ambiguous one
    (the clocks repeat it) means its first occurrence. A time that is not in the future is
    refused.

Daylight saving time
--------------------
Cron fields are matched against naive local wall-clock times (pure calendar arithmetic),
and each matching wall time W is then mapped to real instants:

* W exists once: its instant.
* W falls in a spring-forward gap (it never happens on the clock):
    - a schedule whose hour field is a wildcard (it starts with ``*``: ``*``, ``*/2``) skips
      it: that hour did not exist, so an hourly job simply runs once fewer;
    - a fixed-hour schedule (and a ``d`` interval) fires at the instant the gap ends, so a
      job at 02:30 runs at 03:00 local on that day instead of being silently skipped.
* W falls in the repeated hour of a fall-back change (it happens twice):
    - a fixed-hour schedule (and a ``d`` interval) fires once, at the first occurrence;
    - a wildcard-hour schedule fires at both occurrences, so an hourly job keeps running
      every real hour (25 runs that day), rather than pausing for an hour.

The resulting instants form a strictly increasing sequence without duplicates (several wall
times mapped to the same gap end fire once).

Missed fires
------------
:func:`due_slots` tells a dispatcher what to run on a tick. The slots are the stored next
run and every later fire up to now. A slot is on time when it is at most ``grace`` old;
on-time slots always run. Older ("missed") slots follow the policy: ``skip`` drops them,
``run_once`` runs one for the most recent, ``catch_up`` runs the most recent
``catch_up_max``. Large backlogs cost nothing extra: the needed slots are found by walking
backwards from now (arithmetically for intervals), never by replaying the backlog.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise
from typing import Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter  # type: ignore[import-untyped]

from agent_core.scheduling import fire_times

ScheduleKind = Literal["cron", "interval", "once"]
MissedPolicy = Literal["skip", "run_once", "catch_up"]

__all__ = [
    "MissedPolicy",
    "Recurrence",
    "ScheduleError",
    "ScheduleKind",
    "due_slots",
    "min_gap",
    "parse_recurrence",
]


class ScheduleError(ValueError):
    """The schedule or its time zone is invalid.

    ``str(exc)`` is one line meant for a person (and the model) to read, e.g.
    ``'61 * * * *' is not a valid cron expression: bad minute field '61' (...)``.
    """


_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
}
_FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")
_HASHED = re.compile(r"[hr](\(\d+-\d+\))?(/\d+)?")

_UNITS = {
    "s": "s",
    "sec": "s",
    "secs": "s",
    "second": "s",
    "seconds": "s",
    "m": "m",
    "min": "m",
    "mins": "m",
    "minute": "m",
    "minutes": "m",
    "h": "h",
    "hr": "h",
    "hrs": "h",
    "hour": "h",
    "hours": "h",
    "d": "d",
    "day": "d",
    "days": "d",
}
_UNIT_STEP = {
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
}
# Longer than any sensible schedule, short enough that datetime arithmetic cannot overflow.
_MAX_SPAN = timedelta(days=36525)
_AMOUNT = re.compile(r"(?P<word>every|in)\s*(?P<count>\d+)?\s*(?P<unit>[a-z]*)")
_STORED_INTERVAL = re.compile(r"every ([1-9][0-9]*)([smhd])")
_ISO = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})(?:t|\s+)"
    r"(?P<time>\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)\s*"
    r"(?P<offset>z|[+-]\d{2}:?\d{2})?"
)

_TICK = timedelta(microseconds=1)
_STEP_BUDGET = 10_000


@dataclass(frozen=True, slots=True)
class Recurrence:
    """A validated schedule, as stored: kind, normalized spec, time zone and anchor.

    ``anchor`` (aware, UTC) is the creation instant of an interval schedule and ``None`` for
    the other kinds. Constructing one checks that the fields are in stored form and raises
    :class:`ScheduleError` otherwise.
    """

    kind: ScheduleKind
    spec: str
    timezone: str
    anchor: datetime | None = None

    def __post_init__(self) -> None:
        _zone(self.timezone)
        if self.kind == "cron":
            normalized = _normalize_cron(self.spec)
            if normalized != self.spec:
                raise ScheduleError(
                    f"{self.spec!r} is not a stored cron spec (expected {normalized!r})"
                )
        elif self.kind == "interval":
            _stored_interval(self.spec)
            if self.anchor is None:
                raise ScheduleError(f"the interval schedule {self.spec!r} has no anchor")
            if self.anchor.utcoffset() is None:
                raise ScheduleError(f"the anchor of {self.spec!r} has no time zone")
            object.__setattr__(self, "anchor", self.anchor.astimezone(UTC))
        elif self.kind == "once":
            _stored_instant(self.spec)
        else:
            raise ScheduleError(f"unknown schedule kind {self.kind!r}")
        if self.kind != "interval" and self.anchor is not None:
            raise ScheduleError(f"a {self.kind} schedule has no anchor")

    @classmethod
    def from_stored(
        cls, kind: str, spec: str, timezone: str, anchor: datetime | None
    ) -> Recurrence:
        """Rebuild a schedule from its database columns.

        Nothing is compared with the current time (a stored one-shot may well be past). Raises
        :class:`ScheduleError` when the columns do not hold a stored schedule.
        """
        for known in get_args(ScheduleKind):
            if kind == known:
                return cls(kind=known, spec=spec, timezone=timezone, anchor=anchor)
        raise ScheduleError(f"unknown schedule kind {kind!r}")

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire time strictly after ``after`` (aware in, aware UTC out).

        ``None`` when there is none: a one-shot at or before ``after``, a cron expression
        that matches no further date.
        """
        return next(_ascending(self, _as_utc(after, "after")), None)

    def describe(self) -> str:
        """Human text: ``cron 0 9 * * 1-5 (Europe/Berlin)``, ``every 2h``,
        ``every 1d at 09:00 (Europe/Berlin)``,
        ``once at 2026-12-01 10:00 CET (2026-12-01 09:00 UTC)``."""
        zone = _zone(self.timezone)
        if self.kind == "cron":
            return f"cron {self.spec} ({self.timezone})"
        if self.kind == "interval":
            _count, unit = _stored_interval(self.spec)
            if unit == "d" and self.anchor is not None:
                local = self.anchor.astimezone(zone)
                return f"{self.spec} at {_clock(local)} ({self.timezone})"
            return self.spec
        instant = _stored_instant(self.spec)
        local = instant.astimezone(zone)
        utc_text = f"{instant:%Y-%m-%d} {_clock(instant)} UTC"
        local_text = f"{local:%Y-%m-%d} {_clock(local)} {local.tzname()}"
        if local_text == utc_text:
            return f"once at {utc_text}"
        return f"once at {local_text} ({utc_text})"


def parse_recurrence(spec: str, timezone: str, *, now: datetime) -> Recurrence:
    """Parse a schedule as a person or the model typed it.

    Accepted forms (case- and whitespace-insensitive):

    * a five-field cron expression, or ``@hourly @daily @weekly @monthly @yearly``;
    * ``every N{s,m,h,d}`` (also ``every 90 minutes``, ``every 2 hours``, ``every day``):
      an interval anchored at ``now``; its first fire is ``now + N``;
    * ``in N{s,m,h,d}`` (also ``in 2 hours``): a one-shot at ``now + N`` (elapsed time);
    * an ISO-8601 date-time (``2026-12-01T09:00``, ``2026-12-01 09:00:30``, optionally
      ending in ``Z`` or an offset like ``+01:00``): a one-shot; without an offset it is
      wall-clock time in ``timezone``.

    ``timezone`` is an IANA name (``Europe/Berlin``); ``now`` is an aware datetime. Raises
    :class:`ScheduleError` with a one-line explanation when the schedule cannot be used: bad
    syntax, unknown time zone, a one-shot not in the future, a local time that does not
    exist, a cron expression that never fires, a time past what a date can hold.
    """
    try:
        return _parse(spec, timezone, now=now)
    except OverflowError:
        raise ScheduleError(f"{' '.join(spec.split())!r} is too far away") from None


def _parse(spec: str, timezone: str, *, now: datetime) -> Recurrence:
    now = _as_utc(now, "now")
    key = timezone.strip()
    zone = _zone(key)
    text = " ".join(spec.split())
    if not text:
        raise ScheduleError(
            "the schedule is empty: give a cron expression, 'every N{s,m,h,d}', "
            "'in N{s,m,h,d}' or a date-time"
        )
    lowered = text.lower()
    if lowered.startswith(("every", "in")):
        word, count, unit = _parse_amount(text, lowered)
        span = count * _UNIT_STEP[unit]
        if word == "every":
            return Recurrence("interval", f"every {count}{unit}", key, anchor=now)
        return Recurrence("once", (now + span).isoformat(), key)
    if re.match(r"\d{4}-", lowered):
        instant = _parse_datetime(text, lowered, zone, key)
        if instant <= now:
            raise ScheduleError(
                f"{text!r} ({_utc_text(instant)}) is in the past (it is now {_utc_text(now)})"
            )
        return Recurrence("once", instant.isoformat(), key)
    recurrence = Recurrence("cron", _normalize_cron(text), key)
    if recurrence.next_after(now) is None:
        raise ScheduleError(f"{text!r} never fires: no date matches it")
    return recurrence


def min_gap(rec: Recurrence, *, start: datetime, samples: int = 50) -> timedelta | None:
    """The smallest gap between consecutive fires among the first ``samples`` after ``start``.

    ``None`` for a one-shot (or a schedule with fewer than two fires left). Meant for
    enforcing a minimum interval: ``* * * * *`` gives 60 s, ``every 5s`` gives 5 s.
    """
    if samples < 2:
        raise ValueError("samples must be at least 2")
    if rec.kind == "once":
        return None
    fires = list(islice(_ascending(rec, _as_utc(start, "start")), samples))
    return min((later - earlier for earlier, later in pairwise(fires)), default=None)


def due_slots(
    rec: Recurrence,
    *,
    next_run_at: datetime,
    now: datetime,
    policy: MissedPolicy,
    grace: timedelta,
    catch_up_max: int,
) -> tuple[list[datetime], datetime | None]:
    """What a dispatcher tick should fire, and when the schedule fires next.

    The slots are ``next_run_at`` and every later fire at or before ``now``. A slot is on time
    when ``now - slot <= grace``, else missed. Returns the slots to fire (ascending, UTC) and
    the first fire strictly after ``now`` (``None`` when there is none):

    * on-time slots always fire (at most ``catch_up_max + 10000`` of them, the most recent,
      as a safety valve against an absurd ``grace``);
    * ``skip``: missed slots are dropped;
    * ``run_once``: if any slot was missed, one run for the most recent missed slot;
    * ``catch_up``: the most recent ``catch_up_max`` missed slots.

    When ``next_run_at`` is after ``now`` nothing is due: ``([], next_run_at)``.
    """
    if grace < timedelta(0):
        raise ValueError("grace must not be negative")
    if catch_up_max < 0:
        raise ValueError("catch_up_max must not be negative")
    if policy not in get_args(MissedPolicy):
        raise ValueError(f"unknown missed-run policy {policy!r}")
    next_run_at = _as_utc(next_run_at, "next_run_at")
    now = _as_utc(now, "now")
    if next_run_at > now:
        return [], next_run_at
    cutoff = now - grace

    on_time: list[datetime] = []
    budget = catch_up_max + _STEP_BUDGET
    complete = True
    for fire in _descending(rec, now):
        if fire <= next_run_at or fire < cutoff:
            break
        if len(on_time) == budget:
            complete = False
            break
        on_time.append(fire)
    if complete and next_run_at >= cutoff:
        on_time.append(next_run_at)
    on_time.reverse()

    keep = {"skip": 0, "run_once": 1, "catch_up": catch_up_max}[policy]
    missed: list[datetime] = []
    if keep and next_run_at < cutoff:
        for fire in _descending(rec, cutoff - _TICK):
            if fire <= next_run_at or len(missed) == keep:
                break
            missed.append(fire)
        if len(missed) < keep:
            missed.append(next_run_at)
        missed.reverse()
    return missed + on_time, rec.next_after(now)


# --- parsing ------------------------------------------------------------------------------


def _zone(key: str) -> ZoneInfo:
    try:
        return ZoneInfo(key)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ScheduleError(
            f"unknown time zone {key!r}: use an IANA name such as 'Europe/Berlin' or 'UTC'"
        ) from exc


def _as_utc(value: datetime, name: str) -> datetime:
    if value.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got {value!r}")
    return value.astimezone(UTC)


def _parse_amount(text: str, lowered: str) -> tuple[str, int, str]:
    """``every 2 hours`` -> ("every", 2, "h"); ``in 90m`` -> ("in", 90, "m")."""
    match = _AMOUNT.fullmatch(lowered)
    if match is None:
        raise ScheduleError(
            f"{text!r} is not a valid interval: write 'every N' or 'in N' followed by "
            "s, m, h or d (e.g. 'every 2h', 'in 90 minutes')"
        )
    word, digits, unit_word = match["word"], match["count"], match["unit"]
    if digits is None and word == "in":
        raise ScheduleError(f"{text!r} needs a number: write e.g. 'in 2h' or 'in 90 minutes'")
    if not unit_word:
        raise ScheduleError(
            f"{text!r} has no unit: add s, m, h or d (e.g. '{word} {digits or 1}h')"
        )
    unit = _UNITS.get(unit_word)
    if unit is None:
        raise ScheduleError(
            f"{text!r} has an unknown unit {unit_word!r}: use s, m, h or d "
            "(seconds, minutes, hours, days)"
        )
    count = 1 if digits is None else int(digits)
    if count == 0:
        raise ScheduleError(f"{text!r} is a zero interval: the amount must be at least 1")
    if count * _UNIT_STEP[unit] > _MAX_SPAN:
        raise ScheduleError(f"{text!r} is too long: at most 100 years")
    return word, count, unit


def _parse_datetime(text: str, lowered: str, zone: ZoneInfo, key: str) -> datetime:
    match = _ISO.fullmatch(lowered)
    if match is None:
        raise ScheduleError(
            f"{text!r} is not a valid date-time: write YYYY-MM-DD HH:MM[:SS], optionally "
            "followed by Z or an offset like +01:00"
        )
    offset = match["offset"]
    iso = f"{match['date']}T{match['time']}{'+00:00' if offset == 'z' else offset or ''}"
    try:
        parsed = datetime.fromisoformat(iso)
    except ValueError as exc:
        raise ScheduleError(f"{text!r} is not a valid date-time: {exc}") from exc
    if parsed.tzinfo is not None:
        return parsed.astimezone(UTC)
    local = parsed.replace(tzinfo=zone)
    instant = local.astimezone(UTC)
    if instant.astimezone(zone).replace(tzinfo=None) != parsed:
        raise ScheduleError(
            f"{text!r} does not exist in {key}: the clocks skip that time when daylight "
            "saving time starts"
        )
    return instant


def _normalize_cron(text: str) -> str:
    """Check a cron expression (or macro) and return it as five single-spaced fields."""
    fields = text.lower().split()
    if not fields:
        raise ScheduleError("the cron expression is empty")
    if fields[0].startswith("@"):
        if len(fields) == 1 and fields[0] in _MACROS:
            return _MACROS[fields[0]]
        raise ScheduleError(
            f"{text!r} is not a supported cron macro: use @hourly, @daily, @weekly, @monthly "
            "or @yearly, or five fields"
        )
    if len(fields) in (6, 7):
        raise ScheduleError(
            f"{text!r} has {len(fields)} fields: seconds and years are not supported; use 5 "
            "fields (minute hour day-of-month month day-of-week)"
        )
    if len(fields) != 5:
        raise ScheduleError(
            f"{text!r} is not a valid cron expression: expected 5 fields (minute hour "
            f"day-of-month month day-of-week), got {len(fields)}"
        )
    for name, field in zip(_FIELD_NAMES, fields, strict=True):
        if any(_HASHED.fullmatch(part) for part in field.split(",")):
            raise ScheduleError(
                f"{text!r} is not a valid cron expression: hashed or random values (H, R) "
                f"in the {name} field are not supported"
            )
    normalized = " ".join(fields)
    problem = _cron_problem(normalized)
    if problem is None:
        return normalized
    for index, (name, field) in enumerate(zip(_FIELD_NAMES, fields, strict=True)):
        alone = ["*"] * 5
        alone[index] = field
        field_problem = _cron_problem(" ".join(alone))
        if field_problem is not None:
            raise ScheduleError(
                f"{text!r} is not a valid cron expression: bad {name} field {field!r} "
                f"({field_problem})"
            )
    raise ScheduleError(f"{text!r} is not a valid cron expression: {problem}")


def _cron_problem(expression: str) -> str | None:
    try:
        croniter(expression, datetime(2000, 1, 1))
    except (ValueError, TypeError, KeyError) as exc:
        # croniter says "[61 * * * *] is not acceptable, out of range": keep the reason.
        reason = re.sub(r"^\[[^\]]*\]\s*(is\s+)?", "", " ".join(str(exc).split()))
        return reason or type(exc).__name__
    return None


def _stored_interval(spec: str) -> tuple[int, str]:
    match = _STORED_INTERVAL.fullmatch(spec)
    if match is None:
        raise ScheduleError(f"{spec!r} is not a stored interval (expected e.g. 'every 2h')")
    count, unit = int(match[1]), match[2]
    if count * _UNIT_STEP[unit] > _MAX_SPAN:
        raise ScheduleError(f"{spec!r} is too long: at most 100 years")
    return count, unit


def _stored_instant(spec: str) -> datetime:
    try:
        instant = datetime.fromisoformat(spec)
    except ValueError as exc:
        raise ScheduleError(f"{spec!r} is not a stored instant: {exc}") from exc
    if instant.utcoffset() is None:
        raise ScheduleError(f"{spec!r} is not a stored instant: it has no UTC offset")
    return instant.astimezone(UTC)


def _clock(value: datetime) -> str:
    return f"{value:%H:%M:%S}" if value.second or value.microsecond else f"{value:%H:%M}"


def _utc_text(instant: datetime) -> str:
    return f"{instant:%Y-%m-%d} {_clock(instant)} UTC"


# --- fire times ---------------------------------------------------------------------------


def _ascending(rec: Recurrence, after: datetime) -> Iterator[datetime]:
    """The fires strictly after ``after`` (UTC), in increasing order."""
    zone = _zone(rec.timezone)
    if rec.kind == "cron":
        return fire_times.cron_ascending(rec.spec, zone, after)
    if rec.kind == "interval":
        assert rec.anchor is not None
        count, unit = _stored_interval(rec.spec)
        if unit == "d":
            return fire_times.days_ascending(rec.anchor, count, zone, after)
        return fire_times.elapsed_ascending(rec.anchor, count * _UNIT_STEP[unit], after)
    instant = _stored_instant(rec.spec)
    return iter([instant] if instant > after else [])


def _descending(rec: Recurrence, until: datetime) -> Iterator[datetime]:
    """The fires at or before ``until`` (UTC), latest first."""
    zone = _zone(rec.timezone)
    if rec.kind == "cron":
        return fire_times.cron_descending(rec.spec, zone, until)
    if rec.kind == "interval":
        assert rec.anchor is not None
        count, unit = _stored_interval(rec.spec)
        if unit == "d":
            return fire_times.days_descending(rec.anchor, count, zone, until)
        return fire_times.elapsed_descending(rec.anchor, count * _UNIT_STEP[unit], until)
    instant = _stored_instant(rec.spec)
    return iter([instant] if instant <= until else [])
