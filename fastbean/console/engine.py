"""What the console reads from the engine: directly, not through the
protocol, and never for long. A scan over jobs (a tube's page, a search)
runs in slices of SLICE jobs with a loop turn between them, as flush-tube
does, so a beanstalk client waits at most one slice."""
import asyncio

from fastbean.engine.core import TUBE_KEYS, stats_text

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

    def stats(self):
        return parse_stats(stats_text(self.core))

    def counters(self):
        """stats' numbers by their names, for the sampler (no YAML)."""
        return self.core.counters()

    async def tube_rows(self, sees, text=b""):
        """stats-tube's numbers of every tube sees(name bytes) allows whose name
        holds text: (name bytes, TUBE_KEYS values...) each. Read TUBE_SLICE
        tubes a loop turn: 10,000 tubes would hold the loop for tens of ms."""
        core = self.core
        out = []
        every = core.tube_names()
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
        raw = self.core.tube_names()
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
        return self.core.tube_info(name)

    def job(self, job_id):
        """stats-job's fields of a job, its size and holder, or None."""
        return self.core.job_info(job_id)

    def body(self, job_id, limit=-1):
        return self.core.job_body(job_id, limit)

    def origin(self, job_id):
        """The tube a dead letter came from (bytes), or None."""
        return self.core.job_origin(job_id)

    async def listing(self, tube, state, after=None, count=50):
        """One page of tube's jobs in state: the engine's Listing, built in slices."""
        listing = self.core.listing(tube, state, after, count)
        while not listing.step(SLICE):
            await asyncio.sleep(0)
        return listing

    def scan(self, tube=None, states=None, needle=None, bodies=False):
        return self.core.scan(tube=tube, states=states, needle=needle, bodies=bodies)
