"""Server processes for the tests and the benchmarks, and clients that talk to them.

A Server starts on a free loopback port (beanstalkd, fastbean, or the
benchmarks' nullserver), is ready once it accepts a connection, and is
stopped by its PID; it reads its own CPU and RSS from /proc. Client is a
small blocking protocol client; EngineClient drives the compiled engine
in-process, on a fake transport, with no socket at all.
"""
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

# `make fuzz` (FASTBEAN_FUZZ=N) multiplies the examples of the randomized tests.
FUZZ = max(1, int(os.environ.get("FASTBEAN_FUZZ", "1")))
KINDS = ("beanstalkd", "fastbean")
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def beanstalkd_path():
    """The C beanstalkd: $BEANSTALKD, else the one on PATH, else Debian's."""
    return os.environ.get("BEANSTALKD") or shutil.which("beanstalkd") or "/usr/bin/beanstalkd"


BEANSTALKD = beanstalkd_path()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc=None, describe=lambda: "nothing", timeout=10.0):
    """Wait until 127.0.0.1:port accepts; raise with describe() if proc dies or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
                raise RuntimeError("did not start listening on port %d: %s" % (port, describe())) from None
            time.sleep(0.01)


def fastbean_cmd():
    # FASTBEAN_CMD lets a run wrap the server (valgrind, an ASan preload, ...)
    return shlex.split(os.environ.get("FASTBEAN_CMD", "")) or [sys.executable, "-m", "fastbean"]


def server_cmd(kind, port):
    """The command line that starts a server of this kind on 127.0.0.1:port."""
    if kind == "beanstalkd":
        return [BEANSTALKD, "-l", "127.0.0.1", "-p", str(port)]
    if kind == "fastbean":
        return fastbean_cmd() + ["-l", "127.0.0.1", "-p", str(port)]
    if kind == "nullserver":
        from benchmarks.harness import build_tool  # C, compiled on first use
        return [build_tool("nullserver"), str(port)]
    raise ValueError("no server kind %r" % kind)


class Server:
    """One server process on 127.0.0.1:port, stopped by its PID."""

    def __init__(self, kind, proc, port, log, cmd=None, tmpdir=None):
        self.kind, self.proc, self.port, self._log, self.cmd = kind, proc, port, log, cmd
        self.started = time.monotonic()
        self._tmpdir = tmpdir

    @classmethod
    def start(cls, kind, *args, port=None, binlog=None, timeout=10.0, wait=True):
        """Start a server with these extra arguments. binlog: a directory for
        -b, or True for a temporary one that cleanup() removes. wait=False
        returns at once (wait_ready() then times the start-up)."""
        port = port or free_port()
        cmd = server_cmd(kind, port)
        tmpdir = None
        if binlog is True:
            binlog = tmpdir = tempfile.mkdtemp(prefix="fastbean-test-")
        if binlog:
            cmd += ["-b", str(binlog)]
        cmd += [str(a) for a in args]
        # stderr goes to a file: a pipe nobody reads could fill up and stall the server
        log = tempfile.TemporaryFile()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        server = cls(kind, proc, port, log, cmd, tmpdir)
        if wait:
            server.wait_ready(timeout)
        return server

    def wait_ready(self, timeout=10.0):
        """Wait until the server accepts a connection; return the seconds since it started."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return time.monotonic() - self.started
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("%s exited with %s: %s" % (
                        self.kind, self.proc.returncode, self.log.decode(errors="replace"))) from None
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError("%s did not accept connections on port %d" % (
                        self.kind, self.port)) from None
                time.sleep(0.005)

    @property
    def pid(self):
        return self.proc.pid

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        """Signal the process (by PID) and wait for it; returns its exit status."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode

    def kill(self):
        return self.stop(signal.SIGKILL)

    def wait(self, timeout=10.0):
        return self.proc.wait(timeout)

    def cleanup(self):
        """Stop it and remove its temporary binlog directory, if it has one."""
        self.stop(timeout=30.0)
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.cleanup()

    @property
    def log(self):
        """Everything the server wrote to stderr so far. pread: the server
        writes at the offset it shares with this file object, and a seek
        here would make its next line overwrite the first ones."""
        fd = self._log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0)

    def cpu(self):
        """User + system CPU seconds used so far."""
        with open("/proc/%d/stat" % self.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def rss(self):
        """Resident set size in bytes."""
        with open("/proc/%d/statm" % self.pid) as f:
            return int(f.read().split()[1]) * PAGE


class Client:
    """Blocking protocol client over one socket."""

    def __init__(self, port, timeout=5.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("server closed the connection")
        self.buf += data

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def body(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        body, self.buf = self.buf[:n], self.buf[n + 2:]
        return body

    def cmd(self, line, expect=None):
        """Send one command line (and body, if included); return the reply line."""
        self.send(line + b"\r\n")
        reply = self.line()
        if expect is not None:
            assert reply == expect, (line, reply, expect)
        return reply

    def put(self, body, pri=0, delay=0, ttr=60):
        reply = self.cmd(b"put %d %d %d %d\r\n%s" % (pri, delay, ttr, len(body), body))
        assert reply.startswith(b"INSERTED "), reply
        return int(reply.split()[1])

    def use(self, tube):
        self.cmd(b"use " + tube.encode(), b"USING " + tube.encode())

    def watch(self, tube):
        assert self.cmd(b"watch " + tube.encode()).startswith(b"WATCHING ")

    def job(self, line):
        """A command answered with RESERVED/FOUND + body: (id, body) or None."""
        reply = self.cmd(line)
        if not reply.startswith((b"RESERVED ", b"FOUND ")):
            return None
        _, jid, n = reply.split()
        return int(jid), self.body(int(n))

    def reserve_job(self, jid):
        return self.job(b"reserve-job %d" % jid)

    def peek(self, jid):
        r = self.job(b"peek %d" % jid)
        return None if r is None else r[1]

    def yaml(self, line):
        reply = self.cmd(line)
        if not reply.startswith(b"OK "):
            return None
        return parse_yaml(self.body(int(reply.split()[1])))

    def stats(self):
        return self.yaml(b"stats")

    def stats_job(self, jid):
        return self.yaml(b"stats-job %d" % jid)


def parse_yaml(doc):
    """A stats document as a dict; integers as int, the rest as str."""
    out = {}
    for entry in doc.decode().split("\n")[1:]:
        if ": " in entry:
            k, v = entry.split(": ", 1)
            out[k] = int(v) if v.lstrip("-").isdigit() else v
    return out


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
