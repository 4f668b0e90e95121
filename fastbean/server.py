"""Server: the event loop, listeners, the engine, its one timer, signals, and the role
(primary or standby) that replication gives it."""
import asyncio
import functools
import logging
import os
import signal
import socket

from fastbean import __version__
from fastbean._core import Core, prefault_arenas
from fastbean.binlog import Binlog
from fastbean.busypoll import BusyPoll
from fastbean.config import HANDLED_SIGNALS
from fastbean.errors import BinlogError, BinlogLockedError
from fastbean.protocol import ConnProtocol, Refused, TracingConnProtocol
from fastbean.replication import Replicator

log = logging.getLogger("fastbean")

SHUTDOWN_GRACE = 5.0      # seconds to finish writing to clients on SIGTERM/SIGINT
# Jobs or connections one timer callback may handle (delays coming due, TTR
# expiries, reserve timeouts); the rest waits for the next loop turn, so a
# mass expiry costs other clients a few ms per turn at most.
TICK_BUDGET = 2048


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
        self._timer = None
        self.replicator = None
        self._new_core()
        self.binlog = None
        if config.binlog_dir is not None:
            self.binlog = Binlog(self.core, loop, config.binlog_dir, config.binlog_size,
                                 fsync=config.fsync, fsync_ms=config.fsync_ms)
        if config.replicate:
            self.replicator = Replicator(self, config)
            self.core.ext_stats = self.replicator.stats
        # A replicated node serves clients only while it is the primary.
        self.serving = self.replicator is None
        self.connections = set()
        self.listeners = []
        self._stopping = None
        self._stopped = None        # set when a shutdown has finished
        self._full_logged = False
        self._status = 0

    def _new_core(self):
        config = self.config
        self.core = Core(
            max_job_size=config.max_job_size,
            max_memory=config.max_memory or 0,
            binlog_max_size=config.binlog_size,
            version=__version__.encode(),
            arm=self._arm,
        )
        # Ends each loop turn that read something (fair turns: Core.run_turn).
        self.core.turn_soon = functools.partial(self.loop.call_soon, self.core.run_turn)
        if self.replicator is not None:
            self.core.ext_stats = self.replicator.stats
        self.busy_poll = None
        if config.busy_poll_us:
            self.busy_poll = BusyPoll(self.loop, self.core, config.busy_poll_us)

    # -- replication -------------------------------------------------------------

    def readiness(self):
        """(ready, why): what an HTTP /readyz or a load balancer's check should
        report. A replicated node is ready only while it is the primary."""
        if self._stopping is not None:
            return False, "stopping"
        if not self.serving:
            return False, "standby"
        return True, "ready"

    def set_serving(self, on):
        """Take clients (primary) or not (standby): a standby accepts a connection
        and closes it at once, so no client mistakes it for the primary. Going
        standby closes every client connection; the replies waiting on records
        never go."""
        self.serving = on
        if not on:
            self.core.set_failed(1 << 63)
            for proto in list(self.connections):
                proto.close()

    def reset_core(self):
        """A standby rebuilds its queue from the stream: start from an empty engine."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._new_core()
        if self.binlog is not None:
            self.binlog.core = self.core

    def fatal(self, message):
        log.error("%s", message)
        self._status = 1
        self.stop()

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

    # -- the engine's timer ---------------------------------------------------

    def _arm(self, delay):
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(delay, self._tick)

    def _tick(self):
        self._timer = None
        delay = self.core.tick(TICK_BUDGET)
        if self._timer is not None:     # armed again while ticking; tick's answer covers it
            self._timer.cancel()
            self._timer = None
        if delay is not None:
            self._timer = self.loop.call_later(delay, self._tick)

    # -- lifecycle -------------------------------------------------------------

    async def start(self, socks):
        if self.replicator is not None:
            self.replicator.start()         # with -b, the directory mirrors the stream
        elif self.binlog is not None:
            self.binlog.open()
        cls = TracingConnProtocol if self.verbosity >= 2 else ConnProtocol
        factory = lambda: cls(self) if self.serving else Refused()
        for sock in socks:
            if sock.family == socket.AF_UNIX:
                srv = await self.loop.create_unix_server(factory, sock=sock, backlog=1024)
            else:
                srv = await self.loop.create_server(factory, sock=sock, backlog=1024)
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
        return await self._stopped

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
        if self.replicator is not None:
            # the replies still waiting on the stream go out before the connections close
            await self.replicator.finish(SHUTDOWN_GRACE)
        for proto in list(self.connections):
            proto.close()
        if self.connections:
            try:
                await asyncio.wait_for(self._stopping.wait(), SHUTDOWN_GRACE)
            except asyncio.TimeoutError:
                log.warning("%d connections still open at exit", len(self.connections))
        if self.binlog is not None:
            self.binlog.close()
        self._stopped.set_result(self._status)


def run(config, listeners):
    """Serve on the given listening sockets until SIGTERM/SIGINT; return the exit status."""
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    if not prefault_arenas():
        log.warning("could not start the page-prefault thread; new memory is faulted in on the loop")
    server = Server(config, loop)
    if config.verbosity:
        log.info("pid %d", os.getpid())
    try:
        status = loop.run_until_complete(server.serve(listeners))
    except BinlogLockedError as e:
        log.error("%s", e)
        return 10
    except BinlogError as e:
        log.error("%s", e)
        return 1
    finally:
        loop.close()
    return status
