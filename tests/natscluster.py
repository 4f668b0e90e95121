"""A three-server NATS JetStream cluster on loopback for the replication tests:
each server a real nats-server process with its own store, stopped by its PID."""
import os
import shutil
import signal
import subprocess

from tests.servers import free_port, wait_listening

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"


class NatsServer:
    def __init__(self, name, port, cluster_port, routes, store, tls=None, auth=None):
        self.name, self.port, self.cluster_port = name, port, cluster_port
        self.url = "%s://127.0.0.1:%d" % ("tls" if tls else "nats", port)
        self.conf = os.path.join(store, name + ".conf")
        self.logfile = os.path.join(store, name + ".log")
        with open(self.conf, "w") as f:
            f.write('server_name: %s\nlisten: 127.0.0.1:%d\n'
                    'jetstream { store_dir: "%s" }\n'
                    # no_advertise: clients learn no other server's URL from INFO, so a
                    # client given proxies' URLs (tests/faultkit.py) reaches NATS only
                    # through them
                    'cluster { name: fastbean, listen: 127.0.0.1:%d, no_advertise: true, '
                    'routes: [%s] }\n'
                    % (name, port, os.path.join(store, name), cluster_port,
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
