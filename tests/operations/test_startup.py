"""Start-up mistakes: each one an operator can make ends in one clear line and a
documented exit status, never a traceback, with beanstalkd's status where it
has one (docs/configuration.md; the unit's RestartPreventExitStatus= holds
every configuration error's, test_systemd.py checks that)."""
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from fastbean.errors import CONFIG_EXITS
from tests.support.natscluster import NATS_SERVER
from tests.support.servers import BEANSTALKD, fastbean_cmd, free_port

pytestmark = pytest.mark.timeout(120)

# root passes every permission check: take that away (and the right to bind
# ports below 1024), as for the unprivileged user a service runs as
UNPRIVILEGED = (["setpriv", "--bounding-set=-dac_override,-dac_read_search,-net_bind_service",
                 "--inh-caps=-dac_override,-dac_read_search,-net_bind_service"]
                if os.geteuid() == 0 else [])


def _privileged_ports():
    try:
        with open("/proc/sys/net/ipv4/ip_unprivileged_port_start") as f:
            return int(f.read()) > 1
    except OSError:
        return True


def _can_mount():
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    p = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o ro tmpfs /mnt"],
                       capture_output=True)
    return p.returncode == 0


def read_only(path):
    """A prefix that runs a command with a read-only file system mounted on
    path, in a mount namespace of its own (nothing outside it sees the mount)."""
    return ["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o ro tmpfs "$0" && shift && exec "$@"',
            str(path), "sh"]


class Setting:
    """What a case's command line refers to: directories, a port in use."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.busy = socket.socket()
        self.busy.bind(("127.0.0.1", 0))
        self.busy.listen(1)
        self.busy_port = self.busy.getsockname()[1]
        self.locks = []

    def dir(self, name, mode=0o755, files=()):
        d = self.tmp / name
        d.mkdir()
        for f in files:
            (d / f).write_bytes(b"")
            (d / f).chmod(0o200)
        d.chmod(mode)
        return str(d)

    def locked(self):
        # another server's lock, as beanstalkd and fastbean take it
        d = self.dir("locked")
        fd = os.open(os.path.join(d, "lock"), os.O_WRONLY | os.O_CREAT, 0o600)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.locks.append(fd)
        return d

    def close(self):
        self.busy.close()
        for fd in self.locks:
            os.close(fd)


# name: (argv from the setting, prefix, fastbean's status, fastbean's line, beanstalkd's status)
# A beanstalkd status of None: a fastbean flag, or a mistake beanstalkd lets pass.
CASES = {
    "unknown flag": (lambda s: ["-x"], [], 5, "unknown flag: -x", 5),
    "stray argument": (lambda s: ["11300"], [], 5, "unknown argument: 11300", 5),
    "bad size": (lambda s: ["-z", "10k"], [], 5, "invalid size: 10k", 5),
    "bad --metrics": (lambda s: ["--metrics", "localhost"], [], 5, "invalid --metrics address: localhost", None),
    "bad --log-format": (lambda s: ["--log-format", "xml"], [], 5, "--log-format: text or json", None),
    "bad --replicate": (lambda s: ["--replicate", "http://x"], [], 5, "not a nats:// URL", None),
    "port in use": (lambda s: ["-p", str(s.busy_port)], [], 111, "Address already in use", 111),
    "port not allowed": (lambda s: ["-p", "1"], UNPRIVILEGED, 111, "ports below 1024 need root", 111),
    "unknown service": (lambda s: ["-p", "no-such-service"], [], 111, "no-such-service", 111),
    "address not here": (lambda s: ["-l", "192.0.2.1"], [], 111, "no interface of this machine", 111),
    "unknown host": (lambda s: ["-l", "no-such-host.invalid"], [], 111, "no-such-host.invalid", 111),
    "--metrics port in use": (lambda s: ["--metrics", "127.0.0.1:%d" % s.busy_port], [], 111,
                              "--metrics: bind 127.0.0.1 port %(busy)d: Address already in use", None),
    "no such user": (lambda s: ["-u", "no-such-user-fb"], [], 33, 'getpwnam("no-such-user-fb"): no such user', 33),
    "-b missing": (lambda s: ["-b", str(s.tmp / "nowhere")], [], 10, "nowhere does not exist", 10),
    "-b on a file": (lambda s: ["-b", str(s.tmp / "file")], [], 10, "file is not a directory", 10),
    "-b not writable": (lambda s: ["-b", s.dir("readonly", 0o555)], UNPRIVILEGED, 10,
                        "readonly is not writable by user", 10),
    "-b not writable, lock file writable": (
        lambda s: ["-b", s.dir("lockonly", 0o555, files=["lock"])], UNPRIVILEGED, 10,
        "lockonly is not writable by user", 1),
    "-b locked": (lambda s: ["-b", s.locked()], [], 10, "failed to lock binlog dir", 10),
    "-b unreadable binlog file": (lambda s: ["-b", s.dir("foreign", 0o755, files=["binlog.1"])],
                                  UNPRIVILEGED, 10, "cannot read", None),
}


def run(cmd, timeout=30):
    return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("name", list(CASES))
def test_each_mistake_gets_one_line_and_its_status(name, tmp_path):
    argv, prefix, status, line, bs_status = CASES[name]
    if prefix and prefix[0] == "setpriv" and not shutil.which("setpriv"):
        pytest.skip("needs setpriv (util-linux) to drop root's permissions")
    if name == "port not allowed" and not _privileged_ports():
        pytest.skip("every port may be bound here (net.ipv4.ip_unprivileged_port_start)")
    setting = Setting(tmp_path)
    (tmp_path / "file").write_text("")
    try:
        args = argv(setting)
        base = [] if "-p" in args or "-l" in args else ["-l", "127.0.0.1", "-p", str(free_port())]
        p = run(prefix + fastbean_cmd() + base + args)
        assert p.returncode == status, (name, p.stderr)
        assert "Traceback" not in p.stderr
        want = line % {"busy": setting.busy_port}
        assert len([x for x in p.stderr.splitlines() if want in x]) == 1, p.stderr
        assert status in CONFIG_EXITS
        if status != 5 or name.startswith("bad --"):
            # a value fastbean takes: one line, not the whole usage
            assert "Options:" not in p.stderr, p.stderr
        if bs_status is not None:
            p = run(prefix + [BEANSTALKD] + base + args, timeout=10)
            assert p.returncode == bs_status, ("beanstalkd", name, p.stderr)
    finally:
        setting.close()


@pytest.mark.skipif(not _can_mount(), reason="needs root and mount namespaces")
def test_read_only_binlog_directory(tmp_path):
    d = tmp_path / "mnt"
    d.mkdir()
    base = ["-l", "127.0.0.1", "-p", str(free_port()), "-b", str(d)]
    p = run(read_only(d) + fastbean_cmd() + base)
    assert p.returncode == 10 and "Traceback" not in p.stderr, p.stderr
    assert "binlog directory %s is on a read-only file system\n" % d in p.stderr
    assert run(read_only(d) + [BEANSTALKD] + base).returncode == 10


def test_out_of_range_port_is_kept_as_beanstalkd_keeps_it():
    # -p 99999: getaddrinfo keeps the low 16 bits, for beanstalkd too, and a
    # service file may rely on that: fastbean listens there too, but says so.
    port = 99999
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port & 0xFFFF))
        except OSError:
            pytest.skip("port %d is in use" % (port & 0xFFFF))
    for cmd in (fastbean_cmd(), [BEANSTALKD]):
        p = subprocess.Popen(cmd + ["-l", "127.0.0.1", "-p", str(port)], stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port & 0xFFFF), timeout=1).close()
                    break
                except OSError:
                    assert p.poll() is None and time.monotonic() < deadline
                    time.sleep(0.02)
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(10)
        err = p.stderr.read()
        if cmd != [BEANSTALKD]:
            assert ("-p 99999 is not a port (1-65535): listening on port 34463 instead, as beanstalkd does"
                    in err), err


# -- NATS -----------------------------------------------------------------------------

needs_nats = pytest.mark.skipif(not os.path.exists(NATS_SERVER), reason="needs nats-server")


def single_nats(tmp_path, jetstream=True, port=None):
    port = port or free_port()
    cmd = [NATS_SERVER, "-a", "127.0.0.1", "-p", str(port)]
    if jetstream:
        cmd += ["-js", "-sd", str(tmp_path / ("js-%d" % port))]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return p, "nats://127.0.0.1:%d" % port
        except OSError:
            assert p.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)


class Node:
    """fastbean --replicate with JSON logs and /readyz."""

    def __init__(self, tmp_path, urls):
        self.mport = free_port()
        self.log = open(tmp_path / ("node-%d.log" % self.mport), "w+")
        self.proc = subprocess.Popen(fastbean_cmd() + [
            "-l", "127.0.0.1", "-p", str(free_port()), "--log-format", "json",
            "--metrics", "127.0.0.1:%d" % self.mport, "--replicate", urls], stderr=self.log)

    def events(self, name=None):
        fd = self.log.fileno()          # pread: the node writes at the offset it shares with us
        text = os.pread(fd, os.fstat(fd).st_size, 0).decode()
        objs = [json.loads(line) for line in text.splitlines() if line.endswith("}")]
        return [o for o in objs if name is None or o["event"] == name]

    def wait_for(self, name, timeout=20):
        deadline = time.monotonic() + timeout
        while not self.events(name):
            assert self.proc.poll() is None and time.monotonic() < deadline, self.events()
            time.sleep(0.05)
        return self.events(name)[0]

    def readyz(self):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % self.mport, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        status = self.proc.wait(20)
        self.log.close()
        return status


@needs_nats
def test_single_nats_server_is_refused(tmp_path):
    nats, url = single_nats(tmp_path)
    try:
        p = run(fastbean_cmd() + ["-l", "127.0.0.1", "-p", "0", "--replicate", url])
    finally:
        nats.terminate()
        nats.wait()
    assert p.returncode == 78 and "Traceback" not in p.stderr, p.stderr
    lines = [x for x in p.stderr.splitlines() if "single server" in x]
    assert lines == ["fastbean: NATS at %s is a single server: --replicate needs a JetStream cluster of at "
                     "least 3 servers to keep 3 copies of the stream" % url], p.stderr
    assert "SIGTERM" not in p.stderr and "reconnecting" not in p.stderr
    assert p.stderr.endswith("fastbean: exiting with status 78\n")


@needs_nats
def test_unreachable_nats_is_said_once_and_retried_until_it_answers(tmp_path):
    # A node may well start before its NATS servers (systemd starts both): it
    # keeps trying, serves nobody meanwhile, and says so once (then once a
    # minute), naming the servers; when NATS answers, it goes on from there.
    port = free_port()
    url = "nats://127.0.0.1:%d" % port
    node = Node(tmp_path, url)
    nats = None
    try:
        first = node.wait_for("nats-unreachable")
        assert first["servers"] == url and first["level"] == "warning"
        assert first["message"].startswith("replication: cannot reach NATS at %s: " % url)
        assert first["message"].endswith("; serving no client until it can, retrying")
        assert node.readyz() == (503, "starting: waiting for NATS at %s\n" % url)
        time.sleep(3)           # a dozen more tries, 0.25 s apart
        assert len(node.events("nats-unreachable")) == 1, node.events()
        assert not node.events("nats-error")
        # NATS comes: the node connects (and finds a single server, which it refuses)
        nats, _ = single_nats(tmp_path, port=port)
        assert node.proc.wait(30) == 78
        assert node.events("nats-connected")[0]["server"] == "127.0.0.1:%d" % port
        assert "single server" in node.events("fatal")[0]["error"]
    finally:
        node.stop()
        if nats is not None:
            nats.terminate()
            nats.wait()


@needs_nats
def test_nats_without_jetstream_is_named(tmp_path):
    nats, url = single_nats(tmp_path, jetstream=False)
    node = Node(tmp_path, url)
    try:
        ev = node.wait_for("jetstream-not-ready")
        assert "JetStream is off on the NATS server at 127.0.0.1:" in ev["error"]
        assert "run nats-server with -js" in ev["message"] and ev["servers"] == url
        time.sleep(2)
        assert len(node.events("jetstream-not-ready")) == 1
        assert node.readyz()[0] == 503
    finally:
        assert node.stop() == 0
        nats.terminate()
        nats.wait()


@needs_nats
def test_too_small_nats_cluster_is_named(tmp_path):
    from tests.support.natscluster import NatsCluster
    cluster = NatsCluster(tmp_path / "nats", n=2)
    node = Node(tmp_path, cluster.urls)
    try:
        # (first, maybe, a timeout while the cluster elects its leader)
        deadline = time.monotonic() + 30
        while not [e for e in node.events("jetstream-not-ready") if "cannot place" in e["error"]]:
            assert node.proc.poll() is None and time.monotonic() < deadline, node.events()
            time.sleep(0.1)
        ev = [e for e in node.events("jetstream-not-ready") if "cannot place" in e["error"]][0]
        assert ev["error"] == ("JetStream cannot place 3 copies of the stream (no suitable peers for "
                               "placement): the cluster needs 3 JetStream servers up"), ev
        assert ev["servers"] == cluster.urls
        time.sleep(2)           # tried again every second, said once
        assert len([e for e in node.events("jetstream-not-ready") if "cannot place" in e["error"]]) == 1
        assert node.readyz()[0] == 503
    finally:
        assert node.stop() == 0
        cluster.stop()


@needs_nats
def test_job_size_beyond_what_nats_carries_is_refused(tmp_path):
    from tests.support.natscluster import NatsCluster
    cluster = NatsCluster(tmp_path / "nats")
    try:
        p = run(fastbean_cmd() + ["-l", "127.0.0.1", "-p", "0", "-z", "8000000", "--replicate", cluster.urls],
                timeout=60)
    finally:
        cluster.stop()
    assert p.returncode == 78 and "Traceback" not in p.stderr, p.stderr
    lines = [x for x in p.stderr.splitlines() if "does not fit" in x]
    assert lines == ["fastbean: -z 8000000 does not fit in a NATS message (max_payload 1048576)"], p.stderr
