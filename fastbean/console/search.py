"""Search: a job by id, or jobs by a substring or a regular expression of
their bodies, in some states and tubes. Bounded by a number of matches and
a time budget, run in slices with a loop turn between them, one at a time
per session, and cancellable (a new search ends the old one).

A substring is matched in the engine, a slice at a time. A regular
expression can take any time on one body ((x+x+)+y on a long one), so the
loop only copies a slice's bodies out, and the `regex` module matches them
in a thread of its own with the GIL released: the loop never waits on a
match, and the search's time budget is the match's timeout."""
import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import regex as regex_module

from fastbean.console.engine import STATES

MAX_MATCHES = 1000          # the most matches a search may ask for
DEFAULT_MATCHES = 100
BUDGET = 30.0               # seconds a search may run
MAX_QUERY = 1000            # characters of a query
SLICE = 16384               # jobs of the first slice (a substring is matched in the engine)
REGEX_SLICE = 1024          # bodies of the first slice when Python matches a regular expression
SLICE_TIME = 0.001          # seconds a slice should take: big bodies make slices of fewer jobs
MIN_SLICE, MAX_SLICE = 16, 32768

# One thread matches regular expressions for every session's searches: a
# search costs at most one core, whatever the number of people searching.
_matcher = None


def _matching_thread():
    global _matcher
    if _matcher is None:
        _matcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="console-search")
    return _matcher


class BadQuery(ValueError):
    """A query that cannot be run: the reason, in one line."""


class Search:
    """One search: its query, matches so far, progress, and the task that runs it."""

    def __init__(self, reader, sees, text, tube=None, states=None, regex=False, limit=DEFAULT_MATCHES):
        if len(text) > MAX_QUERY:
            raise BadQuery("a query of at most %d characters" % MAX_QUERY)
        if text.startswith("re:"):
            text, regex = text[3:], True
        if not text:
            raise BadQuery("nothing to search for")
        self.reader = reader
        self.sees = sees
        self.text = text
        self.tube = tube                # bytes, or None for every tube sees allows
        self.states = tuple(states) if states else STATES
        self.regex = None
        if regex:
            try:
                self.regex = regex_module.compile(text.encode("utf-8", "surrogateescape"))
            except regex_module.error as e:
                raise BadQuery("not a regular expression: %s" % e) from None
        self.limit = limit
        self.key = (text, tube, self.states, regex, limit)
        self.matches = []               # job ids
        self.scanned = 0
        self.total = 0
        self.state = "running"          # then done, limit (enough matches), budget (out of time), cancelled, failed
        self.error = None
        self.started = time.monotonic()
        self.ended = None
        self.task = None

    def start(self, loop):
        self.task = loop.create_task(self._run())
        return self

    @property
    def running(self):
        return self.state == "running"

    @property
    def elapsed(self):
        return (self.ended or time.monotonic()) - self.started

    def cancel(self):
        if self.running:
            self._end("cancelled")
            if self.task is not None:
                self.task.cancel()

    def _end(self, state):
        if self.running:
            self.state = state
            self.ended = time.monotonic()

    def _found(self, job_id):
        if len(self.matches) < self.limit:
            tube = self.reader.core.job_tube(job_id)
            if tube is not None and self.sees(tube):
                self.matches.append(job_id)
        if len(self.matches) >= self.limit:
            self._end("limit")

    async def _run(self):
        try:
            text = self.text
            if text.isdigit() and self.regex is None:
                # an id: the job itself, and bodies holding the digits too
                info = self.reader.job(int(text))
                if info is not None and info["state"] in self.states and \
                        (self.tube is None or info["tube"] == self.tube.decode()):
                    self._found(int(text))
            await self._scan()
        except asyncio.CancelledError:
            self._end("cancelled")
        else:
            self._end("done")

    async def _scan(self):
        deadline = self.started + BUDGET
        regex = self.regex
        scan = self.reader.scan(tube=self.tube, states=list(self.states),
                                needle=None if regex else self.text.encode("utf-8", "surrogateescape"),
                                bodies=regex is not None)
        first = self.matches[0] if self.matches else None
        budget = REGEX_SLICE if regex else SLICE
        while self.running:
            began = time.perf_counter()
            found = scan.step(budget)
            spent = time.perf_counter() - began
            if regex is not None:
                found = await self._matching(regex, found, deadline)
                if found is None:
                    return
            self.scanned, self.total = scan.scanned, scan.total
            for job_id in found:
                if job_id != first:
                    self._found(job_id)
                if not self.running:
                    return
            if scan.done:
                return
            # the next slice's size from this one's time on the loop: bodies differ in size
            if spent > 2 * SLICE_TIME:
                budget = max(budget // 2, MIN_SLICE)
            elif spent < SLICE_TIME / 2:
                budget = min(budget * 2, MAX_SLICE)
            if time.monotonic() > deadline:
                self._end("budget")
                return
            await asyncio.sleep(0)

    async def _matching(self, regex, found, deadline):
        """The ids of found's (id, body) pairs whose body regex matches,
        matched off the loop; None once the search has ended (cancelled,
        or out of time in the middle of a body)."""
        def match():
            hits = []
            for job_id, body in found:
                if not self.running:
                    break
                if regex.search(body, concurrent=True, timeout=max(deadline - time.monotonic(), 0.001)):
                    hits.append(job_id)
            return hits

        try:
            hits = await asyncio.get_running_loop().run_in_executor(_matching_thread(), match)
        except TimeoutError:
            self._end("budget")
            return None
        return hits if self.running else None
