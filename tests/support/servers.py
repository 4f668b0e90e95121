"""The servers the tests and the benchmarks start, and the clients that talk to them,
on what the package ships.

Server is fastbean.testing.Server (started and stopped by its PID, ready once
it answers stats with its own pid, a free port that another process takes
first replaced by another) plus what only this suite needs: beanstalkd and the
benchmarks' nullserver beside fastbean, FASTBEAN_CMD to wrap fastbean, a
temporary binlog, and its CPU and RSS from /proc. RedisServer is a
redis-server, for the benchmarks against Redis, and redis_call() one command
to it. Client is
fastbean.client.Client; client(port) connects one to a loopback port.
EngineClient drives the compiled engine in-process, on a fake transport, with
no socket at all.
"""
import os
import select
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from fastbean import testing
from fastbean.client import Client, NotFound, parse_dict
from fastbean.testing import free_port

__all__ = ["BEANSTALKD", "FUZZ", "HOST", "KINDS", "REDIS_SERVER", "Client", "EngineClient", "NotFound",
           "RedisServer", "Server", "client", "fastbean_cmd", "free_port", "parse_dict", "put_many", "redis_call",
           "round_trips_until_readable", "wait_listening"]

# `make fuzz` (FASTBEAN_FUZZ=N) multiplies the examples of the randomized tests.
FUZZ = max(1, int(os.environ.get("FASTBEAN_FUZZ", "1")))
KINDS = ("beanstalkd", "fastbean")
HOST = "127.0.0.1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def beanstalkd_path():
    """The C beanstalkd: $BEANSTALKD, else the one on PATH, else Debian's."""
    return os.environ.get("BEANSTALKD") or shutil.which("beanstalkd") or "/usr/bin/beanstalkd"


BEANSTALKD = beanstalkd_path()
# Debian's, for the benchmarks against Redis; $REDIS_SERVER for another
REDIS_SERVER = os.environ.get("REDIS_SERVER") or shutil.which("redis-server") or "/usr/bin/redis-server"


def fastbean_cmd():
    # FASTBEAN_CMD lets a run wrap the server (valgrind, an ASan preload, ...);
    # a wrapper must exec the server, whose pid the readiness check asks for
    return shlex.split(os.environ.get("FASTBEAN_CMD", "")) or [sys.executable, "-m", "fastbean"]


def client(port, timeout=5.0):
    """A Client connected to 127.0.0.1:port."""
    return Client((HOST, port), timeout)


def put_many(c, n, batch=10000):
    """n one-byte jobs into c's used tube, pipelined batch at a time."""
    lines = b"put 0 0 60 1\r\nx\r\n" * batch
    for _ in range(n // batch):
        c.send(lines)
        for _ in range(batch):
            c.line()


def round_trips_until_readable(probe, c):
    """Round trips of probe until c's reply is readable: how many were
    answered while c's command ran (the proof that it stalled nobody)."""
    answered = 0
    while not select.select([c.sock], [], [], 0)[0]:
        probe.stats_tube("default")
        answered += 1
    return answered


def wait_listening(port, proc=None, describe=lambda: "nothing", timeout=10.0):
    """Wait until 127.0.0.1:port accepts (a process that is not a beanstalk server:
    NATS, HAProxy, an HTTP endpoint); raise with describe() if proc dies or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            return
        except OSError:
            if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
                raise RuntimeError("did not start listening on port %d: %s" % (port, describe())) from None
            time.sleep(0.01)


class Server(testing.Server):
    """A server process on 127.0.0.1 (or a UNIX socket), not yet started:
    Server("fastbean", "-b", path).start().

    kind: "fastbean" (FASTBEAN_CMD, if set, is its command), "beanstalkd" or
    "nullserver". binlog: a directory for -b, or True for a temporary one that
    cleanup() (or the end of a with block) removes; None or False for none. ready: how start() knows it
    is up, "stats" (it answers stats with its own pid) or "accept" (it accepts
    a connection: a standby node, the nullserver, a test of what happens before
    the loop runs). name: what messages call it (default: kind). nofile: its
    open-files limit, soft and hard (prlimit wraps the command). The other
    arguments are fastbean.testing.Server's."""

    def __init__(self, kind="fastbean", *args, port=None, unix_socket=None, binlog=None, ready=None,
                 name=None, env=None, log_path=None, nofile=None):
        if kind not in ("fastbean", "beanstalkd", "nullserver"):
            raise ValueError("no server kind %r" % kind)
        self._tmp_binlog = None
        if binlog is True:
            binlog = self._tmp_binlog = tempfile.mkdtemp(prefix="fastbean-test-")
        elif binlog is False:           # binlog=<a condition>: false means none
            binlog = None
        super().__init__(args, HOST, port, unix_socket, binlog, env=env, log_path=log_path)
        self.kind = kind
        self._name = name or kind
        self.ready = ready or ("accept" if kind == "nullserver" else "stats")
        self.nofile = nofile
        self.started = None             # time.monotonic() of the last start

    def _program(self):
        cmd = fastbean_cmd() if self.kind == "fastbean" else [BEANSTALKD]
        if self.nofile is not None:     # prlimit execs it: the pid stays the server's
            cmd = ["prlimit", "--nofile=%d:%d" % (self.nofile, self.nofile), "--"] + cmd
        return cmd

    def _command(self):
        if self.kind != "nullserver":
            return super()._command()
        from benchmarks.harness import build_tool  # C, compiled on first use
        cmd = [build_tool("nullserver"), str(self.port)]
        if self.binlog_dir is not None:
            cmd += ["-b", self.binlog_dir]
        return cmd + self.args

    def _spawn(self):
        self.started = time.monotonic()
        return super()._spawn()

    def _answers(self, timeout):
        if self.ready == "stats":
            return super()._answers(timeout)
        try:
            if self.unix_socket is not None:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(self.unix_socket)
            else:
                socket.create_connection(self.address, timeout=min(timeout, 1.0)).close()
            return True
        except OSError:
            return False

    def spawn(self):
        """Start it and return at once (wait_ready() waits for it); returns it."""
        self._before_start()
        self._spawn()
        return self

    def wait_ready(self, timeout=10.0):
        """Wait until it is up (see ready); the seconds since it was started."""
        try:
            self._wait_ready(timeout)
        except testing.ServerStartError as e:
            self.stop()
            raise testing.ServerStartError("%s\n--- its stderr ---\n%s" % (e, self.log.rstrip())) from None
        return time.monotonic() - self.started

    @property
    def proc(self):
        """The subprocess.Popen of the last start."""
        return self._started()

    @property
    def logfile(self):
        return self.log_path

    def wait(self, timeout=10.0):
        return super().wait(timeout)

    def cleanup(self):
        """Stop it and remove its temporary binlog directory, if it has one."""
        self.stop(timeout=30.0)
        if self._tmp_binlog:
            shutil.rmtree(self._tmp_binlog, ignore_errors=True)

    def __exit__(self, *exc_info):
        self.cleanup()

    def cpu(self):
        """User + system CPU seconds used so far."""
        return process_cpu(self.pid)

    def rss(self):
        """Resident set size in bytes."""
        return process_rss(self.pid)


def job_exists(c, jid):
    """Whether the server c talks to has job jid (stats-job finds it)."""
    try:
        c.stats_job(jid)
        return True
    except NotFound:
        return False


def fastbean_with_binlog(tmp_path, *args, binlog=None):
    """A started fastbean with -b tmp_path/binlog (or binlog), made if need be."""
    d = binlog or (tmp_path / "binlog")
    d.mkdir(exist_ok=True)
    return Server("fastbean", "-b", str(d), *args).start()


def process_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def process_rss(pid):
    with open("/proc/%d/statm" % pid) as f:
        return int(f.read().split()[1]) * PAGE


class RedisServer:
    """redis-server on 127.0.0.1 and a free port, not yet started: RedisServer(*args).start().
    No RDB snapshots; its working directory (an AOF, if args ask for one) and its log are
    a temporary directory that stop() (or the end of a with block) removes."""

    def __init__(self, *args):
        self.args = list(args)
        self.port = self.proc = self.dir = None

    def start(self, timeout=10.0):
        self.dir = tempfile.mkdtemp(prefix="fastbean-redis-")
        log = os.path.join(self.dir, "redis.log")
        for _ in range(3):                  # the free port may be taken before redis binds it
            self.port = free_port()
            self.proc = subprocess.Popen(
                [REDIS_SERVER, "--port", str(self.port), "--bind", HOST, "--save", "", "--dir", self.dir,
                 "--logfile", log, "--daemonize", "no", *self.args],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            try:
                wait_listening(self.port, self.proc, lambda: self._log(log), timeout)
            except RuntimeError:
                if self.proc.poll() is None:
                    self.stop()
                    raise
                continue
            # the one listening is this process, not one that took the port first
            if ("process_id:%d" % self.proc.pid) in redis_call(self.port, "INFO", "server").decode():
                return self
            self.proc.kill()
            self.proc.wait()
        self.stop()
        raise RuntimeError("redis-server did not start: %s" % self._log(log))

    @staticmethod
    def _log(path):
        try:
            with open(path) as f:
                return f.read()[-2000:]
        except OSError:
            return "no log"

    @property
    def pid(self):
        return self.proc.pid

    def cpu(self):
        """User + system CPU seconds used so far."""
        return process_cpu(self.pid)

    def rss(self):
        """Resident set size in bytes."""
        return process_rss(self.pid)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.stop()


def redis_call(port, *args, timeout=10.0):
    """One command to the Redis server on 127.0.0.1:port; its reply (bytes, int, None, a list;
    an error reply raises RuntimeError)."""
    out = b"*%d\r\n" % len(args) + b"".join(
        b"$%d\r\n%s\r\n" % (len(a), a) for a in (x if isinstance(x, bytes) else str(x).encode() for x in args))
    with socket.create_connection((HOST, port), timeout) as s:
        s.sendall(out)
        reader = s.makefile("rb")
        return _resp_reply(reader)


def _resp_reply(reader):
    line = reader.readline()
    if not line.endswith(b"\r\n"):
        raise RuntimeError("connection closed mid-reply")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    n = int(rest)
    if n < 0:
        return None
    if kind == b"$":
        return reader.read(n + 2)[:-2]
    if kind == b"*":
        return [_resp_reply(reader) for _ in range(n)]
    raise RuntimeError("not RESP: %r" % line)


class EngineClient:
    """One connection of an in-process engine (fastbean.engine.core.Core) on a fake
    transport: replies are kept by reference, the engine's "again next turn"
    requests are honoured by send(), and nothing holds a reference
    cycle, so a dropped engine with a million jobs is freed at once."""

    def __init__(self, core):
        self.chunks = []
        self.flags = flags = {"again": False, "closed": False}
        self.conn = core.connect(lambda on: None, lambda: flags.__setitem__("again", True))
        self.conn.attach(self.chunks.append, self.chunks.extend,
                         lambda: flags.__setitem__("closed", True))

    def send(self, data):
        """Feed one read, then run the loop turns the engine asks for."""
        self.conn.feed(data)
        while self.flags["again"]:
            self.flags["again"] = False
            self.conn.again()

    def take(self):
        """The bytes written since the last take()."""
        out = b"".join(self.chunks)
        self.chunks.clear()
        return out

    def call(self, data):
        self.send(data)
        return self.take()

    @property
    def closed(self):
        return self.flags["closed"]
