"""fastbean nodes replicating through a NATS cluster, for the high-availability
tests and benchmarks: start, kill, pause by PID; find the primary."""
import os
import signal
import socket
import subprocess
import time

from servers import Client, fastbean_cmd, free_port


class Node:
    """One fastbean process started with --replicate, on its own loopback port."""

    def __init__(self, name, urls, logdir, *args, stream="fastbean"):
        self.name, self.urls, self.args, self.stream = name, urls, args, stream
        self.port = free_port()
        self.logfile = os.path.join(str(logdir), "%s.log" % name)
        self.proc = None
        self.start()

    def start(self):
        with open(self.logfile, "ab") as log:
            self.proc = subprocess.Popen(
                fastbean_cmd() + ["-l", "127.0.0.1", "-p", str(self.port), "--replicate", self.urls,
                                  "--replicate-stream", self.stream, "--node-name", self.name,
                                  *map(str, self.args)],
                stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 10
        while True:         # the port takes connections even on a standby
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("node %s did not start: %s" % (self.name, self.log()))
                time.sleep(0.02)

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
