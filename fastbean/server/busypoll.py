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
"""
import time

START_NS = 5_000        # the smallest window worth polling for


def stats_lines(max_ns=0, window_ns=0, idle_ns=0):
    """fastbean-stats' busy-poll lines (all zeros without a poller)."""
    return b"busy-poll-max-us: %d\nbusy-poll-window-us: %d\nbusy-poll-idle-seconds: %d.%06d\n" % (
        max_ns // 1000, window_ns // 1000, idle_ns // 1_000_000_000, idle_ns % 1_000_000_000 // 1000)


class BusyPoll:
    """Polls one loop and owns the state of it. Two hooks of the engine call
    it: wake(reads) at the first read after the poller let the loop sleep,
    and turn_soon() at the first read of every loop turn (while it polls,
    its looks end the turns instead of a loop callback each). attach() gives
    it the engine, whose read counter its looks compare."""

    def __init__(self, loop, max_us, end_turn):
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

    def attach(self, core):
        self._core = core

    def stats(self):
        return stats_lines(self.max_ns, self.window_ns, self.idle_ns)

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

    def _sleep(self, now):
        # The loop may sleep now; the engine calls wake() at the next read.
        self._slept_at = now
        self._sleeping = True
        self._polling = False
