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


class BusyPoll:
    """Drives the polling of one loop; its state lives on the engine, for fastbean-stats."""

    def __init__(self, loop, core, max_us):
        self._loop = loop
        self._core = core
        self._seen = 0          # core.reads at the last look
        self._deadline = 0      # stop polling then, unless a read comes first
        self._looked = 0        # time of the last look
        self._slept_at = time.monotonic_ns()
        core.poll_max_ns = max_us * 1000
        core.poll_window_ns = 0
        core.on_wake = self._wake
        core.sleeping = True

    def _wake(self):
        # The engine calls this at the first read after the loop slept.
        core = self._core
        now = time.monotonic_ns()
        slept = now - self._slept_at
        window = core.poll_window_ns
        if slept <= core.poll_max_ns:
            if window < slept:
                window = min(core.poll_max_ns, max(START_NS, 2 * window, slept + slept // 4))
        else:
            window //= 2
            if window < START_NS:
                window = 0
        core.poll_window_ns = window
        if window == 0:
            self._sleep(now)
            return
        self._seen = core.reads
        self._deadline = self._looked = now
        self._deadline += window
        # A pending callback makes uvloop poll without blocking.
        core.polling = True
        self._loop.call_soon(self._poll)

    def _poll(self):
        # Once per loop turn while polling: end the turn's reads (the engine
        # then need not ask the loop for a call of its own), then look again.
        core = self._core
        if core.turn_asked:
            core.run_turn()
        now = time.monotonic_ns()
        if core.reads != self._seen:
            self._seen = core.reads
            self._deadline = now + core.poll_window_ns
        else:
            core.poll_idle_ns += now - self._looked
            if now >= self._deadline:
                self._sleep(now)
                return
        self._looked = now
        self._loop.call_soon(self._poll)

    def _sleep(self, now):
        self._slept_at = now
        self._core.sleeping = True
        self._core.polling = False
