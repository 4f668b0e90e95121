"""The last five minutes at one-second resolution, kept in memory for the
overview's charts: one loop.call_later a second reads the engine's counters
(no YAML, no per-client work) and wakes the open event streams."""
import collections
import time

HISTORY = 300               # samples kept: 5 minutes
INTERVAL = 1.0              # seconds between samples
# per-second rates: the name in a sample, and the stats counters it sums
RATES = (("puts", ("cmd-put",)), ("reserves", ("cmd-reserve", "cmd-reserve-with-timeout")),
         ("deletes", ("cmd-delete",)), ("timeouts", ("job-timeouts",)), ("buries", ("cmd-bury",)))
# levels: the name in a sample, and the stats field
LEVELS = (("ready", "current-jobs-ready"), ("delayed", "current-jobs-delayed"),
          ("reserved", "current-jobs-reserved"), ("buried", "current-jobs-buried"),
          ("connections", "current-connections"), ("waiting", "current-waiting"),
          ("tubes", "current-tubes"))


class Sampler:
    """History of the rates and levels, and the waiters of the next sample."""

    def __init__(self, loop, reader):
        self.loop = loop
        self.reader = reader
        self.samples = collections.deque(maxlen=HISTORY)
        self._last = None           # the counters of the last sample
        self._timer = None
        self._next = loop.create_future()

    def start(self):
        self._sample()

    def stop(self):
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._next.done():
            self._next.cancel()

    def next(self):
        """A future of the next sample."""
        return self._next

    def _sample(self):
        self._timer = self.loop.call_later(INTERVAL, self._sample)
        counters = self.reader.counters()
        core = self.reader.core
        sample = {"t": round(time.time(), 3)}
        last = self._last
        for name, keys in RATES:
            now = sum(counters.get(key, 0) for key in keys)
            sample[name] = max(now - last[name], 0) if last is not None else 0
            counters[name] = now
        for name, key in LEVELS:
            sample[name] = counters.get(key, 0)
        sample["memory"] = core.mem_used
        sample["max_memory"] = core.max_memory
        self._last = counters
        self.samples.append(sample)
        waiting, self._next = self._next, self.loop.create_future()
        if not waiting.done():
            waiting.set_result(sample)
