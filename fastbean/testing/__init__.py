"""Start a fastbean server process from Python (scripts, notebooks, tests) and stop it by its PID."""
import datetime
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from fractions import Fraction

from fastbean.errors import FastbeanError, ServerStartError

__all__ = ["server", "Server", "Clock", "ServerStartError"]

HOST = "127.0.0.1"
START_TIMEOUT = 10.0            # seconds for a new server to answer
STOP_TIMEOUT = 10.0             # seconds between SIGTERM and SIGKILL
BIND_TRIES = 5                  # free ports tried when another process takes one first
NS = 10 ** 9


def server(*args, host=HOST, port=None, unix_socket=None, binlog_dir=None,
           testing=False, timeout=START_TIMEOUT):
    """Start `python -m fastbean` and return it running, as a Server.

    Use it in a with block, which stops it, or call stop() yourself.

    args: extra server flags, e.g. "-z", "1048576". host and port: where it
    listens (port None: a free one). unix_socket: True for a UNIX socket in
    a temporary directory, or the socket's path; host and port are then
    unused. binlog_dir: keep a binlog there (created if missing).
    testing: start with --testing, so reset() and clock.advance() work.
    timeout: seconds to wait for it to answer.
    Raises ServerStartError, with the server's stderr, if it cannot start.
    """
    srv = Server(args, host, port, unix_socket, binlog_dir, testing)
    srv._start(timeout)
    return srv


class Server:
    """A running fastbean process and its address.

    For TCP, host, port and url ("beanstalk://host:port"); for a UNIX socket,
    unix_socket (its path), and host, port and url are None. address is what
    greenstalk.Client takes either way: (host, port), or the path.
    """

    def __init__(self, args, host, port, unix_socket, binlog_dir, testing):
        self.args = [str(a) for a in args]
        self.testing = testing
        self.binlog_dir = None if binlog_dir is None else os.path.abspath(binlog_dir)
        self._tmpdir = None
        if unix_socket:
            if unix_socket is True:
                self._tmpdir = tempfile.mkdtemp(prefix="fastbean-")
                unix_socket = os.path.join(self._tmpdir, "fastbean.sock")
            self.unix_socket = os.path.abspath(unix_socket)
            self.host = self.port = None
        else:
            self.unix_socket = None
            self.host = host
            self.port = port
        self._port_given = port is not None
        self._proc = None
        self._log = None
        self._exit_log = None
        self.clock = Clock(self)

    # -- address ----------------------------------------------------------------

    @property
    def address(self):
        return self.unix_socket if self.unix_socket else (self.host, self.port)

    @property
    def url(self):
        if self.unix_socket:
            return None
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "beanstalk://%s:%d" % (host, self.port)

    @property
    def pid(self):
        return self._proc.pid

    def __repr__(self):
        where = self.unix_socket or self.url
        return "<fastbean.testing.Server pid %s on %s>" % (self._proc and self._proc.pid, where)

    # -- process ----------------------------------------------------------------

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    @property
    def running(self):
        return self._proc is not None and self._proc.poll() is None

    @property
    def log(self):
        """Everything the server wrote to stderr so far."""
        if self._log is None:
            return self._exit_log or ""
        # pread, not seek and read: the server writes at the offset it shares
        # with this file, and a seek would make it overwrite its first lines
        fd = self._log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM to its PID (SIGKILL after timeout seconds); returns its exit status."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        if self._log is not None:
            self._exit_log = self.log
            self._log.close()
            self._log = None
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
        return proc.returncode

    def _command(self):
        cmd = [sys.executable, "-m", "fastbean"]
        if self.unix_socket:
            cmd += ["-l", "unix:" + self.unix_socket]
        else:
            cmd += ["-l", self.host, "-p", str(self.port)]
        if self.binlog_dir is not None:
            os.makedirs(self.binlog_dir, exist_ok=True)
            cmd += ["-b", self.binlog_dir]
        if self.testing:
            cmd.append("--testing")
        return cmd + self.args

    def _start(self, timeout):
        for attempt in range(BIND_TRIES):
            if not self.unix_socket and not self._port_given:
                self.port = _free_port(self.host)
            cmd = self._command()
            self._log = tempfile.TemporaryFile()
            # stderr to a file: a pipe nobody reads could fill up and stall the server
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=self._log)
            try:
                self._wait_ready(timeout)
                return
            except ServerStartError as e:
                self.stop()
                # another process took the free port between our look and its bind
                taken = os.strerror(errno.EADDRINUSE) in self.log
                if taken and not self._port_given and not self.unix_socket \
                        and attempt + 1 < BIND_TRIES:
                    continue
                raise ServerStartError("%s\ncommand: %s\n--- its stderr ---\n%s" % (
                    e, " ".join(cmd), self.log.rstrip())) from None

    def _wait_ready(self, timeout):
        # Ready when it answers stats with its own pid (not some other
        # server that happens to hold the port).
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise ServerStartError("fastbean exited with status %d before it accepted "
                                       "connections" % self._proc.returncode)
            try:
                if _stats_pid(self._connect(1.0)) == self._proc.pid:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise ServerStartError("fastbean did not answer within %g s" % timeout)
            time.sleep(0.01)

    # -- talking to it ------------------------------------------------------------

    def _connect(self, timeout):
        if self.unix_socket:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout)
            try:
                s.connect(self.unix_socket)
            except OSError:
                s.close()
                raise
            return s
        return socket.create_connection((self.host, self.port), timeout=timeout)

    def _ask(self, line):
        """Send one test-only command; its reply line."""
        if not self.running:
            status = None if self._proc is None else self._proc.returncode
            raise FastbeanError("fastbean is not running (exit status %s)\n--- its stderr ---\n%s"
                                % (status, self.log.rstrip()))
        with self._connect(STOP_TIMEOUT) as s, s.makefile("rb") as stream:
            s.sendall(line + b"\r\n")
            reply = _reply_line(stream)
        if reply == b"UNKNOWN_COMMAND":
            raise FastbeanError("this fastbean was started without testing=True (--testing), "
                                "so it refuses %s" % line.split()[0].decode())
        return reply

    def reset(self):
        """Delete every job, tube, pause and counter, close every connection and
        set the clock back: the server is as new, without a restart."""
        reply = self._ask(b"fastbean-reset")
        if reply != b"RESET":
            raise FastbeanError("fastbean-reset answered %r" % reply)


class Clock:
    """The server's clock, which a server started with testing=True lets tests
    move forward: delays, TTRs, DEADLINE_SOON, pauses, reserve timeouts and
    job ages follow it. reset() sets it back to real time."""

    def __init__(self, server):
        self._server = server

    def advance(self, seconds):
        """Move the clock forward (seconds as a number or a timedelta) and run
        everything now due; returns how far it is ahead of real time, in seconds."""
        ns = _to_ns(seconds)
        reply = self._server._ask(b"fastbean-clock-advance %d.%09d" % divmod(ns, NS))
        if not reply.startswith(b"ADVANCED "):
            raise FastbeanError("fastbean-clock-advance answered %r" % reply)
        return int(reply.split()[1]) / NS

    @property
    def offset(self):
        """Seconds the clock is ahead of real time."""
        return self.advance(0)


def _to_ns(seconds):
    if isinstance(seconds, datetime.timedelta):
        seconds = Fraction(seconds.days * 86400 + seconds.seconds) + Fraction(seconds.microseconds, 10 ** 6)
    ns = round(Fraction(seconds) * NS)
    if ns < 0:
        raise ValueError("the clock only moves forward: %r" % (seconds,))
    return ns


def _free_port(host):
    family, type_, proto, _, addr = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
    with socket.socket(family, type_, proto) as s:
        s.bind(addr)
        return s.getsockname()[1]


def _reply_line(stream):
    line = stream.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("fastbean closed the connection before answering")
    return line[:-2]


def _stats_pid(sock):
    with sock, sock.makefile("rb") as stream:
        sock.sendall(b"stats\r\n")
        head = _reply_line(stream)
        if not head.startswith(b"OK "):
            return None
        doc = stream.read(int(head[3:]) + 2)
    for line in doc.split(b"\n"):
        if line.startswith(b"pid: "):
            return int(line[5:])
    return None
