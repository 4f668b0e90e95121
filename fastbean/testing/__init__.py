"""Start a fastbean server process from Python (scripts, notebooks, tests) and stop it by its PID."""
from __future__ import annotations

import datetime
import errno
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import IO, Union

from fastbean.client import TIMEOUT, Address, Client, ClientError, tls_context
from fastbean.errors import FastbeanError, ServerStartError

__all__ = ["server", "Server", "Clock", "ServerStartError", "free_port"]

HOST = "127.0.0.1"
START_TIMEOUT = 10.0            # seconds for a new server to answer
STOP_TIMEOUT = 10.0             # seconds between SIGTERM and SIGKILL
BIND_TRIES = 5                  # free ports tried when another process takes one first
NS = 10 ** 9

# A server flag: server("-z", 1048576) and server("-b", tmp_path) work as they read.
Arg = Union[str, int, float, "os.PathLike[str]"]
StrPath = Union[str, "os.PathLike[str]"]
# How far to move the clock: seconds (an int, a float or a Fraction) or a timedelta.
Seconds = Union[float, Fraction, datetime.timedelta]


def server(*args: Arg, host: str = HOST, port: int | None = None,
           unix_socket: bool | StrPath | None = None, binlog_dir: StrPath | None = None,
           testing: bool = False, timeout: float = START_TIMEOUT,
           env: Mapping[str, str] | None = None, log_path: StrPath | None = None,
           tls_cert: StrPath | None = None, tls_key: StrPath | None = None,
           tls_ca: StrPath | None = None, tls_client: ssl.SSLContext | None = None,
           auth_token: str | None = None) -> Server:
    """Start `python -m fastbean` and return it running, as a Server.

    Use it in a with block, which stops it, or call stop() yourself.

    args: extra server flags, e.g. "-z", "1048576". host and port: where it
    listens (port None: a free one). unix_socket: True for a UNIX socket in
    a temporary directory, or the socket's path; host and port are then
    unused. binlog_dir: keep a binlog there (created if missing).
    testing: start with --testing, so reset() and clock.advance() work.
    timeout: seconds to wait for it to answer. env: the server's environment
    (default: this process's). log_path: append its stderr to this file
    (default: a temporary file; log reads either).
    tls_cert (and tls_key, tls_ca): serve over TLS only, with these files
    (--tls-listen, --tls-cert, --tls-key, --tls-ca). tls_client: the
    ssl.SSLContext that client() and the start-up check connect with (default:
    one that trusts exactly tls_cert; with tls_ca, give one that holds a
    client certificate: fastbean.client.tls_context(ca, cert, key)).
    auth_token: the token client() and the start-up check authenticate with,
    for a server started with "--auth-tokens", FILE among args.
    Raises ServerStartError, with the server's stderr, if it cannot start.
    """
    return Server(args, host, port, unix_socket, binlog_dir, testing, env=env, log_path=log_path,
                  tls_cert=tls_cert, tls_key=tls_key, tls_ca=tls_ca,
                  tls_client=tls_client, auth_token=auth_token).start(timeout)


class Server:
    """A fastbean process and its address.

    For TCP, host, port and url ("beanstalk://host:port"); for a UNIX socket,
    unix_socket (its path), and host, port and url are None. address is what
    greenstalk.Client (and client()) takes either way: (host, port), or the path.

    start() starts it and waits until it answers (server() does both); stop()
    or kill() ends it, and start() starts it again on the same address and
    binlog. The process is only ever signalled by its PID.

    With tls_cert it listens over TLS only, and tls_client is how client()
    connects (see server()); other clients need the same.
    """

    _name = "fastbean"              # what messages call it

    def __init__(self, args: Iterable[Arg] = (), host: str = HOST, port: int | None = None,
                 unix_socket: bool | StrPath | None = None, binlog_dir: StrPath | None = None,
                 testing: bool = False, *, env: Mapping[str, str] | None = None,
                 log_path: StrPath | None = None, tls_cert: StrPath | None = None,
                 tls_key: StrPath | None = None, tls_ca: StrPath | None = None,
                 tls_client: ssl.SSLContext | None = None, auth_token: str | None = None) -> None:
        self.args = [str(a) for a in args]
        self.auth_token = auth_token
        self.tls_files = [os.path.abspath(f) if f is not None else None for f in (tls_cert, tls_key, tls_ca)]
        if tls_cert is None and (tls_key, tls_ca, tls_client) != (None, None, None):
            raise ValueError("tls_key, tls_ca and tls_client need tls_cert")
        if tls_ca is not None and tls_client is None:
            raise ValueError("with tls_ca the server wants a client certificate: give tls_client, "
                             "e.g. fastbean.client.tls_context(ca, cert, key)")
        if tls_cert is not None and tls_client is None:
            tls_client = _pinned(os.fspath(tls_cert))
        self.tls_client = tls_client
        self.testing = testing
        self.binlog_dir = None if binlog_dir is None else os.path.abspath(binlog_dir)
        self.env = None if env is None else dict(env)
        self.log_path = None if log_path is None else os.path.abspath(log_path)
        self._tmpdir: str | None = None
        self.unix_socket: str | None = None
        self.host: str | None = None
        self.port: int | None = None
        if unix_socket:
            if unix_socket is True:
                self._tmpdir = tempfile.mkdtemp(prefix="fastbean-")
                unix_socket = os.path.join(self._tmpdir, "fastbean.sock")
            self.unix_socket = os.path.abspath(unix_socket)
        else:
            self.host = host
            self.port = port
        self._port_fixed = port is not None     # else a free one, kept once it served
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None      # this run's stderr (no log_path)
        self._log_offset = 0                    # where this run's stderr starts in log_path
        self._exit_log = ""                     # the stderr of the runs that ended
        self.clock = Clock(self)

    # -- address ----------------------------------------------------------------

    @property
    def address(self) -> Address:
        if self.unix_socket is not None:
            return self.unix_socket
        if self.host is None or self.port is None:
            raise FastbeanError("%s has no port yet: start() it first" % self._name)
        return self.host, self.port

    @property
    def url(self) -> str | None:
        if self.host is None or self.port is None:
            return None
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "beanstalk://%s:%d" % (host, self.port)

    @property
    def pid(self) -> int:
        return self._started().pid

    def __repr__(self) -> str:
        where = self.unix_socket or self.url
        return "<%s.%s pid %s on %s>" % (type(self).__module__, type(self).__qualname__,
                                         self._proc and self._proc.pid, where)

    def client(self, timeout: float | None = TIMEOUT) -> Client:
        """A new blocking protocol client (fastbean.client.Client) connected to it
        (over TLS with tls_cert); close it, or use it in a with block."""
        return Client(self.address, timeout, tls=self.tls_client, token=self.auth_token)

    # -- process ----------------------------------------------------------------

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log(self) -> str:
        """Everything the server wrote to stderr so far, over all its starts (with
        log_path: that file's contents)."""
        if self.log_path is not None:
            return _read(self.log_path, 0)
        return self._exit_log + self._run_log()

    def start(self, timeout: float = START_TIMEOUT) -> Server:
        """Start it and wait until it answers with its own pid; returns it.

        Again after stop() or kill(), it starts on the same port (or socket) and
        binlog. A free port that another process takes first is replaced by another.
        Raises ServerStartError, with its stderr, if it cannot start."""
        self._before_start()
        logged = self._exit_log
        for attempt in range(BIND_TRIES):
            cmd = self._spawn()
            try:
                self._wait_ready(timeout)
                self._port_fixed = True
                return self
            except ServerStartError as e:
                failure = e
            run_log = self._run_log()
            self.stop()
            # another process took the free port between our look and its bind
            taken = os.strerror(errno.EADDRINUSE) in run_log
            if taken and not self._port_fixed and attempt + 1 < BIND_TRIES:
                self._exit_log = logged
                continue
            raise ServerStartError("%s\ncommand: %s\n--- its stderr ---\n%s" % (
                failure, " ".join(cmd), run_log.rstrip())) from None
        raise AssertionError("not reached")

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM to its PID (SIGKILL after timeout seconds); returns its exit
        status (None if it never started). Stopping it again is harmless."""
        return self._end(signal.SIGTERM, timeout)

    def kill(self) -> int | None:
        """SIGKILL to its PID, as a crash would end it; returns its exit status."""
        return self._end(signal.SIGKILL, STOP_TIMEOUT)

    def signal(self, sig: int) -> None:
        """Send a signal to its PID (SIGUSR1: drain mode)."""
        proc = self._started()
        if proc.poll() is not None:
            raise FastbeanError("%s is not running (exit status %s)" % (self._name, proc.returncode))
        os.kill(proc.pid, sig)

    def wait(self, timeout: float | None = None) -> int:
        """Wait until it exits by itself (subprocess.TimeoutExpired after timeout
        seconds); returns its exit status."""
        status = self._started().wait(timeout)
        self._release()
        return status

    def _end(self, sig: int, timeout: float) -> int | None:
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            os.kill(proc.pid, sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        self._release()
        return proc.returncode

    def _release(self) -> None:
        """What a run held: its stderr file, the UNIX socket's temporary directory."""
        if self._log is not None:
            self._exit_log += self._run_log()
            self._log.close()
            self._log = None
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)

    def _before_start(self) -> None:
        if self.running:
            raise FastbeanError("%r is running already" % self)
        if self._proc is not None:
            self._release()             # it may have exited by itself

    def _started(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise FastbeanError("%s has not been started" % self._name)
        return self._proc

    def _program(self) -> list[str]:
        """The program and its first arguments."""
        return [sys.executable, "-m", "fastbean"]

    def _command(self) -> list[str]:
        cmd = self._program()
        cert, key, ca = self.tls_files
        if cert is not None:
            where = "unix:" + self.unix_socket if self.unix_socket is not None else \
                "[%s]:%s" % (self.host, self.port) if ":" in str(self.host) else "%s:%s" % (self.host, self.port)
            cmd += ["--tls-listen", where, "--tls-cert", cert]
            cmd += ["--tls-key", key] if key is not None else []
            cmd += ["--tls-ca", ca] if ca is not None else []
        elif self.unix_socket is not None:
            cmd += ["-l", "unix:" + self.unix_socket]
        else:
            cmd += ["-l", str(self.host), "-p", str(self.port)]
        if self.binlog_dir is not None:
            os.makedirs(self.binlog_dir, exist_ok=True)
            cmd += ["-b", self.binlog_dir]
        if self.testing:
            cmd.append("--testing")
        return cmd + self.args

    def _spawn(self) -> list[str]:
        """Start the process and return at once; its command line."""
        if self.host is not None and not self._port_fixed:
            self.port = free_port(self.host)
        if self._tmpdir is not None and not os.path.isdir(self._tmpdir):
            os.mkdir(self._tmpdir, 0o700)           # removed when the last run ended
        cmd = self._command()
        stderr: IO[bytes]
        if self.log_path is not None:
            os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
            stderr = open(self.log_path, "ab")
            self._log_offset = stderr.tell()
        else:
            # stderr to a file: a pipe nobody reads could fill up and stall the server
            stderr = self._log = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=stderr, env=self.env)
        finally:
            if self.log_path is not None:
                stderr.close()
        return cmd

    def _run_log(self) -> str:
        """What the current (or last) run wrote to stderr."""
        if self.log_path is not None:
            return _read(self.log_path, self._log_offset)
        if self._log is None:
            return ""
        # pread: the server writes through the same file offset, which must not move
        fd = self._log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        proc = self._started()
        while True:
            if proc.poll() is not None:
                raise ServerStartError("%s exited with status %d before it accepted "
                                       "connections" % (self._name, proc.returncode))
            if self._answers(max(0.1, deadline - time.monotonic())):
                return
            if time.monotonic() > deadline:
                raise ServerStartError("%s did not answer within %g s" % (self._name, timeout))
            time.sleep(0.01)

    def _answers(self, timeout: float) -> bool:
        """Whether it answers stats with its own pid (not some other server that
        happens to hold the port). One connection, one stats, once it connects."""
        try:
            with Client(self.address, timeout, tls=self.tls_client, token=self.auth_token) as c:
                return bool(c.stats().get("pid") == self.pid)
        except ClientError:
            return False

    # -- talking to it ------------------------------------------------------------

    def _ask(self, line: bytes) -> bytes:
        """Send one test-only command; its reply line."""
        if not self.running:
            status = None if self._proc is None else self._proc.returncode
            raise FastbeanError("%s is not running (exit status %s)\n--- its stderr ---\n%s"
                                % (self._name, status, self.log.rstrip()))
        with self.client(STOP_TIMEOUT) as c:
            reply = c.cmd(line)
        if reply == b"UNKNOWN_COMMAND":
            raise FastbeanError("this fastbean was started without testing=True (--testing), "
                                "so it refuses %s" % line.split()[0].decode())
        return reply

    def reset(self) -> None:
        """Delete every job, tube, pause and counter, close every connection and
        set the clock back: the server is as new, without a restart."""
        reply = self._ask(b"fastbean-reset")
        if reply != b"RESET":
            raise FastbeanError("fastbean-reset answered %r" % reply)


class Clock:
    """The server's clock, which a server started with testing=True lets tests
    move forward: delays, TTRs, DEADLINE_SOON, pauses, reserve timeouts,
    job ages and schedules (each occurrence passed fires, in order) follow
    it. reset() sets it back to real time."""

    def __init__(self, server: Server) -> None:
        self._server = server

    def advance(self, seconds: Seconds) -> float:
        """Move the clock forward (seconds as a number or a timedelta) and run
        everything now due; returns how far it is ahead of real time, in seconds."""
        ns = _to_ns(seconds)
        reply = self._server._ask(b"fastbean-clock-advance %d.%09d" % divmod(ns, NS))
        if not reply.startswith(b"ADVANCED "):
            raise FastbeanError("fastbean-clock-advance answered %r" % reply)
        return int(reply.split()[1]) / NS

    @property
    def offset(self) -> float:
        """Seconds the clock is ahead of real time."""
        return self.advance(0)


def _pinned(cert: str) -> ssl.SSLContext:
    """A client context that trusts exactly the server certificate in cert
    (self-signed or not): what a test server's clients need by default."""
    context = tls_context(cert)
    context.check_hostname = False          # the certificate itself is pinned, whatever it names
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    return context


def free_port(host: str = HOST) -> int:
    """A TCP port nothing listens on now, on host (another process may take it
    before you bind it: Server tries again when that happens)."""
    family, type_, proto, _, addr = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
    with socket.socket(family, type_, proto) as s:
        s.bind(addr)
        port: int = s.getsockname()[1]
        return port


def _to_ns(seconds: Seconds) -> int:
    if isinstance(seconds, datetime.timedelta):
        seconds = Fraction(seconds.days * 86400 + seconds.seconds) + Fraction(seconds.microseconds, 10 ** 6)
    ns = round(Fraction(seconds) * NS)
    if ns < 0:
        raise ValueError("the clock only moves forward: %r" % (seconds,))
    return ns


def _read(path: str, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""
