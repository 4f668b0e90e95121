"""What every benchmark needs: the compiled load generator, server processes on
free loopback ports (C beanstalkd from PATH, fastbean, and nullserver.c as the
machine's ceiling), and their CPU and RSS read from /proc."""
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(HERE, "build")
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
KINDS = ("beanstalkd", "fastbean")


def build_tool(name):
    """Compile benchmarks/NAME.c into build/ (once, or again when the source is newer);
    return the program's path."""
    src, exe = os.path.join(HERE, name + ".c"), os.path.join(BUILD, name)
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        os.makedirs(BUILD, exist_ok=True)
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            sys.exit("benchmarks need a C compiler for %s (apt-get install gcc)" % name)
        subprocess.run([cc, "-O2", "-Wall", "-o", exe, src], check=True)
    return exe


def build_loadgen():
    return build_tool("loadgen")


def beanstalkd_path():
    path = os.environ.get("BEANSTALKD") or shutil.which("beanstalkd") or "/usr/bin/beanstalkd"
    if not os.path.exists(path):
        sys.exit("C beanstalkd is not on PATH (apt-get install beanstalkd, or set BEANSTALKD)")
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One server process on 127.0.0.1 (beanstalkd, fastbean or nullserver), stopped by its PID."""

    def __init__(self, kind, *args, binlog=False):
        self.kind = kind
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="fastbean-bench-") if binlog else None
        if kind == "beanstalkd":
            cmd = [beanstalkd_path(), "-l", "127.0.0.1", "-p", str(self.port)]
        elif kind == "fastbean":
            cmd = [sys.executable, "-m", "fastbean", "-l", "127.0.0.1", "-p", str(self.port)]
        elif kind == "nullserver" and not binlog and not args:
            cmd = [build_tool("nullserver"), str(self.port)]
        else:
            raise ValueError("no server %r with %r" % (kind, args))
        if binlog:
            cmd += ["-b", self.dir]
        cmd += [str(a) for a in args]
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.wait_ready()

    @property
    def pid(self):
        return self.proc.pid

    def wait_ready(self, timeout=600.0):
        """Wait until the server accepts (a replay can take a while); return seconds waited."""
        t0 = time.monotonic()
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return time.monotonic() - t0
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("%s exited with %s" % (self.cmd, self.proc.returncode))
                if time.monotonic() - t0 > timeout:
                    self.stop()
                    raise RuntimeError("%s did not start" % (self.cmd,))
                time.sleep(0.005)

    def cpu(self):
        """User + system CPU seconds used so far."""
        with open("/proc/%d/stat" % self.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def rss(self):
        """Resident set size in bytes."""
        with open("/proc/%d/statm" % self.pid) as f:
            return int(f.read().split()[1]) * PAGE

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            os.kill(self.pid, sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait()

    def cleanup(self):
        self.stop()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()


def loadgen(port, workload, conns=10, depth=1, body=100, seconds=2.0, total=None, tube=None,
            delay=None, ttr=None, pri=None, interval_us=None, warmup=None, background=False):
    """Run the load generator against 127.0.0.1:port; return its JSON result as a dict
    (or, with background=True, the Popen whose stdout will hold it)."""
    cmd = [build_loadgen(), "-p", str(port), "-w", workload, "-c", str(conns), "-d", str(depth),
           "-b", str(body), "-t", str(seconds)]
    for flag, value in (("-n", total), ("-T", tube), ("-D", delay), ("-R", ttr), ("-P", pri),
                        ("-i", interval_us), ("-W", warmup)):
        if value is not None:
            cmd += [flag, str(value)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    if background:
        return proc
    return finish(proc)


def finish(proc):
    """The result of a loadgen started with background=True."""
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError("loadgen failed (%d)" % proc.returncode)
    return json.loads(out)


def command(port, line, timeout=60.0):
    """Send one command line; return the reply line and, for OK/FOUND/RESERVED, its body."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(line + b"\r\n")
        buf = b""
        while b"\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        head, rest = buf.split(b"\r\n", 1)
        word = head.split(b" ", 1)[0]
        if word in (b"OK", b"FOUND", b"RESERVED"):
            n = int(head.rsplit(b" ", 1)[1])
            while len(rest) < n + 2:
                rest += s.recv(65536)
            return head, rest[:n]
        return head, None


def stats(port, line=b"stats"):
    """stats (or stats-tube NAME) as a dict of strings."""
    _, doc = command(port, line)
    out = {}
    for entry in doc.decode().splitlines()[1:]:
        if ": " in entry:
            k, v = entry.split(": ", 1)
            out[k] = v
    return out


def machine():
    """A few facts about where the numbers came from."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": model, "python": sys.version.split()[0],
            "beanstalkd": subprocess.run([beanstalkd_path(), "-v"], capture_output=True,
                                         text=True).stdout.strip()}


def write_results(path, started, **fields):
    """Save a run's results as JSON: when it started (a time.time()), how long it took,
    the machine, then `fields`; say where."""
    doc = {"started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
           "wall_s": round(time.time() - started, 1), "machine": machine(), **fields}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print("\nwrote %s" % path)
