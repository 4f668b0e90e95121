"""fastbean-ctl top: samples of the server and its tubes with rates per second, live in curses
or as JSON lines."""
import json
import time

from fastbean.client import ClientError
from fastbean.ctl.defaults import count
from fastbean.errors import FastbeanError

TUBE_COUNTERS = ("total-jobs", "cmd-delete", "cmd-pause-tube")
SERVER_COUNTERS_EXTRA = ("job-timeouts", "total-jobs", "total-connections")

# (header, width, value of a tube row); the TUBE column takes the width its names need
COLUMNS = [
    ("READY", 7, lambda t: t["current-jobs-ready"]),
    ("RESERVED", 8, lambda t: t["current-jobs-reserved"]),
    ("DELAYED", 7, lambda t: t["current-jobs-delayed"]),
    ("BURIED", 7, lambda t: t["current-jobs-buried"]),
    ("WAITING", 7, lambda t: t["current-waiting"]),
    ("PUT/S", 7, lambda t: _rate(t, "total-jobs")),
    ("DELETE/S", 8, lambda t: _rate(t, "cmd-delete")),
    ("PAUSED", 7, lambda t: t["pause-time-left"] if t["pause"] else None),
]
SORTS = ["TUBE"] + [header for header, _, _ in COLUMNS]


class TerminalError(FastbeanError):
    """curses cannot drive this terminal (an unknown TERM, say)."""


def _rate(stats, key):
    rates = stats.get("rates")
    return None if rates is None else rates.get(key)


def _rates(prev, cur, keys, seconds):
    """Counters' growth per second since `prev`; None for a counter that went back
    (a server restarted behind the same address)."""
    out = {}
    for key in keys:
        if key in prev and key in cur:
            grown = cur[key] - prev[key]
            out[key] = grown / seconds if grown >= 0 else None
    return out


class Sampler:
    """stats and every tube's stats-tube, with rates against the previous sample."""

    def __init__(self):
        self.prev = None            # (monotonic time, stats, {tube: stats-tube})

    def take(self, client):
        stats = client.stats()
        tubes = client.stats_tubes(client.list_tubes())
        now, wall = time.monotonic(), time.time()
        sample = {"time": wall, "server": stats, "rates": None,
                  "tubes": [dict(tube_stats, rates=None) for tube_stats in tubes.values()]}
        if self.prev is not None:
            then, prev_stats, prev_tubes = self.prev
            seconds = max(now - then, 1e-6)
            counters = [k for k in stats if k.startswith("cmd-")] + list(SERVER_COUNTERS_EXTRA)
            sample["rates"] = _rates(prev_stats, stats, counters, seconds)
            for tube in sample["tubes"]:
                if tube["name"] in prev_tubes:
                    tube["rates"] = _rates(prev_tubes[tube["name"]], tube, TUBE_COUNTERS,
                                           seconds)
        self.prev = (now, stats, tubes)
        return sample


def stream(connect, interval, iterations, out):
    """One JSON object per line per sample; `iterations` samples (0: until interrupted)."""
    sampler = Sampler()
    with connect() as client:
        count = 0
        due = time.monotonic()
        while True:
            out.write(json.dumps(sampler.take(client)) + "\n")
            out.flush()
            count += 1
            if iterations and count >= iterations:
                return 0
            due += interval
            time.sleep(max(0.0, due - time.monotonic()))


def run(connect, interval, iterations):
    """The live view until `q` (or `iterations` refreshes); reconnects if the server goes."""
    import curses
    view = _View(connect(), connect, interval, iterations)   # no server: fail before drawing
    try:
        return curses.wrapper(view.loop)
    except KeyboardInterrupt:
        return 0
    except curses.error as e:
        raise TerminalError("cannot draw on this terminal: %s" % e) from None
    finally:
        view.close()


def _fmt(value):
    if value is None:
        return "-"
    if isinstance(value, float):
        return "%.1f" % value if value < 1000 else "%d" % value
    return str(value)


def _duration(seconds):
    days, rest = divmod(int(seconds), 86400)
    text = "%d:%02d:%02d" % (rest // 3600, rest % 3600 // 60, rest % 60)
    return "%dd %s" % (days, text) if days else text


class _View:
    def __init__(self, client, connect, interval, iterations):
        self.client, self.connect = client, connect
        self.where = client.where
        self.interval, self.iterations = interval, iterations
        self.sampler = Sampler()
        self.sample = None
        self.error = None
        self.sort = 0               # index in SORTS
        self.sort_span = (0, 0, "")

    def refresh_sample(self):
        try:
            if self.client is None:
                self.client = self.connect()
                self.sampler = Sampler()
            self.sample = self.sampler.take(self.client)
            self.error = None
        except ClientError as e:
            self.error = "%s; retrying" % e
            self.close()

    def close(self):
        if self.client is not None:
            self.client.close()
            self.client = None

    def loop(self, screen):
        import curses
        try:
            curses.curs_set(0)
        except curses.error:
            pass                # a terminal that cannot hide the cursor
        screen.keypad(True)
        count = 0
        due = time.monotonic()
        while True:
            if time.monotonic() >= due:
                if self.iterations and count >= self.iterations:
                    return 0
                self.refresh_sample()
                count += 1
                due = max(due + self.interval, time.monotonic())
                self.draw(screen)
            screen.timeout(max(0, int((due - time.monotonic()) * 1000)))
            key = screen.getch()
            if key in (ord("q"), ord("Q")):
                return 0
            if key in (ord("s"), ord("S")):
                self.sort = (self.sort + 1) % len(SORTS)
                self.draw(screen)
            elif key == curses.KEY_RESIZE:
                self.draw(screen)

    def lines(self, width):
        """(text, bold) lines: the server, the column titles, one row per tube; and
        where the sort column's title is on its line (x, title)."""
        s = self.sample
        server = s["server"] if s else {}
        rates = (s or {}).get("rates") or {}
        reserves = None
        if None not in (rates.get("cmd-reserve"), rates.get("cmd-reserve-with-timeout")):
            reserves = rates["cmd-reserve"] + rates["cmd-reserve-with-timeout"]
        out = [
            ("fastbean-ctl top  %s  version %s  up %s  %s" % (
                self.where, server.get("version", "?"), _duration(server.get("uptime", 0)),
                count(len(s["tubes"]) if s else 0, "tube")), True),
            ("jobs   ready %s  reserved %s  delayed %s  buried %s  urgent %s" % tuple(
                _fmt(server.get("current-jobs-" + k))
                for k in ("ready", "reserved", "delayed", "buried", "urgent")), False),
            ("conns  open %s  producers %s  workers %s  waiting %s" % tuple(
                _fmt(server.get("current-" + k))
                for k in ("connections", "producers", "workers", "waiting")), False),
            ("per s  put %s  reserve %s  delete %s  release %s  bury %s  timeouts %s" % (
                _fmt(rates.get("cmd-put")), _fmt(reserves), _fmt(rates.get("cmd-delete")),
                _fmt(rates.get("cmd-release")), _fmt(rates.get("cmd-bury")),
                _fmt(rates.get("job-timeouts"))), False),
            ("", False),
        ]
        tubes = list(s["tubes"]) if s else []
        # tube names take what the numbers leave of the line
        name_width = max([4] + [len(t["name"]) for t in tubes])
        name_width = min(name_width, max(4, width - 1 - sum(w + 1 for _, w, _ in COLUMNS)))
        titles = ["TUBE".ljust(name_width)] + [h.rjust(w) for h, w, _ in COLUMNS]
        line = " ".join(titles)
        sort = SORTS[self.sort]
        x = sum(len(t) + 1 for t in titles[:self.sort]) + len(titles[self.sort]) - len(sort) \
            if self.sort else 0
        self.sort_span = (len(out), x, sort)
        out.append((line, True))
        if sort == "TUBE":
            tubes.sort(key=lambda t: t["name"])
        else:
            value = COLUMNS[self.sort - 1][2]
            tubes.sort(key=lambda t: (-(value(t) or 0), t["name"]))
        for t in tubes:
            name = t["name"] if len(t["name"]) <= name_width else t["name"][:name_width - 1] + "~"
            out.append((" ".join([name.ljust(name_width)] +
                                 [_fmt(f(t)).rjust(w) for _, w, f in COLUMNS]), False))
        return out

    def draw(self, screen):
        import curses
        height, width = screen.getmaxyx()
        lines = self.lines(width)
        room = height - 1
        hidden = max(0, len(lines) - room)
        footer = "q quit  s sort (%s)  every %gs" % (SORTS[self.sort], self.interval)
        if hidden:
            footer += "  %s below" % count(hidden, "more tube")
        if self.error:
            footer = self.error + "  |  " + footer
        screen.erase()
        for y, (text, bold) in enumerate(lines[:room]):
            _put(screen, y, 0, text, width, curses.A_BOLD if bold else curses.A_NORMAL)
        y, x, title = self.sort_span
        if y < room:
            _put(screen, y, x, title, width, curses.A_BOLD | curses.A_UNDERLINE)
        _put(screen, height - 1, 0, footer.ljust(width), width, curses.A_REVERSE)
        screen.refresh()


def _put(screen, y, x, text, width, attr):
    import curses
    try:
        screen.addnstr(y, x, text, max(0, width - 1 - x), attr)
    except curses.error:
        pass                    # a terminal too small for this line
