"""Server: the event loop, listeners, the engine, its one timer, and signals."""
import asyncio
import functools
import logging
import os
import signal
import socket

from fastbean import __version__, busypoll
from fastbean._core import Core, prefault_arenas, tune_malloc
from fastbean.binlog import Binlog
from fastbean.busypoll import BusyPoll
from fastbean.config import BACKLOG, HANDLED_SIGNALS, SHUTDOWN_GRACE, TICK_BUDGET
from fastbean.errors import BinlogError, BinlogLockedError
from fastbean.protocol import ConnProtocol, TracingConnProtocol

log = logging.getLogger("fastbean")


def new_event_loop():
    """uvloop's loop when it can be had, asyncio's otherwise (said in the log)."""
    try:
        import uvloop
    except ImportError as e:
        log.warning("uvloop is not available (%s); running on asyncio's event loop", e)
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class Server:
    def __init__(self, config, loop):
        self.config = config
        self.loop = loop
        self.verbosity = config.verbosity
        # Each loop turn that read something ends with end_turn (fair turns,
        # one binlog commit, one timer update): called by the busy poller's
        # next look while it polls, else by a loop callback.
        self.busy_poll = None
        if config.busy_poll_us:
            self.busy_poll = BusyPoll(loop, config.busy_poll_us, self.end_turn)
            end_turn_soon, on_wake = self.busy_poll.turn_soon, self.busy_poll.wake
            ext_stats = self.busy_poll.stats
        else:
            end_turn_soon = functools.partial(loop.call_soon, self.end_turn)
            on_wake, ext_stats = None, busypoll.stats_lines
        self.binlog = None
        commit_soon = next_file = None
        if config.binlog_dir is not None:
            self.binlog = Binlog(loop, config.binlog_dir, config.binlog_size,
                                 fsync=config.fsync, fsync_ms=config.fsync_ms)
            commit_soon, next_file = self.binlog.schedule, self.binlog.next_file
        self.core = Core(
            max_job_size=config.max_job_size,
            max_memory=config.max_memory or 0,
            binlog_max_size=config.binlog_size,
            version=__version__.encode(),
            arm=self._arm,
            end_turn_soon=end_turn_soon,
            on_wake=on_wake,
            ext_stats=ext_stats,
            commit_soon=commit_soon,
            next_file=next_file,
        )
        if self.busy_poll is not None:
            self.busy_poll.attach(self.core)
        self.connections = set()
        self.listeners = []
        self._timer = None
        self._stopping = None
        self._stopped = None        # set when a shutdown has finished
        self._full_logged = False

    # -- connections ---------------------------------------------------------

    def admit(self, proto):
        limit = self.config.max_connections
        if self._stopping is not None:
            return False
        if limit is not None and len(self.connections) >= limit:
            if not self._full_logged:
                log.warning("connection limit (%d) reached: refusing new connections", limit)
                self._full_logged = True
            return False
        self._full_logged = False
        self.connections.add(proto)
        return True

    def forget(self, proto):
        self.connections.discard(proto)
        if self._stopping is not None and not self.connections:
            self._stopping.set()

    # -- the engine's timer and turns -------------------------------------------

    def end_turn(self):
        self.core.end_turn()
        if self.binlog is not None:
            self.binlog.end_of_turn()

    def _arm(self, delay):
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(delay, self._tick)

    def _tick(self):
        # At most TICK_BUDGET jobs or connections per call (delays coming
        # due, TTR expiries, reserve timeouts); the rest waits for the next
        # loop turn, so a mass expiry costs other clients a few ms per turn.
        self._timer = None
        delay = self.core.tick(TICK_BUDGET)
        if self._timer is not None:     # armed again while ticking; tick's answer covers it
            self._timer.cancel()
            self._timer = None
        if delay is not None:
            self._timer = self.loop.call_later(delay, self._tick)

    # -- lifecycle -------------------------------------------------------------

    async def start(self, socks):
        if self.binlog is not None:
            self.binlog.open(self.core)
        cls = TracingConnProtocol if self.verbosity >= 2 else ConnProtocol

        def factory():
            return cls(self)

        for sock in socks:
            if sock.family == socket.AF_UNIX:
                srv = await self.loop.create_unix_server(factory, sock=sock, backlog=BACKLOG)
            else:
                srv = await self.loop.create_server(factory, sock=sock, backlog=BACKLOG)
            self.listeners.append(srv)
        if self.config.max_memory:
            log.warning("memory cap %d bytes: put answers OUT_OF_MEMORY beyond it "
                        "(fastbean-stats shows memory-used)", self.config.max_memory)
        self.loop.add_signal_handler(signal.SIGUSR1, self.drain)
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self.stop)

    async def serve(self, socks):
        """Start, then run until a SIGTERM/SIGINT shutdown has finished."""
        self._stopped = self.loop.create_future()
        await self.start(socks)
        # The CLI blocked these signals before it opened the sockets: clients
        # can connect (and signal) before the loop runs. With the handlers in
        # place, whatever came meanwhile is delivered now instead of lost.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED_SIGNALS)
        await self._stopped

    def drain(self):
        if not self.core.draining:
            log.warning("entering drain mode")
        self.core.set_draining()

    def stop(self):
        if self._stopping is None:
            self._stopping = asyncio.Event()
            self.loop.create_task(self._shutdown())

    async def _shutdown(self):
        log.info("shutting down")
        for srv in self.listeners:
            srv.close()
        for proto in list(self.connections):
            proto.close()
        if self.connections:
            try:
                await asyncio.wait_for(self._stopping.wait(), SHUTDOWN_GRACE)
            except asyncio.TimeoutError:
                log.warning("%d connections still open at exit", len(self.connections))
        if self.binlog is not None:
            self.binlog.close()
        self._stopped.set_result(None)


def main(config, listeners):
    """Serve on the given listening sockets until SIGTERM/SIGINT; return the exit status."""
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    tune_malloc()
    if not prefault_arenas():
        log.warning("could not start the page-prefault thread; new memory is faulted in on the loop")
    server = Server(config, loop)
    if config.verbosity:
        log.info("pid %d", os.getpid())
    try:
        loop.run_until_complete(server.serve(listeners))
    except BinlogLockedError as e:
        log.error("%s", e)
        return 10
    except BinlogError as e:
        log.error("%s", e)
        return 1
    finally:
        loop.close()
    return 0
