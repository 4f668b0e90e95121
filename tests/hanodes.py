"""fastbean nodes replicating through a NATS cluster, for the high-availability
tests and benchmarks: start, kill, pause by PID; find the primary."""
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request

from tests.servers import Client, fastbean_cmd, free_port, wait_listening


class Node:
    """One fastbean process started with --replicate, on its own loopback port."""

    def __init__(self, name, urls, logdir, *args, stream="fastbean"):
        self.name, self.urls, self.args, self.stream = name, urls, args, stream
        self.port = free_port()
        self.metrics_port = free_port()     # /readyz: 200 on the primary only
        self.logfile = os.path.join(str(logdir), "%s.log" % name)
        self.proc = None
        self.start()

    def start(self):
        with open(self.logfile, "ab") as log:
            self.proc = subprocess.Popen(
                fastbean_cmd() + ["-l", "127.0.0.1", "-p", str(self.port), "--replicate", self.urls,
                                  "--replicate-stream", self.stream, "--node-name", self.name,
                                  "--metrics", "127.0.0.1:%d" % self.metrics_port,
                                  *map(str, self.args)],
                stdout=subprocess.DEVNULL, stderr=log)
        # the port takes connections even on a standby
        wait_listening(self.port, self.proc, lambda: "node %s: %s" % (self.name, self.log()))

    @property
    def pid(self):
        return self.proc.pid

    def signal(self, sig):
        os.kill(self.proc.pid, sig)

    def kill(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def is_primary(self):
        """A primary answers stats; a standby closes the connection at once."""
        try:
            with Client(self.port, timeout=2) as c:
                return c.cmd(b"stats").startswith(b"OK ")
        except (OSError, ConnectionError):
            return False

    def readyz(self):
        """The HTTP status of /readyz (None when nothing answers)."""
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % self.metrics_port,
                                        timeout=2) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return None

    def log(self):
        with open(self.logfile, "rb") as f:
            return f.read().decode(errors="replace")[-4000:]

    def ext_stats(self):
        with Client(self.port) as c:
            return c.yaml(b"fastbean-stats")


def find_primary(nodes, timeout=60.0, exclude=()):
    """The node that answers as the primary (waiting for one), or raise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for node in nodes:
            if node not in exclude and node.proc.poll() is None and node.is_primary():
                return node
        time.sleep(0.05)
    raise AssertionError("no primary after %.0f s:\n%s" % (
        timeout, "\n".join("%s: %s" % (n.name, n.log()) for n in nodes)))


HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "contrib", "haproxy", "haproxy.cfg")


class Haproxy:
    """HAProxy with contrib/haproxy/haproxy.cfg, on loopback, in front of `nodes`."""

    def __init__(self, nodes, workdir):
        self.port = free_port()
        with open(EXAMPLE) as f:
            lines = [line for line in f if not line.lstrip().startswith("server ")]
        conf = "".join(lines).replace("bind :11300", "bind 127.0.0.1:%d" % self.port)
        conf = conf.replace("maxconn 20000", "maxconn 2000")
        conf += "".join("    server %s 127.0.0.1:%d check port %d\n"
                        % (n.name, n.port, n.metrics_port) for n in nodes)
        self.conf = os.path.join(str(workdir), "haproxy.cfg")
        with open(self.conf, "w") as f:
            f.write(conf)
        self.proc = subprocess.Popen([HAPROXY, "-f", self.conf, "-db", "-q"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_listening(self.port, self.proc, lambda: "haproxy with %s" % self.conf)

    def settle(self, timeout=30.0):
        """Wait until the checks have marked the standbys down (servers start up)."""
        deadline = time.monotonic() + timeout
        good = 0
        while good < 10:
            assert time.monotonic() < deadline, "HAProxy still sends clients to standbys"
            try:
                with Client(self.port, timeout=5) as c:
                    good = good + 1 if c.cmd(b"stats").startswith(b"OK ") else 0
            except (OSError, ConnectionError):
                good = 0
                time.sleep(0.05)

    def put_until_accepted(self, body, timeout=60.0):
        """Connect through HAProxy and put until a put is accepted; its id."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with Client(self.port, timeout=5) as c:
                    reply = c.cmd(b"put 0 0 60 %d\r\n%s" % (len(body), body))
                    if reply.startswith(b"INSERTED "):
                        return int(reply.split()[1])
            except (OSError, ConnectionError):
                pass
            time.sleep(0.01)
        raise AssertionError("no put accepted through HAProxy in %.0f s" % timeout)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
