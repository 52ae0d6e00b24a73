"""Fire times in real instants: elapsed-time steps, calendar-day steps and cron, forwards
and backwards, with the daylight-saving rules of ``agent_core.scheduling.recurrence``.

Cron and day steps are walked in wall-clock time and then placed on instants: a time in a
spring-forward gap fires when the gap ends (a fixed-hour job) or not at all (a wildcard-hour
job: that hour did not exist); a time in the repeated fall-back hour fires once (fixed hour)
or at both occurrences (wildcard hour). The sequences are strictly monotonic and free of
duplicates.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter  # type: ignore[import-untyped]

_MINUTE = timedelta(minutes=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def elapsed_ascending(anchor: datetime, step: timedelta, after: datetime) -> Iterator[datetime]:
    k = max(1, (after - anchor) // step + 1)
    while True:
        try:
            fire = anchor + step * k
        except OverflowError:
            return
        yield fire
        k += 1


def elapsed_descending(anchor: datetime, step: timedelta, until: datetime) -> Iterator[datetime]:
    k = (until - anchor) // step
    while k >= 1:
        yield anchor + step * k
        k -= 1


def days_ascending(
    anchor: datetime, days: int, zone: ZoneInfo, after: datetime
) -> Iterator[datetime]:
    base = _wall(anchor, zone)
    step = timedelta(days=days)
    # One step early: a DST offset moves an instant by less than a day.
    k = max(1, (_wall(after, zone) - base) // step - 1)
    last = after
    while True:
        try:
            fire = _fixed_instant(base + step * k, zone)
        except OverflowError:
            return
        if fire > last:
            last = fire
            yield fire
        k += 1


def days_descending(
    anchor: datetime, days: int, zone: ZoneInfo, until: datetime
) -> Iterator[datetime]:
    base = _wall(anchor, zone)
    step = timedelta(days=days)
    k = (_wall(until, zone) - base) // step + 1
    last: datetime | None = None
    while k >= 1:
        try:
            fire = _fixed_instant(base + step * k, zone)
        except OverflowError:
            k -= 1
            continue
        if fire <= until and (last is None or fire < last):
            last = fire
            yield fire
        k -= 1


def cron_ascending(expression: str, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    both_folds = _hour_is_wildcard(expression)
    low_offset, _high_offset = _offset_bounds(zone, after)
    # Every wall time that can map to an instant after `after` lies after this one.
    walls = croniter(expression, after.replace(tzinfo=None) + low_offset - _MINUTE)
    pending: list[datetime] = []
    last = after
    while True:
        try:
            wall: datetime = walls.get_next(datetime)
            instants, low, _high = _instants(wall, zone, both_folds=both_folds)
        except (ValueError, OverflowError):  # no further match, or past year 9999
            break
        for instant in instants:
            heapq.heappush(pending, instant)
        # Later wall times map to instants >= low: everything up to it is final.
        while pending and pending[0] <= low:
            instant = heapq.heappop(pending)
            if instant > last:
                last = instant
                yield instant
    for instant in sorted(pending):
        if instant > last:
            last = instant
            yield instant


def cron_descending(expression: str, zone: ZoneInfo, until: datetime) -> Iterator[datetime]:
    both_folds = _hour_is_wildcard(expression)
    _low_offset, high_offset = _offset_bounds(zone, until)
    # Every wall time that can map to an instant at or before `until` lies before this one.
    walls = croniter(expression, until.replace(tzinfo=None) + high_offset + _MINUTE)
    pending: list[tuple[timedelta, datetime]] = []
    last: datetime | None = None
    while True:
        try:
            wall: datetime = walls.get_prev(datetime)
            instants, _low, high = _instants(wall, zone, both_folds=both_folds)
        except (ValueError, OverflowError):  # no earlier match, or before year 1
            break
        for instant in instants:
            heapq.heappush(pending, (_EPOCH - instant, instant))
        # Earlier wall times map to instants <= high: everything from it on is final.
        while pending and pending[0][1] >= high:
            _key, instant = heapq.heappop(pending)
            if instant <= until and (last is None or instant < last):
                last = instant
                yield instant
    for _key, instant in sorted(pending):
        if instant <= until and (last is None or instant < last):
            last = instant
            yield instant


def _hour_is_wildcard(expression: str) -> bool:
    return expression.split()[1].startswith("*")


def _instants(
    wall: datetime, zone: ZoneInfo, *, both_folds: bool
) -> tuple[tuple[datetime, ...], datetime, datetime]:
    """Map a naive local wall time to its fire instants (UTC), per the DST rules.

    Returns the instants and two bounds: every later wall time maps to instants >= the low
    bound, every earlier one to instants <= the high bound.
    """
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    low, high = min(first, second), max(first, second)
    if first == second:
        return (first,), low, high
    if first.astimezone(zone).replace(tzinfo=None) == wall:  # ambiguous: it happens twice
        return ((low, high) if both_folds else (low,)), low, high
    if both_folds:  # in a gap: that hour did not exist
        return (), low, high
    return (_gap_end(low, high, zone),), low, high


def _fixed_instant(wall: datetime, zone: ZoneInfo) -> datetime:
    instants, _low, _high = _instants(wall, zone, both_folds=False)
    return instants[0]


def _gap_end(before: datetime, after: datetime, zone: ZoneInfo) -> datetime:
    """The instant the clocks jump, between ``before`` (old offset) and ``after`` (new)."""
    base = before.replace(microsecond=0)
    old = base.astimezone(zone).utcoffset()
    second = timedelta(seconds=1)
    low, high = 0, -(-(after - base) // second)
    while high - low > 1:
        middle = (low + high) // 2
        if (base + middle * second).astimezone(zone).utcoffset() == old:
            low = middle
        else:
            high = middle
    return base + high * second


def _wall(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def _offset_bounds(zone: ZoneInfo, around: datetime) -> tuple[timedelta, timedelta]:
    """The smallest and largest UTC offsets of ``zone`` within a day and a half of ``around``."""
    offsets: list[timedelta] = []
    for hours in range(-36, 37, 6):
        try:
            offset = (around + timedelta(hours=hours)).astimezone(zone).utcoffset()
        except OverflowError:
            continue
        if offset is not None:
            offsets.append(offset)
    if not offsets:
        return timedelta(0), timedelta(0)
    return min(offsets), max(offsets)
