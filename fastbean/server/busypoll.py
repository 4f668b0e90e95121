"""Busy polling: after a read, keep the loop polling for a moment before it
sleeps in epoll_wait, so the client's next command finds it awake.

Waking a thread that sleeps in epoll_wait costs tens of microseconds on a
virtual machine (the idle vCPU has halted and needs an interrupt from the
host). A client that talks in quick turns, such as a worker looping over
reserve/delete or a producer with a pipeline, pays that on every command.
Polling a little longer serves it two to three times faster.

The window adapts the way KVM's halt polling does. Each time a read wakes
the loop, the time it slept tells whether polling would have paid: slept
less than the maximum, and the window grows to cover that gap; slept
longer, and it halves, down to zero. A server whose clients pause for longer
than the maximum therefore does not poll at all, and an idle server sleeps.

Polling pays only while the loop has a core to itself. Where other processes
want the same cores (a shared machine, or the clients on the server's own),
each microsecond it spins is taken from them, the clients included, and the
server gets slower. So while it polls it looks, every CHECK_NS, at how long
its thread waited to run (the kernel's run delay, /proc/thread-self/schedstat).
Past SHARED of the time in STRIKES checks in a row (one alone is too common on
a quiet machine: a kernel thread, a client woken on the loop's core), it stops
polling for BACKOFF_NS, then twice as long each time it finds the core still
shared, up to BACKOFF_MAX_NS; one check that finds the core its own again
starts the back-off over.
"""
import os
import time

START_NS = 5_000                # the smallest window worth polling for
CHECK_NS = 10_000_000           # how often a polling loop checks its run delay
STALE_NS = 100_000_000          # a run delay older than this is a new baseline, not a sample
SHARED = 0.3                    # waited to run more than this share of a check's time...
STRIKES = 2                     # ...in this many checks in a row: the core is shared
BACKOFF_NS = 20_000_000         # the first pause in polling on a shared core
BACKOFF_MAX_NS = 5_120_000_000  # the longest (30 ms of checks every 5 s: 0.6% of a core)
SCHEDSTAT = "/proc/thread-self/schedstat"


def stats_lines(max_ns=0, window_ns=0, idle_ns=0, backoffs=0):
    """fastbean-stats' busy-poll lines (all zeros without a poller)."""
    return (b"busy-poll-max-us: %d\nbusy-poll-window-us: %d\nbusy-poll-idle-seconds: %d.%06d\n"
            b"busy-poll-backoffs: %d\n") % (
        max_ns // 1000, window_ns // 1000, idle_ns // 1_000_000_000, idle_ns % 1_000_000_000 // 1000,
        backoffs)


class RunDelay:
    """The time a thread has spent waiting for a CPU, in ns (the second field
    of its schedstat): the thread that made this object, which is the loop's.
    False where the kernel has no schedstat; read() gives None if it fails."""

    def __init__(self, path=SCHEDSTAT):
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._fd = None

    def __bool__(self):
        return self._fd is not None

    def read(self):
        try:
            return int(os.pread(self._fd, 128, 0).split()[1])
        except (OSError, IndexError, ValueError):
            return None


class BusyPoll:
    """Polls one loop and owns the state of it. Two hooks of the engine call
    it: wake(reads) at the first read after the poller let the loop sleep,
    and turn_soon() at the first read of every loop turn (while it polls,
    its looks end the turns instead of a loop callback each). attach() gives
    it the engine, whose read counter its looks compare."""

    def __init__(self, loop, max_us, end_turn, run_delay=None):
        self._loop = loop
        self._end_turn = end_turn   # ends a loop turn (Server.end_turn)
        self._core = None
        self.max_ns = max_us * 1000
        self.window_ns = 0          # how long a look waits for the next read now
        self.idle_ns = 0            # time spent polling with no read coming
        self._sleeping = True       # the loop may sleep: the next read wakes the poller
        self._polling = False       # a look is queued; it ends the turn too
        self._turn_due = False      # a turn with reads has not ended yet (while polling)
        self._seen = 0              # the engine's read count at the last look
        self._deadline = 0          # stop polling then, unless a read comes first
        self._looked = 0            # time of the last look
        self._slept_at = time.monotonic_ns()
        # shared cores: see the module's docstring
        self._run_delay = run_delay if run_delay is not None else RunDelay()
        self.backoffs = 0           # times polling stopped because the core was shared
        self._backoff_ns = BACKOFF_NS
        self._backoff_until = 0     # no polling before then
        self._strikes = 0           # checks in a row that found the core shared
        self._checked_at = -STALE_NS  # when the run delay was last read, and what it was
        self._delay_seen = 0

    def attach(self, core):
        self._core = core

    def stats(self):
        return stats_lines(self.max_ns, self.window_ns, self.idle_ns, self.backoffs)

    def turn_soon(self):
        """A read started a loop turn: have the turn ended, by the next look
        while polling, else by a loop callback."""
        if self._polling:
            self._turn_due = True
        else:
            self._loop.call_soon(self._end_turn)

    def wake(self, reads):
        """A read came while the poller let the loop sleep (reads: the engine's
        count, this one included). True: still asleep, call again at the next read."""
        self._wake(reads)
        return self._sleeping

    def _wake(self, reads):
        self._sleeping = False
        now = time.monotonic_ns()
        if now < self._backoff_until:
            self._sleep(now)
            return
        slept = now - self._slept_at
        window = self.window_ns
        if slept <= self.max_ns:
            if window < slept:
                window = min(self.max_ns, max(START_NS, 2 * window, slept + slept // 4))
        else:
            window //= 2
            if window < START_NS:
                window = 0
        self.window_ns = window
        if window == 0:
            self._sleep(now)
            return
        self._seen = reads
        self._deadline = self._looked = now
        self._deadline += window
        # A pending callback makes uvloop poll without blocking.
        self._polling = True
        self._loop.call_soon(self._poll)

    def _poll(self):
        # Once per loop turn while polling: end the turn's reads (the engine
        # then need not ask the loop for a call of its own), then look again.
        if self._turn_due:
            self._turn_due = False
            self._end_turn()
        now = time.monotonic_ns()
        core = self._core
        if core.holding:
            # replies wait for an fsync: sleep until it (or another read) comes
            self._sleep(now)
            core.wake_on_read()
            return
        if now - self._checked_at >= CHECK_NS and self._shared(now):
            self._sleep(now)
            core.wake_on_read()
            return
        reads = core.reads
        if reads != self._seen:
            self._seen = reads
            self._deadline = now + self.window_ns
        else:
            self.idle_ns += now - self._looked
            if now >= self._deadline:
                self._sleep(now)
                core.wake_on_read()
                return
        self._looked = now
        self._loop.call_soon(self._poll)

    def _shared(self, now):
        """Check the run delay (every CHECK_NS while polling): True, and
        polling paused, if the thread waited too long for its core."""
        if not self._run_delay:
            return False
        delay = self._run_delay.read()
        if delay is None:
            return False
        since, waited = now - self._checked_at, delay - self._delay_seen
        self._checked_at, self._delay_seen = now, delay
        if since >= STALE_NS:
            self._strikes = 0       # polling resumed after a pause: this is the baseline
            return False
        if waited <= SHARED * since:
            self._strikes = 0
            self._backoff_ns = BACKOFF_NS
            return False
        self._strikes += 1
        if self._strikes < STRIKES:
            return False
        self._strikes = 0
        self.backoffs += 1
        self.window_ns = 0
        self._backoff_until = now + self._backoff_ns
        self._backoff_ns = min(2 * self._backoff_ns, BACKOFF_MAX_NS)
        self._checked_at = now - STALE_NS   # the first check after the pause is a baseline
        return True

    def _sleep(self, now):
        # The loop may sleep now; the engine calls wake() at the next read.
        self._slept_at = now
        self._sleeping = True
        self._polling = False
