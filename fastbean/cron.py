"""Schedules' times: the specs `schedule` takes and the next occurrence after an instant.

A spec is a five-field cron expression (minute, hour, day of month, month,
day of week) with Vixie cron's rules, an optional IANA time zone after it
(UTC without one), or ``every <seconds>``. Times are nanoseconds since the
Unix epoch, as the engine's wall clock gives them.

Daylight saving is handled as cron handles it: a local time that a
spring-forward skips fires once, at the first instant after the gap (several
skipped times fire once together); a local time that a fall-back repeats
fires once, the first time.
"""
from datetime import datetime, timedelta, timezone, tzinfo
from typing import FrozenSet, Optional, Set, Tuple
from zoneinfo import ZoneInfo

NS = 1_000_000_000
EVERY_MAX = 4294967295          # seconds of an interval, as the protocol's other numbers
SPEC_MAX = 200                  # bytes of a spec (it is logged as a name)
SEARCH_YEARS = 9                # an expression with no time in this many years never fires

_MONTHS = {m: i + 1 for i, m in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"))}
_DAYS = {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
_MACROS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# (lowest, highest, names) of each field
_FIELDS = ((0, 59, None), (0, 23, None), (1, 31, None), (1, 12, _MONTHS), (0, 7, _DAYS))
_ZONE_BYTES = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/_+-")


class SpecError(ValueError):
    """A spec `schedule` does not take (the server answers BAD_FORMAT)."""


def _value(text: str, lo: int, hi: int, names) -> int:
    if text.isdigit() and len(text) <= 2:
        v = int(text)
    elif names is not None and text.lower() in names:
        v = names[text.lower()]
    else:
        raise SpecError("bad value %r" % text)
    if not lo <= v <= hi:
        raise SpecError("%r is out of range %d-%d" % (text, lo, hi))
    return v


def _field(text: str, lo: int, hi: int, names) -> FrozenSet[int]:
    values: Set[int] = set()
    for part in text.split(","):
        rng, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or len(step_text) > 2 or int(step_text) == 0:
                raise SpecError("bad step %r" % step_text)
            step = int(step_text)
        if rng == "*":
            a, b = lo, hi
        elif "-" in rng:
            first, _, last = rng.partition("-")
            a, b = _value(first, lo, hi, names), _value(last, lo, hi, names)
            if a > b:
                raise SpecError("range %r goes backwards" % rng)
        else:
            a = _value(rng, lo, hi, names)
            b = hi if slash else a          # "5/15": from 5 on, as cronie reads it
        values.update(range(a, b + 1, step))
    return frozenset(values)


class Spec:
    """A parsed spec. `text` is the spec as given; `zone` the zone's name
    ("UTC" when none was given; "" for an interval)."""

    __slots__ = ("text", "zone", "tz", "interval", "minutes", "hours", "doms", "months", "dows",
                 "dom_star", "dow_star")

    def __init__(self, text: str):
        self.text = text
        self.interval = 0
        self.tz: tzinfo = timezone.utc
        words = text.split(" ")
        if words[0] == "every":
            if len(words) != 2 or not words[1].isdigit() or len(words[1]) > 10:
                raise SpecError("every takes a number of seconds")
            self.interval = int(words[1])
            if not 1 <= self.interval <= EVERY_MAX:
                raise SpecError("an interval is 1 to %d seconds" % EVERY_MAX)
            self.zone, self.tz = "", timezone.utc
            return
        if words[0].startswith("@"):
            if words[0] not in _MACROS:
                raise SpecError("unknown %r" % words[0])
            words = _MACROS[words[0]].split(" ") + words[1:]
        if len(words) not in (5, 6) or "" in words:
            raise SpecError("five fields, then an optional time zone, one space apart")
        fields = [_field(w, lo, hi, names) for w, (lo, hi, names) in zip(words, _FIELDS)]
        self.minutes, self.hours, self.doms, self.months, dows = fields
        self.dows = frozenset(d % 7 for d in dows)
        # Vixie cron: when either day field starts with '*', both must match;
        # when both are restricted, either may
        self.dom_star, self.dow_star = words[2][0] == "*", words[4][0] == "*"
        self.zone, self.tz = "UTC", timezone.utc
        if len(words) == 6:
            name = words[5]
            if not set(name) <= _ZONE_BYTES or name.startswith(("/", "-")) or ".." in name or len(name) > 64:
                raise SpecError("bad time zone %r" % name)
            try:
                self.tz = ZoneInfo(name)
            except (ValueError, OSError) as e:          # ZoneInfoNotFoundError is a KeyError
                raise SpecError("unknown time zone %r" % name) from e
            except KeyError as e:
                raise SpecError("unknown time zone %r" % name) from e
            self.zone = name

    # -- occurrences ------------------------------------------------------------------

    def next_after(self, t: int, since: int) -> Optional[int]:
        """The first occurrence after t (ns), or None if there is none within
        SEARCH_YEARS. An interval's occurrences are since (whole seconds) plus
        multiples of it."""
        if self.interval:
            anchor = since // NS * NS
            iv = self.interval * NS
            if t < anchor:
                return anchor + iv
            return anchor + ((t - anchor) // iv + 1) * iv
        t_s = t // NS                  # an occurrence, on a whole minute, is after t iff after t_s
        local = datetime.fromtimestamp(t_s, self.tz).replace(tzinfo=None)
        c = local.replace(second=0) + timedelta(minutes=1)
        while True:
            found = self._next_local(c)
            if found is None:
                return None
            c = found
            at = self._instant(c)
            if at > t_s:
                return at * NS
            c += timedelta(minutes=1)  # the second pass of a repeated hour fires nothing

    def latest_until(self, t: int, since: int, after: int) -> Tuple[Optional[int], int]:
        """(the last occurrence after `after` and at or before t, or None; how
        many occurrences that span holds, counted up to 100000)."""
        if self.interval:
            first = self.next_after(after, since)
            if first is None or first > t:
                return None, 0
            anchor = since // NS * NS
            end = anchor + (t - anchor) // (self.interval * NS) * self.interval * NS
            return end, (end - first) // (self.interval * NS) + 1
        last: Optional[int] = None
        n, at = 0, after
        while True:
            nxt = self.next_after(at, since)
            if nxt is None or nxt > t:
                return last, n
            last, at, n = nxt, nxt, n + 1
            if n >= 100000 and at < t - 86400 * NS:
                at = t - 86400 * NS     # a long outage of a frequent schedule: its last day

    def _day_ok(self, c: datetime) -> bool:
        dom = c.day in self.doms
        dow = c.isoweekday() % 7 in self.dows
        if self.dom_star or self.dow_star:
            return dom and dow
        return dom or dow

    def _next_local(self, c: datetime) -> Optional[datetime]:
        # the first local (naive) minute at or after c that matches
        end = c.year + SEARCH_YEARS
        while c.year <= end:
            if c.month not in self.months:
                c = datetime(c.year + (c.month == 12), c.month % 12 + 1, 1)
            elif not self._day_ok(c):
                c = datetime(c.year, c.month, c.day) + timedelta(days=1)
            elif c.hour not in self.hours:
                c = datetime(c.year, c.month, c.day, c.hour) + timedelta(hours=1)
            elif c.minute not in self.minutes:
                c += timedelta(minutes=1)
            else:
                return c
        return None

    def _instant(self, c: datetime) -> int:
        # Unix seconds of local time c: the first of a repeated time; for a
        # time a gap skips, the first instant after the gap
        first = int(c.replace(tzinfo=self.tz, fold=0).timestamp())
        if datetime.fromtimestamp(first, self.tz).replace(tzinfo=None) == c:
            return first
        # in a gap: fold=0 read it with the offset from before the gap, which
        # lands after it; the transition is between the fold=1 reading and that
        lo = int(c.replace(tzinfo=self.tz, fold=1).timestamp())
        hi = first
        after = datetime.fromtimestamp(hi, self.tz).utcoffset()
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if datetime.fromtimestamp(mid, self.tz).utcoffset() == after:
                hi = mid
            else:
                lo = mid
        return hi


def parse(spec) -> Spec:
    """A Spec from the spec's text (bytes or str); SpecError if it is not one."""
    if isinstance(spec, (bytes, bytearray)):
        try:
            spec = bytes(spec).decode("ascii")
        except UnicodeDecodeError:
            raise SpecError("a spec is ASCII") from None
    if not spec or len(spec) > SPEC_MAX or not spec.isprintable():
        raise SpecError("a spec is 1 to %d printable bytes" % SPEC_MAX)
    s = Spec(spec)
    if s.next_after(0 if s.interval else 946684800 * NS, 946684800 * NS) is None:
        raise SpecError("%r never comes" % spec)
    return s
