"""Server: the event loop, listeners, the engine, its one timer, signals,
readiness, the role (primary or standby) replication gives it, and what it
tells systemd and the log."""
import asyncio
import functools
import logging
import os
import signal
import socket
import time
from typing import Any, Optional, Type

from fastbean import __version__
from fastbean.binlog import Binlog
from fastbean.config import (
    BACKLOG,
    HANDLED_SIGNALS,
    SHUTDOWN_GRACE,
    STATUS_INTERVAL,
    TICK_BUDGET,
)
from fastbean.engine.core import Core, prefault_arenas, tune_malloc
from fastbean.errors import BinlogError, BinlogLockedError
from fastbean.logs import counted, event
from fastbean.server import busypoll
from fastbean.server.authgate import AuthConnProtocol, TracingAuthConnProtocol
from fastbean.server.busypoll import BusyPoll
from fastbean.server.drain import Drain
from fastbean.server.http import Endpoint
from fastbean.server.limits import Connections, MemoryCap
from fastbean.server.metrics import ScheduleLags
from fastbean.server.protocol import (
    ConnProtocol,
    Refused,
    TlsConnProtocol,
    TracingConnProtocol,
    TracingTlsConnProtocol,
)
from fastbean.server.recovery import Recovery
from fastbean.server.systemd import Notifier
from fastbean.wal import Sink


def new_event_loop():
    """uvloop's loop when it can be had, asyncio's otherwise (said in the log)."""
    try:
        import uvloop
    except ImportError as e:
        event(logging.WARNING, "no-uvloop", "uvloop is not available (%(error)s); running on "
              "asyncio's event loop", error=str(e))
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


# why a node in each phase but "serving" is not ready (/readyz)
NOT_SERVING = {"replaying": "replaying the binlog",
               "recovering": "rebuilding from the binlog after a disk failure"}


def protocol_class(tls, auth, tracing) -> Type[ConnProtocol]:
    """A listener's connections' protocol: plain, TLS, or TLS behind the
    token gate (auth), each with a tracing twin for -V -V."""
    if tls and auth:
        return TracingAuthConnProtocol if tracing else AuthConnProtocol
    if tls:
        return TracingTlsConnProtocol if tracing else TlsConnProtocol
    return TracingConnProtocol if tracing else ConnProtocol


def say_modes(config):
    """Log the modes an operator must not miss at start: --testing, the memory cap."""
    if config.testing:
        event(logging.WARNING, "testing", "--testing: fastbean-reset and "
              "fastbean-clock-advance are on; never use this flag in production")
    if config.max_memory:
        event(logging.INFO, "memory-cap", "memory cap " + counted(config.max_memory, "byte")
              + ": put answers OUT_OF_MEMORY beyond it (fastbean-stats shows memory-used)",
              max_memory=config.max_memory)


def say_ready(jobs, stream, nats_servers):
    """The "ready" event: serving jobs, or (replicated: nats_servers given) a
    standby that serves once it is the primary, which replication's events say."""
    if nats_servers is not None:
        event(logging.INFO, "ready", "started as a standby of stream %(stream)s, connecting to NATS "
              "at %(servers)s", jobs=jobs, pid=os.getpid(), version=__version__, stream=stream,
              servers=nats_servers)
    else:
        event(logging.INFO, "ready", "serving " + counted(jobs, "job"), jobs=jobs, pid=os.getpid(),
              version=__version__)


class Server:
    def __init__(self, config, loop, notifier=None, certificates=None, auth=None, console=None):
        self.config = config
        self.certificates = certificates    # a tls.Certificates with --tls-cert
        self.auth = auth                    # a tokens.TokenAuth with --auth-tokens (TLS listeners ask)
        self.loop = loop
        self.verbosity = config.verbosity
        self._timer = None
        # Each loop turn that read something ends with end_turn (fair turns,
        # one binlog commit, one timer update): called by the busy poller's
        # next look while it polls, else by a loop callback.
        self.busy_poll = None
        if config.busy_poll_us:
            self.busy_poll = BusyPoll(loop, config.busy_poll_us, self.end_turn)
        # Where the engine's records go, the one log (a fastbean.wal.Sink):
        # the local binlog (self.binlog), or the replication stream, which
        # mirrors them into the binlog directory with -b. The log is given
        # what it may do to the server (a fastbean.wal.Host), this object.
        self.log: Optional[Sink] = None
        self.binlog: Optional[Binlog] = None
        self.replicator: Optional[Any] = None      # a fastbean.replication.Replicator
        self.recovery = Recovery(self)
        if config.replicate:
            from fastbean.replication import Replicator  # imports nats: only when replicating
            self.replicator = Replicator(self, config)
            self.log = self.replicator.log
        elif config.binlog_dir is not None:
            self.log = self.binlog = Binlog(loop, config.binlog_dir, config.binlog_size,
                                            fsync=config.fsync, fsync_ms=config.fsync_ms,
                                            on_failure=self.recovery.binlog_failed)
        self.connections = Connections(config.max_connections, config.max_unauthenticated_per_address)
        self.core: Core         # the engine: _new_core() makes it, and each rebuild a new one
        self.schedule_lags = ScheduleLags()   # the lag of each schedule's firings (/metrics)
        self._new_core()
        # A replicated node serves clients only while it is the primary.
        self.serving = self.replicator is None
        self.memory_cap = MemoryCap(config.max_memory, config.max_job_size) if config.max_memory else None
        self.listeners = []
        self.notifier = notifier if notifier is not None else Notifier()
        self.endpoint = None        # the HTTP endpoint, with --metrics
        self.console = None         # the web console (fastbean.console.Console), with --console
        self._console_class = console   # what makes it: the CLI hands it over (the console imports the server)
        self.started_at = None      # time.time() when it began serving
        self.phase = "starting"     # then "replaying", "serving" ("recovering" after a disk failure), "stopping"
        self.stopping = False
        self.drain = Drain(loop, lambda: self.core, lambda: self.notifier.status(self._status()),
                           lambda: self.stopping)
        self._stopped: Optional[asyncio.Future] = None     # set when a shutdown has finished
        self._exit_status = 0
        self._periodic = []         # timer handles of _check and _watchdog

    def _new_core(self):
        config = self.config
        if self.busy_poll is not None:
            end_turn_soon, on_wake = self.busy_poll.turn_soon, self.busy_poll.wake
        else:
            end_turn_soon = functools.partial(self.loop.call_soon, self.end_turn)
            on_wake = None
        self.core = Core(
            max_job_size=config.max_job_size,
            max_memory=config.max_memory or 0,
            binlog_max_size=config.binlog_size,
            version=__version__.encode(),
            arm=self._arm,
            end_turn_soon=end_turn_soon,
            on_wake=on_wake,
            ext_stats=self._ext_stats,
            commit_soon=self.log.schedule if self.log is not None else None,
            next_file=self.log.next_file if self.log is not None else None,
            testing=config.testing,
            strict=config.strict,
            retry_limit=config.retry_limit,
            dead_letter_tube=config.dead_letter_tube.encode() if config.dead_letter_tube else None,
            drop_others=self.connections.drop_others if config.testing else None,
            lease_over=self.replicator.lease_over if self.replicator is not None else None,
            on_fire=self.schedule_lags.fired,
        )
        if self.busy_poll is not None:
            self.busy_poll.attach(self.core)

    # -- the engine's hooks (given once, to every engine this server makes) --------

    def _ext_stats(self):
        lines = self.busy_poll.stats() if self.busy_poll is not None else busypoll.stats_lines()
        drained = self.core.draining and self.core.reserved_jobs == 0
        lines += b"drained: %s\n" % (b"true" if drained else b"false")
        if self.replicator is not None:
            lines += self.replicator.stats()
        return lines

    # -- serving, and not ----------------------------------------------------------

    def set_serving(self, on):
        """Take clients, or not: a node that does not serve accepts a connection
        and closes it at once, so no client mistakes it for one that does.
        Not serving closes every client connection, and the replies waiting
        on records never go."""
        self.serving = on
        if not on:
            self.core.set_failed(1 << 63)
            self.connections.close()
        self.notifier.status(self._status())

    def reset_core(self):
        """Start again from an empty engine (a standby rebuilds from the stream,
        the binlog is replayed again after a failure)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._new_core()

    def fatal(self, message, status=1):
        event(logging.ERROR, "fatal", "%(error)s", error=message, status=status)
        self._exit_status = status
        self.stop(None)

    # -- connections ---------------------------------------------------------

    def admit(self, proto, address=None):
        """A connection just accepted (address: of one still to come in); False: close it at once."""
        return self.connections.admit(proto, address)

    def authenticated(self, proto):
        self.connections.authenticated(proto)

    def forget(self, proto):
        self.connections.forget(proto)

    # -- the engine's timer and turns -------------------------------------------

    def end_turn(self):
        self.core.end_turn()
        if self.log is not None:
            self.log.end_of_turn()

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

    @property
    def disk(self):
        """The binlog directory's state (a fastbean.wal.DiskLog), or None without -b."""
        return self.log.disk if self.log is not None else None

    def readiness(self):
        """(ready, why): what /readyz answers, and what a load balancer's check
        should see. A replicated node is ready only while it is the primary."""
        if self.phase != "serving":
            return False, NOT_SERVING.get(self.phase, self.phase)
        if self.replicator is not None:
            ready, why = self.replicator.readiness()
            if not ready:
                return False, why
        if self.core.draining:
            return False, self.drain.state()
        if self.disk is not None and self.disk.failing:
            return False, "binlog failing"
        return True, "ready"

    async def _listen(self, sock, tls):
        # Plain or TLS is decided here, once per listener: a plain connection's
        # protocol is the same with TLS configured or not. A TLS listener
        # accepts plain connections and its protocol runs the handshake
        # (start_tls), so that a connection counts from its accept.
        cls = protocol_class(tls, self.auth is not None, self.verbosity >= 2)

        def factory():
            return cls(self) if self.serving else Refused()

        if sock.family == socket.AF_UNIX:
            srv = await self.loop.create_unix_server(factory, sock=sock, backlog=BACKLOG)
        else:
            srv = await self.loop.create_server(factory, sock=sock, backlog=BACKLOG)
        self.listeners.append(srv)

    async def start(self, listeners, metrics_sock=None, console_sock=None):
        """Serve on listeners (sockets.Listener: a socket, and whether it speaks TLS)."""
        self.started_at = time.time()
        # The HTTP endpoint and the watchdog come first: /readyz answers 503
        # while the binlog replays, a file at a time between loop turns.
        if metrics_sock is not None:
            self.endpoint = Endpoint(self, self.auth if self.config.metrics_auth else None,
                                     self.config.health_auth)
            await self.endpoint.start(metrics_sock, self.certificates.context if self.config.metrics_tls else None)
        if console_sock is not None:
            self.console = self._console_class(self)
            await self.console.start(console_sock, self.certificates.context if self.config.console_tls else None)
        if self.notifier.watchdog_interval:
            self._every(self.notifier.watchdog_interval, self.notifier.watchdog)
        if self.replicator is not None:
            self.replicator.start()         # with -b, the directory mirrors the stream
        elif self.binlog is not None:
            self.phase = "replaying"
            for done, total in self.binlog.opening(self.core):
                self.notifier.status("replaying the binlog: file %d of %d" % (done, total))
                self.notifier.extend_start(60)
                await asyncio.sleep(0)
        for sock, tls in listeners:
            await self._listen(sock, tls)
        say_modes(self.config)
        self.loop.add_signal_handler(signal.SIGUSR1, self.drain.start)
        if not self.config.strict:
            self.loop.add_signal_handler(signal.SIGUSR2, self.drain.end)
        if self.certificates is not None:
            self.loop.add_signal_handler(signal.SIGHUP, self.reload)
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self.stop, sig)
        self.phase = "serving"
        self.notifier.ready(self._status())
        say_ready(self.core.current_jobs, self.config.replicate_stream,
                  self.replicator.link.servers if self.replicator is not None else None)
        if self.notifier.enabled or self.config.max_memory:
            self._every(STATUS_INTERVAL, self._check)

    async def serve(self, listeners, metrics_sock=None, console_sock=None):
        """Start, then run until a SIGTERM/SIGINT shutdown has finished."""
        self._stopped = self.loop.create_future()
        await self.start(listeners, metrics_sock, console_sock)
        # The CLI blocked these signals before it opened the sockets: clients
        # can connect (and signal) before the loop runs. With the handlers in
        # place, whatever came meanwhile is delivered now instead of lost.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED_SIGNALS)
        return await self._stopped

    def _every(self, seconds, fn):
        slot = len(self._periodic)
        self._periodic.append(None)

        def tick():
            fn()
            self._periodic[slot] = self.loop.call_later(seconds, tick)

        self._periodic[slot] = self.loop.call_later(seconds, tick)

    def _status(self):
        text = "%s, %s" % (counted(self.core.current_jobs, "job"), counted(len(self.connections), "connection"))
        ready, why = self.readiness()
        return text if ready else "%s; %s" % (text, why)

    def _check(self):
        # Once a STATUS_INTERVAL: systemd's STATUS line, and the memory cap.
        self.notifier.status(self._status())
        if self.memory_cap is not None:
            self.memory_cap.check(self.core)

    def reload(self):
        """SIGHUP: the TLS certificates and the tokens, from their files again."""
        self.certificates.reload()
        if self.auth is not None:
            self.auth.reload()

    def stop(self, sig=signal.SIGTERM):
        """Shut down, on signal `sig` (None: after a fatal error)."""
        if not self.stopping:
            self.stopping = True
            self.connections.refuse_new()
            self.phase = "stopping"
            self.notifier.stopping()
            name = signal.Signals(sig).name if sig is not None else None
            event(logging.INFO, "shutdown", ("shutting down on %(signal)s: " if name else "shutting down: ")
                  + counted(len(self.connections), "connection") + ", " + counted(self.core.current_jobs, "job"),
                  signal=name, connections=len(self.connections), jobs=self.core.current_jobs)
            self.loop.create_task(self._shutdown())

    async def _shutdown(self):
        for handle in self._periodic:
            handle.cancel()
        for srv in self.listeners:
            srv.close()
        if self.replicator is not None:
            # the replies still waiting on the stream go out before the connections close
            await self.replicator.finish(SHUTDOWN_GRACE)
        if not await self.connections.close_all(SHUTDOWN_GRACE):
            event(logging.WARNING, "shutdown-timeout", counted(len(self.connections), "connection")
                  + " still open at exit", connections=len(self.connections))
        if self.endpoint is not None:       # /readyz said "stopping" until now
            self.endpoint.close()
        if self.console is not None:
            await self.console.close()
        if self.log is not None:
            self.log.close()
        if self._stopped is not None:
            self._stopped.set_result(self._exit_status)


def preload(config):
    """Import what the server will need (uvloop; nats with --replicate) while the
    process can still read every module: -u comes next."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        pass            # new_event_loop says so
    if config.replicate:
        import fastbean.replication  # noqa: F401


def run(config, listeners, metrics_sock=None, certificates=None, auth=None, console_sock=None, console=None):
    """Serve on the given listeners (sockets.Listener) until SIGTERM/SIGINT; return
    the exit status. certificates: the tls.Certificates of the TLS listeners;
    auth: the tokens.TokenAuth they ask clients for; console: the class of
    the web console to serve on console_sock."""
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    tune_malloc()
    if not prefault_arenas():
        event(logging.WARNING, "no-prefault", "could not start the page-prefault thread; new "
              "memory is faulted in on the loop")
    server = Server(config, loop, certificates=certificates, auth=auth, console=console)
    status = 0
    try:
        status = loop.run_until_complete(server.serve(listeners, metrics_sock, console_sock))
    except BinlogLockedError as e:
        event(logging.ERROR, "binlog-locked", "%(error)s", error=str(e), status=e.status)
        status = e.status
    except BinlogError as e:
        # at start-up: the directory cannot be used (10), or the binlog read or grown (1)
        event(logging.ERROR, "binlog-error", "%(error)s", op="open", error=str(e), status=e.status)
        status = e.status
    finally:
        loop.close()
        server.notifier.close()
    event(logging.ERROR if status else logging.INFO, "exit", "exiting with status %(status)d",
          status=status)
    return status
