"""fastbean nodes replicating through a NATS cluster, for the high-availability
tests and benchmarks: start, kill, pause by PID; find the primary."""
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request

from tests.support import ROOT
from tests.support.servers import Server, client, free_port, wait_listening


class Node(Server):
    """One fastbean process started with --replicate, on its own loopback port,
    its stderr appended to LOGDIR/NAME.log; started at once."""

    def __init__(self, name, urls, logdir, *args, stream="fastbean"):
        self.metrics_port = free_port()     # /readyz: 200 on the primary only
        # ready once the port accepts: it does even on a standby, which closes
        # every connection at once rather than answer stats
        super().__init__("fastbean", "--replicate", urls, "--replicate-stream", stream,
                         "--node-name", name, "--metrics", "127.0.0.1:%d" % self.metrics_port, *args,
                         ready="accept", name="node " + name,
                         log_path=os.path.join(str(logdir), "%s.log" % name))
        self.name, self.urls, self.stream = name, urls, stream
        self.start()

    def stop(self, timeout=15.0):
        """SIGCONT (it may be paused), then SIGTERM (SIGKILL after timeout s)."""
        if self.running:
            os.kill(self.pid, signal.SIGCONT)
        return super().stop(timeout)

    def is_primary(self):
        """A primary answers stats; a standby closes the connection at once."""
        try:
            with self.client(2) as c:
                return c.cmd(b"stats").startswith(b"OK ")
        except OSError:
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

    def metrics(self):
        """/metrics as {'name{labels}': value}; a standby serves it too."""
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port, timeout=5) as r:
            text = r.read().decode()
        return {key: float(value) for key, value in (
            line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))}

    def ext_stats(self):
        with self.client() as c:
            return c.yaml(b"fastbean-stats")


def find_primary(nodes, timeout=60.0, exclude=()):
    """The node that answers as the primary (waiting for one), or raise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for node in nodes:
            if node not in exclude and node.running and node.is_primary():
                return node
        time.sleep(0.05)
    raise AssertionError("no primary after %.0f s:\n%s" % (
        timeout, "\n".join("%s: %s" % (n.name, n.log[-4000:]) for n in nodes)))


HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
EXAMPLE = os.path.join(ROOT,
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
                with client(self.port, 5) as c:
                    good = good + 1 if c.cmd(b"stats").startswith(b"OK ") else 0
            except OSError:
                good = 0
                time.sleep(0.05)

    def put_until_accepted(self, body, timeout=60.0):
        """Connect through HAProxy and put until a put is accepted; its id."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with client(self.port, 5) as c:
                    reply = c.cmd(b"put 0 0 60 %d\r\n%s" % (len(body), body))
                    if reply.startswith(b"INSERTED "):
                        return int(reply.split()[1])
            except OSError:
                pass
            time.sleep(0.01)
        raise AssertionError("no put accepted through HAProxy in %.0f s" % timeout)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
