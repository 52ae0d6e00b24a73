"""Schedules: parsing, fire times across DST changes, missed-run policies (pure)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from agent_core.scheduling.recurrence import (
    MissedPolicy,
    Recurrence,
    ScheduleError,
    due_slots,
    min_gap,
    parse_recurrence,
)

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, us: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, us, tzinfo=UTC)


def fires(rec: Recurrence, after: datetime, count: int) -> list[datetime]:
    out: list[datetime] = []
    for _ in range(count):
        nxt = rec.next_after(after)
        assert nxt is not None
        out.append(nxt)
        after = nxt
    return out


def fires_between(rec: Recurrence, start: datetime, end: datetime) -> list[datetime]:
    """Every fire in [start, end)."""
    out: list[datetime] = []
    nxt = rec.next_after(start - timedelta(microseconds=1))
    while nxt is not None and nxt < end:
        out.append(nxt)
        nxt = rec.next_after(nxt)
    return out


# --- parsing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("0 9 * * 1-5", "0 9 * * 1-5"),
        ("  0   9\t* *   MON-FRI ", "0 9 * * mon-fri"),
        ("*/15 * * * *", "*/15 * * * *"),
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@WEEKLY", "0 0 * * 0"),
        (" @monthly ", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
    ],
)
def test_cron_is_normalized(typed: str, stored: str) -> None:
    rec = parse_recurrence(typed, "Europe/Berlin", now=NOW)
    assert rec == Recurrence("cron", stored, "Europe/Berlin")
    assert rec.anchor is None


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("every 2h", "every 2h"),
        ("every2h", "every 2h"),
        ("EVERY 90 Minutes", "every 90m"),
        ("every 2 hours", "every 2h"),
        ("every   5 s", "every 5s"),
        ("every 30 secs", "every 30s"),
        ("every 3 days", "every 3d"),
        ("every day", "every 1d"),
        ("Every Hour", "every 1h"),
        ("every 010m", "every 10m"),
    ],
)
def test_interval_is_normalized_and_anchored_at_now(typed: str, stored: str) -> None:
    rec = parse_recurrence(typed, "UTC", now=NOW)
    assert (rec.kind, rec.spec, rec.timezone, rec.anchor) == ("interval", stored, "UTC", NOW)


def test_interval_anchor_is_stored_in_utc() -> None:
    berlin_now = datetime.fromisoformat("2026-03-01T10:00:00+01:00")
    rec = parse_recurrence("every 2h", "Europe/Berlin", now=berlin_now)
    assert rec.anchor == utc(2026, 3, 1, 9)
    assert rec.anchor is not None
    assert rec.anchor.tzinfo is UTC


@pytest.mark.parametrize(
    ("typed", "at"),
    [
        ("in 2 hours", utc(2026, 3, 1, 2)),
        ("in 90m", utc(2026, 3, 1, 1, 30)),
        ("IN 90 minutes", utc(2026, 3, 1, 1, 30)),
        ("in 45s", utc(2026, 3, 1, 0, 0, 45)),
        ("in 1d", utc(2026, 3, 2)),
    ],
)
def test_relative_one_shot(typed: str, at: datetime) -> None:
    rec = parse_recurrence(typed, "Europe/Berlin", now=NOW)
    assert rec == Recurrence("once", at.isoformat(), "Europe/Berlin")


def test_relative_one_shot_is_elapsed_time_across_dst() -> None:
    # 2026-03-29 is the EU spring-forward day: "in 1d" is 24 real hours, not 09:00 again.
    rec = parse_recurrence("in 1d", "Europe/Berlin", now=utc(2026, 3, 28, 8))
    assert rec.spec == "2026-03-29T08:00:00+00:00"


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("2026-12-01T09:00", "2026-12-01T08:00:00+00:00"),  # CET, UTC+1
        ("2026-12-01 09:00", "2026-12-01T08:00:00+00:00"),
        ("2026-12-01   09:00:30", "2026-12-01T08:00:30+00:00"),
        ("2026-07-01t09:00", "2026-07-01T07:00:00+00:00"),  # CEST, UTC+2
        ("2026-12-01T09:00Z", "2026-12-01T09:00:00+00:00"),
        ("2026-12-01T09:00:00z", "2026-12-01T09:00:00+00:00"),
        ("2026-12-01T09:00+05:00", "2026-12-01T04:00:00+00:00"),
        ("2026-12-01 09:00:00 -03:00", "2026-12-01T12:00:00+00:00"),
        # Ambiguous (the clocks fall back at 03:00 CEST): the first occurrence, CEST.
        ("2026-10-25 02:30", "2026-10-25T00:30:00+00:00"),
    ],
)
def test_absolute_one_shot(typed: str, stored: str) -> None:
    rec = parse_recurrence(typed, "Europe/Berlin", now=NOW)
    assert rec == Recurrence("once", stored, "Europe/Berlin")


@pytest.mark.parametrize(
    ("spec", "timezone", "fragments"),
    [
        ("61 * * * *", "UTC", ["'61 * * * *' is not a valid cron expression", "minute"]),
        ("0 25 * * *", "UTC", ["not a valid cron expression", "hour field '25'"]),
        ("0 9 * * funday", "UTC", ["day-of-week field 'funday'"]),
        ("0 9 * *", "UTC", ["expected 5 fields", "got 4"]),
        ("0 0 9 * * *", "UTC", ["has 6 fields", "seconds and years are not supported"]),
        ("0 0 9 * * * 2027", "UTC", ["has 7 fields"]),
        ("@reboot", "UTC", ["'@reboot' is not a supported cron macro"]),
        ("@midnight", "UTC", ["not a supported cron macro"]),
        ("H 9 * * *", "UTC", ["hashed or random"]),
        ("0 0 30 2 *", "UTC", ["'0 0 30 2 *' never fires"]),
        ("every 2w", "UTC", ["unknown unit 'w'"]),
        ("every 2 fortnights", "UTC", ["unknown unit 'fortnights'"]),
        ("every 0h", "UTC", ["'every 0h' is a zero interval"]),
        ("in 0 minutes", "UTC", ["zero interval"]),
        ("every 5", "UTC", ["has no unit"]),
        ("every 1.5h", "UTC", ["is not a valid interval"]),
        ("in hours", "UTC", ["needs a number"]),
        ("every 200000d", "UTC", ["too long"]),
        ("", "UTC", ["the schedule is empty"]),
        ("0 9 * * *", "Mars/Olympus_Mons", ["unknown time zone 'Mars/Olympus_Mons'"]),
        ("0 9 * * *", "", ["unknown time zone ''"]),
        ("0 9 * * *", "../etc/passwd", ["unknown time zone"]),
        ("2026-02-28 09:00", "UTC", ["'2026-02-28 09:00'", "is in the past"]),
        ("2026-03-01T00:00Z", "UTC", ["is in the past"]),  # exactly now: not in the future
        ("2026-12-01", "UTC", ["is not a valid date-time"]),
        ("2026-13-01 09:00", "UTC", ["is not a valid date-time", "month"]),
        (
            "2026-03-29 02:30",
            "Europe/Berlin",
            ["'2026-03-29 02:30' does not exist in Europe/Berlin", "daylight saving"],
        ),
        ("2026-03-08T02:15", "America/New_York", ["does not exist in America/New_York"]),
    ],
)
def test_parse_errors_name_the_problem(spec: str, timezone: str, fragments: list[str]) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_recurrence(spec, timezone, now=NOW)
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


def test_schedule_error_is_a_value_error() -> None:
    assert issubclass(ScheduleError, ValueError)


def test_now_must_be_aware() -> None:
    with pytest.raises(ValueError, match="aware"):
        parse_recurrence("every 2h", "UTC", now=datetime(2026, 3, 1))


def test_same_wall_time_as_an_offset_is_not_a_gap_error() -> None:
    # An explicit offset is an instant: no DST check applies.
    rec = parse_recurrence("2026-03-29T02:30+01:00", "Europe/Berlin", now=NOW)
    assert rec.spec == "2026-03-29T01:30:00+00:00"


# --- stored form ----------------------------------------------------------------------------


def test_from_stored_rebuilds_what_parse_made() -> None:
    for typed in ("0 9 * * 1-5", "every 2h", "every 1d", "in 2h", "2026-12-01 09:00"):
        rec = parse_recurrence(typed, "Europe/Berlin", now=NOW)
        assert Recurrence.from_stored(rec.kind, rec.spec, rec.timezone, rec.anchor) == rec


def test_from_stored_accepts_a_past_one_shot_and_converts_the_anchor() -> None:
    past = Recurrence.from_stored("once", "2020-01-01T00:00:00+00:00", "UTC", None)
    assert past.next_after(utc(2019, 12, 31)) == utc(2020, 1, 1)
    assert past.next_after(utc(2020, 1, 1)) is None
    anchor = datetime.fromisoformat("2026-03-01T12:00:00+02:00")
    rec = Recurrence.from_stored("interval", "every 1h", "UTC", anchor)
    assert rec.anchor == utc(2026, 3, 1, 10)
    assert rec.anchor is not None
    assert rec.anchor.tzinfo is UTC


@pytest.mark.parametrize(
    ("kind", "spec", "timezone", "anchor", "fragment"),
    [
        ("weekly", "0 9 * * *", "UTC", None, "unknown schedule kind 'weekly'"),
        ("cron", "0  9 * * *", "UTC", None, "not a stored cron spec"),
        ("cron", "@daily", "UTC", None, "not a stored cron spec"),
        ("cron", "0 9 * * *", "Nowhere/City", None, "unknown time zone"),
        ("cron", "0 9 * * *", "UTC", NOW, "has no anchor"),
        ("interval", "every 2 hours", "UTC", NOW, "not a stored interval"),
        ("interval", "every 2h", "UTC", None, "has no anchor"),
        ("interval", "every 2h", "UTC", datetime(2026, 3, 1), "no time zone"),
        ("once", "tomorrow", "UTC", None, "not a stored instant"),
        ("once", "2026-12-01T09:00:00", "UTC", None, "no UTC offset"),
    ],
)
def test_from_stored_rejects_bad_columns(
    kind: str, spec: str, timezone: str, anchor: datetime | None, fragment: str
) -> None:
    with pytest.raises(ScheduleError, match=fragment):
        Recurrence.from_stored(kind, spec, timezone, anchor)


@pytest.mark.parametrize(
    ("typed", "timezone", "text"),
    [
        ("0 9 * * 1-5", "Europe/Berlin", "cron 0 9 * * 1-5 (Europe/Berlin)"),
        ("@hourly", "UTC", "cron 0 * * * * (UTC)"),
        ("every 2 hours", "Europe/Berlin", "every 2h"),
        ("every day", "Europe/Berlin", "every 1d at 01:00 (Europe/Berlin)"),
        (
            "2026-12-01 10:00",
            "Europe/Berlin",
            "once at 2026-12-01 10:00 CET (2026-12-01 09:00 UTC)",
        ),
        (
            "2026-07-01 10:00:30",
            "America/New_York",
            "once at 2026-07-01 10:00:30 EDT (2026-07-01 14:00:30 UTC)",
        ),
        ("2026-12-01 10:00", "UTC", "once at 2026-12-01 10:00 UTC"),
    ],
)
def test_describe(typed: str, timezone: str, text: str) -> None:
    assert parse_recurrence(typed, timezone, now=NOW).describe() == text


# --- fire times -----------------------------------------------------------------------------


def test_next_after_is_strict_and_returns_utc() -> None:
    rec = parse_recurrence("0 9 * * *", "Europe/Berlin", now=NOW)
    first = rec.next_after(utc(2026, 3, 2, 8))  # exactly a fire: the next one
    assert first == utc(2026, 3, 3, 8)
    assert first is not None
    assert first.tzinfo is UTC
    berlin_after = datetime.fromisoformat("2026-03-02T08:59:59+01:00")
    assert rec.next_after(berlin_after) == utc(2026, 3, 2, 8)
    with pytest.raises(ValueError, match="aware"):
        rec.next_after(datetime(2026, 3, 2))


def test_weekday_cron_in_berlin_across_spring_forward() -> None:
    rec = parse_recurrence("0 9 * * 1-5", "Europe/Berlin", now=NOW)
    assert fires(rec, utc(2026, 3, 25, 12), 5) == [
        utc(2026, 3, 26, 8),  # Thu, CET
        utc(2026, 3, 27, 8),  # Fri, CET
        # Sat 28, Sun 29 (the change) skipped
        utc(2026, 3, 30, 7),  # Mon, CEST
        utc(2026, 3, 31, 7),
        utc(2026, 4, 1, 7),
    ]


def test_fixed_time_in_the_spring_gap_fires_when_the_gap_ends() -> None:
    rec = parse_recurrence("30 2 * * *", "America/New_York", now=NOW)
    assert fires(rec, utc(2026, 3, 6, 12), 3) == [
        utc(2026, 3, 7, 7, 30),  # 02:30 EST
        utc(2026, 3, 8, 7, 0),  # 02:30 does not exist: 03:00 EDT
        utc(2026, 3, 9, 6, 30),  # 02:30 EDT
    ]


def test_fixed_time_gap_in_berlin_fires_at_three() -> None:
    rec = parse_recurrence("30 2 * * *", "Europe/Berlin", now=NOW)
    assert rec.next_after(utc(2026, 3, 28, 12)) == utc(2026, 3, 29, 1, 0)  # 03:00 CEST


def test_fixed_times_inside_one_gap_fire_once() -> None:
    rec = parse_recurrence("0,30 2,3 * * *", "America/New_York", now=NOW)
    assert fires_between(rec, utc(2026, 3, 8, 5), utc(2026, 3, 8, 9)) == [
        utc(2026, 3, 8, 7, 0),  # 02:00, 02:30 and 03:00 EDT are one instant
        utc(2026, 3, 8, 7, 30),  # 03:30 EDT
    ]


def test_fixed_time_in_the_repeated_hour_fires_once() -> None:
    rec = parse_recurrence("30 1 * * *", "America/New_York", now=NOW)
    assert fires(rec, utc(2026, 10, 31, 0), 3) == [
        utc(2026, 10, 31, 5, 30),  # 01:30 EDT
        utc(2026, 11, 1, 5, 30),  # 01:30 EDT, the first occurrence only
        utc(2026, 11, 2, 6, 30),  # 01:30 EST
    ]
    day = fires_between(rec, utc(2026, 11, 1, 4), utc(2026, 11, 2, 5))
    assert day == [utc(2026, 11, 1, 5, 30)]


def test_hourly_cron_keeps_every_real_hour_on_fall_back_day() -> None:
    rec = parse_recurrence("0 * * * *", "America/New_York", now=NOW)
    # Local midnight EDT to local midnight EST: 25 real hours.
    day = fires_between(rec, utc(2026, 11, 1, 4), utc(2026, 11, 2, 5))
    assert len(day) == 25
    assert day == [utc(2026, 11, 1, 4) + timedelta(hours=h) for h in range(25)]
    # Both 01:00 EDT (05:00 UTC) and 01:00 EST (06:00 UTC).
    assert utc(2026, 11, 1, 5) in day
    assert utc(2026, 11, 1, 6) in day


def test_hourly_cron_skips_the_missing_hour_on_spring_forward_day() -> None:
    rec = parse_recurrence("0 * * * *", "America/New_York", now=NOW)
    # Local midnight EST to local midnight EDT: 23 real hours.
    day = fires_between(rec, utc(2026, 3, 8, 5), utc(2026, 3, 9, 4))
    assert len(day) == 23
    assert day == [utc(2026, 3, 8, 5) + timedelta(hours=h) for h in range(23)]


def test_wildcard_hour_cron_skips_a_time_in_the_gap() -> None:
    # 02:30 does not exist on 2026-03-08: no run at 03:00 EDT, the next is 03:30 EDT.
    rec = parse_recurrence("30 * * * *", "America/New_York", now=NOW)
    day = fires_between(rec, utc(2026, 3, 8, 5), utc(2026, 3, 9, 4))
    assert len(day) == 23
    assert day[:3] == [utc(2026, 3, 8, 5, 30), utc(2026, 3, 8, 6, 30), utc(2026, 3, 8, 7, 30)]


def test_half_hourly_cron_on_fall_back_day_is_strictly_increasing() -> None:
    rec = parse_recurrence("*/30 * * * *", "America/New_York", now=NOW)
    window = fires_between(rec, utc(2026, 11, 1, 4), utc(2026, 11, 1, 8))
    assert window == [utc(2026, 11, 1, 4) + timedelta(minutes=30 * i) for i in range(8)]


def test_cron_in_a_zone_with_a_half_hour_shift() -> None:
    # Lord Howe Island moves its clocks by 30 minutes (back at 02:00 on 2026-04-05).
    rec = parse_recurrence("*/15 * * * *", "Australia/Lord_Howe", now=NOW)
    window = fires_between(rec, utc(2026, 4, 4, 14, 30), utc(2026, 4, 4, 16))
    assert window == [utc(2026, 4, 4, 14, 30) + timedelta(minutes=15 * i) for i in range(6)]


def test_daily_interval_keeps_local_time_across_spring_forward() -> None:
    rec = parse_recurrence("every 1d", "Europe/Berlin", now=utc(2026, 3, 27, 8))  # 09:00 CET
    assert fires(rec, utc(2026, 3, 27, 8), 3) == [
        utc(2026, 3, 28, 8),  # 09:00 CET
        utc(2026, 3, 29, 7),  # 09:00 CEST
        utc(2026, 3, 30, 7),
    ]


def test_daily_interval_created_at_a_gap_time_fires_when_the_gap_ends() -> None:
    # Created 2026-03-07 02:30 EST; on 2026-03-08 02:30 does not exist.
    rec = parse_recurrence("every 1d", "America/New_York", now=utc(2026, 3, 7, 7, 30))
    assert fires(rec, utc(2026, 3, 7, 7, 30), 2) == [utc(2026, 3, 8, 7), utc(2026, 3, 9, 6, 30)]


def test_multi_day_interval_across_fall_back() -> None:
    # Every 2 days at 01:30 local; 2026-11-01 01:30 happens twice: the first (EDT) counts.
    rec = parse_recurrence("every 2d", "America/New_York", now=utc(2026, 10, 30, 5, 30))
    assert fires(rec, utc(2026, 10, 30, 5, 30), 3) == [
        utc(2026, 11, 1, 5, 30),
        utc(2026, 11, 3, 6, 30),
        utc(2026, 11, 5, 6, 30),
    ]
    assert rec.next_after(utc(2026, 1, 1)) == utc(2026, 11, 1, 5, 30)  # before the anchor


def test_hourly_interval_is_arithmetic_from_the_anchor() -> None:
    anchor = utc(2026, 1, 1, 0, 10)
    rec = parse_recurrence("every 2h", "Europe/Berlin", now=anchor)
    assert rec.next_after(anchor - timedelta(days=3)) == utc(2026, 1, 1, 2, 10)
    assert rec.next_after(anchor) == utc(2026, 1, 1, 2, 10)
    assert rec.next_after(utc(2026, 1, 1, 2, 10)) == utc(2026, 1, 1, 4, 10)
    assert rec.next_after(utc(2026, 1, 1, 3, 59)) == utc(2026, 1, 1, 4, 10)
    # Elapsed time: the DST change on 2026-03-29 does not move it.
    assert rec.next_after(utc(2026, 3, 29, 0, 30)) == utc(2026, 3, 29, 2, 10)
    started = time.perf_counter()
    later = anchor + timedelta(days=1000, seconds=1)
    assert rec.next_after(later) == anchor + timedelta(days=1000, hours=2)
    assert time.perf_counter() - started < 0.1


def test_one_shot_fires_once() -> None:
    rec = parse_recurrence("in 2h", "UTC", now=NOW)
    assert rec.next_after(NOW) == utc(2026, 3, 1, 2)
    assert rec.next_after(utc(2026, 3, 1, 2)) is None


# --- min_gap --------------------------------------------------------------------------------


def test_min_gap() -> None:
    assert min_gap(parse_recurrence("* * * * *", "UTC", now=NOW), start=NOW) == timedelta(
        seconds=60
    )
    assert min_gap(parse_recurrence("every 5s", "UTC", now=NOW), start=NOW) == timedelta(seconds=5)
    assert min_gap(parse_recurrence("*/10 9-17 * * *", "UTC", now=NOW), start=NOW) == timedelta(
        minutes=10
    )
    assert min_gap(parse_recurrence("in 5s", "UTC", now=NOW), start=NOW) is None
    # A daily job spanning the US spring-forward: that gap is 23 hours.
    daily = parse_recurrence("0 9 * * *", "America/New_York", now=NOW)
    assert min_gap(daily, start=utc(2026, 3, 1)) == timedelta(hours=23)
    assert min_gap(daily, start=utc(2026, 3, 10)) == timedelta(hours=24)
    # The fall-back day keeps the hourly job one hour apart.
    hourly = parse_recurrence("0 * * * *", "America/New_York", now=NOW)
    assert min_gap(hourly, start=utc(2026, 11, 1, 3), samples=10) == timedelta(hours=1)
    with pytest.raises(ValueError, match="samples"):
        min_gap(daily, start=NOW, samples=1)


# --- due_slots ------------------------------------------------------------------------------

T0 = utc(2026, 5, 1, 12)


def minutes(*offsets: int) -> list[datetime]:
    return [T0 + timedelta(minutes=m) for m in offsets]


def every_minute() -> Recurrence:
    return parse_recurrence("every 1m", "UTC", now=T0)


def test_nothing_due_before_next_run() -> None:
    slots = due_slots(
        every_minute(),
        next_run_at=T0 + timedelta(minutes=5),
        now=T0 + timedelta(minutes=4, seconds=59),
        policy="catch_up",
        grace=timedelta(minutes=1),
        catch_up_max=5,
    )
    assert slots == ([], T0 + timedelta(minutes=5))


@pytest.mark.parametrize("policy", ["skip", "run_once", "catch_up"])
def test_on_time_slot_fires_under_every_policy(policy: MissedPolicy) -> None:
    slots = due_slots(
        every_minute(),
        next_run_at=T0 + timedelta(minutes=1),
        now=T0 + timedelta(minutes=1, seconds=10),
        policy=policy,
        grace=timedelta(minutes=1),
        catch_up_max=5,
    )
    assert slots == (minutes(1), T0 + timedelta(minutes=2))


@pytest.mark.parametrize(
    ("policy", "catch_up_max", "expected"),
    [
        ("skip", 5, minutes(8, 9, 10)),
        ("run_once", 5, minutes(7, 8, 9, 10)),
        ("catch_up", 3, minutes(5, 6, 7, 8, 9, 10)),
        ("catch_up", 7, minutes(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)),
        ("catch_up", 100, minutes(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)),
        ("catch_up", 0, minutes(8, 9, 10)),
    ],
)
def test_missed_slots_follow_the_policy(
    policy: MissedPolicy, catch_up_max: int, expected: list[datetime]
) -> None:
    # Slots at minutes 1..10; now is 10m05s; grace 2m30s: 8, 9 and 10 are on time.
    slots, following = due_slots(
        every_minute(),
        next_run_at=T0 + timedelta(minutes=1),
        now=T0 + timedelta(minutes=10, seconds=5),
        policy=policy,
        grace=timedelta(minutes=2, seconds=30),
        catch_up_max=catch_up_max,
    )
    assert slots == expected
    assert following == T0 + timedelta(minutes=11)


def test_a_slot_exactly_grace_old_is_on_time() -> None:
    slots = due_slots(
        every_minute(),
        next_run_at=T0 + timedelta(minutes=1),
        now=T0 + timedelta(minutes=3),
        policy="skip",
        grace=timedelta(minutes=2),
        catch_up_max=0,
    )
    assert slots == (minutes(1, 2, 3), T0 + timedelta(minutes=4))


def test_next_run_at_off_the_schedule_is_still_a_slot() -> None:
    # A stored next run that is not on the grid (e.g. the schedule was edited) still fires.
    slots = due_slots(
        every_minute(),
        next_run_at=T0 + timedelta(seconds=90),
        now=T0 + timedelta(minutes=3),
        policy="catch_up",
        grace=timedelta(hours=1),
        catch_up_max=10,
    )
    assert slots == ([T0 + timedelta(seconds=90), *minutes(2, 3)], T0 + timedelta(minutes=4))


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("skip", []), ("run_once", [T0]), ("catch_up", [T0])],
)
def test_past_one_shot(policy: MissedPolicy, expected: list[datetime]) -> None:
    rec = Recurrence.from_stored("once", T0.isoformat(), "UTC", None)
    slots = due_slots(
        rec,
        next_run_at=T0,
        now=T0 + timedelta(hours=1),
        policy=policy,
        grace=timedelta(minutes=1),
        catch_up_max=3,
    )
    assert slots == (expected, None)


def test_on_time_one_shot() -> None:
    rec = Recurrence.from_stored("once", T0.isoformat(), "UTC", None)
    slots = due_slots(
        rec,
        next_run_at=T0,
        now=T0 + timedelta(seconds=30),
        policy="skip",
        grace=timedelta(minutes=1),
        catch_up_max=3,
    )
    assert slots == ([T0], None)


def test_huge_interval_backlog_is_prompt() -> None:
    anchor = utc(2025, 5, 1)
    rec = parse_recurrence("every 1s", "UTC", now=anchor)
    now = utc(2026, 5, 1, 0, 0, 0, 500_000)
    started = time.perf_counter()
    slots, following = due_slots(
        rec,
        next_run_at=anchor + timedelta(seconds=1),
        now=now,
        policy="catch_up",
        grace=timedelta(seconds=2),
        catch_up_max=3,
    )
    assert time.perf_counter() - started < 1.0
    # On time: 23:59:59 and 00:00:00 (>= now - 2 s); missed: the three before them.
    assert slots == [utc(2026, 5, 1) - timedelta(seconds=s) for s in (4, 3, 2, 1, 0)]
    assert following == utc(2026, 5, 1, 0, 0, 1)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("skip", []),
        ("run_once", [utc(2026, 5, 1, 11, 59)]),
        ("catch_up", [utc(2026, 5, 1, 11, 58), utc(2026, 5, 1, 11, 59)]),
    ],
)
def test_huge_cron_backlog_is_prompt(policy: MissedPolicy, expected: list[datetime]) -> None:
    rec = parse_recurrence("* * * * *", "Europe/Berlin", now=utc(2025, 5, 1))
    started = time.perf_counter()
    slots = due_slots(
        rec,
        next_run_at=utc(2025, 5, 1, 0, 1),
        now=utc(2026, 5, 1, 12, 0, 30),  # 12:00 is 30 s old: on time
        policy=policy,
        grace=timedelta(seconds=45),
        catch_up_max=2,
    )
    assert time.perf_counter() - started < 1.0
    assert slots == ([*expected, utc(2026, 5, 1, 12)], utc(2026, 5, 1, 12, 1))


def test_catch_up_over_fall_back_sees_both_repeated_hours() -> None:
    rec = parse_recurrence("0 * * * *", "America/New_York", now=NOW)
    slots = due_slots(
        rec,
        next_run_at=utc(2026, 11, 1, 4),  # 00:00 EDT
        now=utc(2026, 11, 1, 7, 30),  # 02:30 EST
        policy="catch_up",
        grace=timedelta(0),
        catch_up_max=10,
    )
    hours = [utc(2026, 11, 1, h) for h in (4, 5, 6, 7)]
    assert slots == (hours, utc(2026, 11, 1, 8))


def test_run_once_after_missing_the_spring_gap_day() -> None:
    rec = parse_recurrence("30 2 * * *", "America/New_York", now=NOW)
    slots = due_slots(
        rec,
        next_run_at=utc(2026, 3, 5, 7, 30),
        now=utc(2026, 3, 8, 12),
        policy="run_once",
        grace=timedelta(minutes=5),
        catch_up_max=0,
    )
    assert slots == ([utc(2026, 3, 8, 7)], utc(2026, 3, 9, 6, 30))


def test_run_once_on_a_daily_interval_backlog() -> None:
    rec = parse_recurrence("every 1d", "Europe/Berlin", now=utc(2020, 1, 1, 8))  # 09:00 CET
    slots = due_slots(
        rec,
        next_run_at=utc(2020, 1, 2, 8),
        now=utc(2026, 3, 30, 12),
        policy="run_once",
        grace=timedelta(minutes=5),
        catch_up_max=0,
    )
    assert slots == ([utc(2026, 3, 30, 7)], utc(2026, 3, 31, 7))


@pytest.mark.parametrize(
    ("spec", "timezone", "start", "end"),
    [
        ("0 * * * *", "America/New_York", utc(2026, 10, 31, 20), utc(2026, 11, 2, 8)),
        ("*/20 * * * *", "America/New_York", utc(2026, 3, 7, 20), utc(2026, 3, 9, 8)),
        ("30 1,2 * * *", "America/New_York", utc(2026, 3, 1), utc(2026, 3, 12)),
        ("30 1,2 * * *", "America/New_York", utc(2026, 10, 28), utc(2026, 11, 4)),
        ("*/15 * * * *", "Europe/Berlin", utc(2026, 10, 24, 20), utc(2026, 10, 25, 6)),
        ("0 2 * * *", "Europe/Berlin", utc(2026, 3, 20), utc(2026, 4, 5)),
        ("*/10 * * * *", "Australia/Lord_Howe", utc(2026, 4, 4, 10), utc(2026, 4, 4, 20)),
        ("0 */2 * * *", "Australia/Sydney", utc(2026, 4, 4, 6), utc(2026, 4, 5, 6)),
        ("every 1d", "America/New_York", utc(2026, 3, 1), utc(2026, 3, 20)),
        ("every 7m", "Europe/Berlin", utc(2026, 3, 29), utc(2026, 3, 29, 3)),
    ],
)
def test_catch_up_slots_match_forward_iteration(
    spec: str, timezone: str, start: datetime, end: datetime
) -> None:
    """due_slots walks backwards; it must agree with next_after walking forwards."""
    rec = parse_recurrence(spec, timezone, now=start)
    forward = fires_between(rec, start, end)
    assert len(forward) > 3
    assert all(a < b for a, b in pairwise(forward))
    slots, following = due_slots(
        rec,
        next_run_at=forward[0],
        now=forward[-1],
        policy="catch_up",
        grace=timedelta(0),
        catch_up_max=len(forward),
    )
    assert slots == forward
    assert following == rec.next_after(forward[-1])


@pytest.mark.parametrize(
    ("grace", "catch_up_max", "policy", "message"),
    [
        (timedelta(seconds=-1), 0, "skip", "grace"),
        (timedelta(0), -1, "skip", "catch_up_max"),
        (timedelta(0), 0, "sometimes", "policy"),
    ],
)
def test_due_slots_rejects_bad_arguments(
    grace: timedelta, catch_up_max: int, policy: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        due_slots(
            every_minute(),
            next_run_at=T0,
            now=T0,
            policy=policy,  # type: ignore[arg-type]
            grace=grace,
            catch_up_max=catch_up_max,
        )
