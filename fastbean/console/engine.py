"""What the console reads from the engine: directly, not through the
protocol, and never for long. A scan over jobs (a tube's page, a search)
runs in slices of SLICE jobs with a loop turn between them, as flush-tube
does, so a beanstalk client waits at most one slice."""
import asyncio

from fastbean.engine.core import TUBE_KEYS, stats_text, tube_rows

SLICE = 16384               # jobs a listing or a search looks at per loop turn
TUBE_SLICE = 500            # tubes read per loop turn for /tubes
STATES = ("ready", "delayed", "reserved", "buried")
# the columns of /tubes: stats-tube's keys, by their short names
TUBE_COLUMNS = ("ready", "urgent", "delayed", "reserved", "buried", "total", "using", "watching",
                "waiting", "paused")
_KEY_OF = {"ready": "current-jobs-ready", "urgent": "current-jobs-urgent", "delayed": "current-jobs-delayed",
           "reserved": "current-jobs-reserved", "buried": "current-jobs-buried", "total": "total-jobs",
           "using": "current-using", "watching": "current-watching", "waiting": "current-waiting",
           "paused": "pause-time-left"}
_INDEX = {column: TUBE_KEYS.index(key) for column, key in _KEY_OF.items()}
# Listing.rows' fields, in their order
ROW_FIELDS = ("id", "pri", "age", "time_left", "reserves", "releases", "timeouts", "buries", "kicks",
              "size", "head", "holder")


class Unavailable(Exception):
    """The engine of this build lacks what a page needs."""


def parse_stats(text):
    """stats' YAML (flat `key: value` lines) as a dict of ints, floats and strings."""
    out = {}
    for line in text.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition(": ")
        if not sep:
            continue
        value = value.strip()
        if value.startswith('"') and value.endswith('"'):
            out[key] = value[1:-1]
            continue
        try:
            out[key] = int(value)
        except ValueError:
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = value
    return out


def tube_name(raw):
    """A tube's name as text (tube names are ASCII)."""
    return raw.decode("ascii", "replace")


class Reader:
    """The engine of a server, read for pages (server.core: reset_core replaces it)."""

    def __init__(self, server):
        self.server = server

    @property
    def core(self):
        return self.server.core

    def _need(self, name):
        fn = getattr(self.core, name, None)
        if fn is None:
            raise Unavailable("this build's engine cannot show that (no Core.%s)" % name)
        return fn

    def stats(self):
        return parse_stats(stats_text(self.core))

    def counters(self):
        """stats' numbers, for the sampler: the engine's cheap call when it has one."""
        counters = getattr(self.core, "counters", None)
        return counters() if counters is not None else self.stats()

    async def tube_rows(self, sees, text=b""):
        """stats-tube's numbers of every tube sees(name bytes) allows whose name
        holds text: (name bytes, TUBE_KEYS values...) each. Read TUBE_SLICE
        tubes a loop turn: 10,000 tubes would hold the loop for tens of ms."""
        core = self.core
        names = getattr(core, "tube_names", None)
        if names is None:
            rows, _ = tube_rows(core, 1 << 30)
            return [row for row in rows if text in row[0] and sees(row[0])]
        out = []
        every = names()
        for start in range(0, len(every), TUBE_SLICE):
            for name in every[start:start + TUBE_SLICE]:
                if text in name and sees(name):
                    info = core.tube_info(name)
                    if info is not None:
                        out.append((name,) + tuple(info[key] for key in TUBE_KEYS))
            await asyncio.sleep(0)
        return out

    def tube_names(self, sees, limit):
        """The names of the tubes sees(name bytes) allows, sorted; none when
        there are more than limit tubes (a list to pick from, not to page)."""
        names = getattr(self.core, "tube_names", None)
        raw = names() if names is not None else [row[0] for row in tube_rows(self.core, 1 << 30)[0]]
        if len(raw) > limit:
            return []
        return [tube_name(n) for n in sorted(n for n in raw if sees(n))]

    @staticmethod
    def columns(row):
        """{column: value} of a row of tube_rows."""
        values = row[1:]
        return {c: values[i] for c, i in _INDEX.items()}

    @staticmethod
    def column_key(column):
        """A sort key on rows of tube_rows for column."""
        index = _INDEX[column] + 1
        return lambda row: row[index]

    def tube(self, name):
        """stats-tube's fields of tube name (bytes), or None."""
        info = getattr(self.core, "tube_info", None)
        if info is not None:
            return info(name)
        rows, _ = tube_rows(self.core, 1 << 30)
        for row in rows:
            if row[0] == name:
                return dict(zip(TUBE_KEYS, row[1:]))
        return None

    def job(self, job_id):
        return self._need("job_info")(job_id)

    def body(self, job_id, limit=-1):
        return self._need("job_body")(job_id, limit)

    def origin(self, job_id):
        """The tube a dead letter came from (bytes), or None (also without the engine's support)."""
        origin = getattr(self.core, "job_origin", None)
        return origin(job_id) if origin is not None else None

    async def listing(self, tube, state, after=None, count=50):
        """One page of tube's jobs in state: the engine's Listing, built in slices."""
        listing = self._need("listing")(tube, state, after, count)
        while not listing.step(SLICE):
            await asyncio.sleep(0)
        return listing

    def scan(self, tube=None, states=None, needle=None, bodies=False):
        return self._need("scan")(tube=tube, states=states, needle=needle, bodies=bodies)
