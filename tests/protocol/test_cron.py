"""fastbean.cron: the specs schedules take and their occurrences: fields as
Vixie cron reads them, zones, daylight saving (a skipped time fires once,
after the gap; a repeated one once, the first time), intervals."""
from datetime import datetime, timezone

import pytest

from fastbean.cron import NS, SpecError, parse


def ns(iso):
    return int(datetime.fromisoformat(iso).timestamp()) * NS


def occurrences(spec, start, n, since=0):
    s = parse(spec)
    out, t = [], ns(start)
    for _ in range(n):
        t = s.next_after(t, since)
        out.append(datetime.fromtimestamp(t // NS, timezone.utc).strftime("%Y-%m-%dT%H:%M"))
    return out


def test_fields_lists_ranges_steps_and_names():
    assert occurrences("*/20 9-10 * * *", "2026-01-05T09:30:00+00:00", 4) == [
        "2026-01-05T09:40", "2026-01-05T10:00", "2026-01-05T10:20", "2026-01-05T10:40"]
    assert occurrences("0 9 * jan,jul mon-fri", "2026-06-30T12:00:00+00:00", 2) == [
        "2026-07-01T09:00", "2026-07-02T09:00"]
    assert occurrences("5/20 * * * *", "2026-01-05T09:00:00+00:00", 3) == [
        "2026-01-05T09:05", "2026-01-05T09:25", "2026-01-05T09:45"]
    assert occurrences("0 0 * * 7", "2026-01-05T00:00:00+00:00", 1) == ["2026-01-11T00:00"]   # 7 is Sunday
    assert occurrences("@monthly", "2026-01-05T00:00:00+00:00", 1) == ["2026-02-01T00:00"]


def test_day_of_month_or_day_of_week_as_vixie_cron():
    # both restricted: either matches (the 13th, or a Friday)
    assert occurrences("0 0 13 * fri", "2026-11-27T12:00:00+00:00", 3) == [
        "2026-12-04T00:00", "2026-12-11T00:00", "2026-12-13T00:00"]
    # one starts with '*' (a step too): both must match
    assert occurrences("0 0 */10 * fri", "2026-11-27T12:00:00+00:00", 2) == [
        "2026-12-11T00:00", "2027-01-01T00:00"]


def test_a_time_in_a_spring_forward_gap_fires_once_after_it():
    # Amsterdam 2027-03-28 02:00 CET -> 03:00 CEST; New York 2027-03-14 02:00 EST -> 03:00 EDT
    assert occurrences("30 2 * * * Europe/Amsterdam", "2027-03-27T00:00:00+00:00", 3) == [
        "2027-03-27T01:30", "2027-03-28T01:00", "2027-03-29T00:30"]
    assert occurrences("*/15 2 * * * America/New_York", "2027-03-14T00:00:00+00:00", 2) == [
        "2027-03-14T07:00", "2027-03-15T06:00"]


def test_a_repeated_hour_fires_once_the_first_time():
    # Amsterdam 2027-10-31 03:00 CEST -> 02:00 CET; Sydney 2027-04-04 03:00 AEDT -> 02:00 AEST
    assert occurrences("*/20 2 * * * Europe/Amsterdam", "2027-10-30T12:00:00+00:00", 4) == [
        "2027-10-31T00:00", "2027-10-31T00:20", "2027-10-31T00:40", "2027-11-01T01:00"]
    assert occurrences("30 2 * * * Australia/Sydney", "2027-04-02T00:00:00+00:00", 3) == [
        "2027-04-02T15:30", "2027-04-03T15:30", "2027-04-04T16:30"]


def test_intervals_count_from_their_definition():
    since = ns("2026-01-05T10:00:00+00:00") + 400_000_000
    s = parse("every 90")
    assert s.next_after(since, since) == ns("2026-01-05T10:01:30+00:00")
    assert s.next_after(ns("2026-01-05T10:01:30+00:00"), since) == ns("2026-01-05T10:03:00+00:00")
    last, count = s.latest_until(ns("2026-01-05T11:00:00+00:00"), since, since)
    assert (last, count) == (ns("2026-01-05T11:00:00+00:00"), 40)


def test_latest_until_of_a_cron_spec():
    s = parse("0 * * * *")
    last, count = s.latest_until(ns("2026-01-05T12:30:00+00:00"), 0, ns("2026-01-05T09:00:00+00:00"))
    assert (last, count) == (ns("2026-01-05T12:00:00+00:00"), 3)
    assert s.latest_until(ns("2026-01-05T09:30:00+00:00"), 0, ns("2026-01-05T09:00:00+00:00")) == (None, 0)


@pytest.mark.parametrize("spec", [
    "", "* * * *", "* * * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *", "* * * * 8",
    "5-1 * * * *", "*/0 * * * *", "a * * * *", "* * * foo *", "*  * * * *", " * * * * *", "* * * * * ",
    "* * 31 2 *", "* * * * * Mars/Olympus", "* * * * * ../../etc/passwd", "every", "every 0", "every -1",
    "every 1 UTC", "every 99999999999", "@often", "1,,2 * * * *", "\u00e9 * * * *",
])
def test_bad_specs(spec):
    with pytest.raises(SpecError):
        parse(spec)
