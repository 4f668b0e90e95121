"""Replication over TLS to NATS (--replicate-ca, --replicate-cert, --replicate-key)
and with NATS credentials (--replicate-auth-file): JetStream clusters that want
a client certificate or a password, real fastbean nodes going through them."""
import subprocess
import time

import pytest

from tests.support.certs import Pki
from tests.support.hanodes import Node, find_primary
from tests.support.natscluster import NatsCluster
from tests.support.servers import fastbean_cmd

pytest.importorskip("nats")
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture
def cluster(pki, tmp_path):
    c = NatsCluster(tmp_path / "nats", tls={"cert": pki.server[0], "key": pki.server[1], "ca": pki.ca.cert})
    yield c
    c.stop()


@pytest.fixture
def nodes():
    started = []
    yield started
    for n in started:
        n.stop()


def test_nodes_replicate_and_take_over_through_tls(pki, cluster, nodes, tmp_path):
    assert cluster.urls.startswith("tls://")
    tls = ["--replicate-ca", pki.ca.cert, "--replicate-cert", pki.client[0], "--replicate-key", pki.client[1],
           "--lease-ttl", "2"]
    nodes += [Node("a", cluster.urls, tmp_path, *tls), Node("b", cluster.urls, tmp_path, *tls)]
    primary = find_primary(nodes)
    with primary.client() as c:
        ids = [c.put(b"job %d" % i) for i in range(10)]
    primary.stop()
    survivor = find_primary([n for n in nodes if n is not primary])
    with survivor.client() as c:
        assert [c.peek(i) for i in ids] == [b"job %d" % i for i in range(10)]
    assert "connected to NATS at 127.0.0.1" in survivor.log


def test_a_node_without_a_client_certificate_is_kept_out(pki, cluster, nodes, tmp_path):
    nodes.append(Node("lonely", cluster.urls, tmp_path, "--replicate-ca", pki.ca.cert))
    deadline = time.monotonic() + 30
    # NATS's alert, as the node logs it: "bad certificate" over TLS 1.2 (nats-server
    # 2.9.10), "certificate required" over TLS 1.3 (2.15.1)
    while not any(alert in nodes[0].log for alert in ("bad certificate", "certificate required")):
        assert time.monotonic() < deadline, nodes[0].log
        time.sleep(0.2)
    assert not nodes[0].is_primary()
    assert "connected to NATS" not in nodes[0].log


@pytest.fixture
def guarded_cluster(tmp_path):
    c = NatsCluster(tmp_path / "nats-auth", auth=("fastbean", "n0t-in-argv"))
    yield c
    c.stop()


def test_nats_credentials_come_from_a_file_and_stay_out_of_the_log(guarded_cluster, nodes, tmp_path):
    auth = tmp_path / "nats.auth"
    auth.write_text("fastbean:n0t-in-argv\n")
    nodes.append(Node("a", guarded_cluster.urls, tmp_path, "--replicate-auth-file", str(auth)))
    primary = find_primary(nodes)
    with primary.client() as c:
        c.put(b"through an authenticated NATS")
    # without credentials NATS refuses the node, which never serves
    nodes.append(Node("b", guarded_cluster.urls, tmp_path))
    deadline = time.monotonic() + 30
    while "uthorization" not in nodes[1].log:       # NATS's "Authorization Violation"
        assert time.monotonic() < deadline, nodes[1].log
        time.sleep(0.2)
    assert not nodes[1].is_primary()
    # credentials in the URLs work too, and the log shows the URLs without them
    urls = ",".join(u.replace("nats://", "nats://fastbean:n0t-in-argv@") for u in guarded_cluster.urls.split(","))
    nodes.append(Node("c", urls, tmp_path, stream="other"))
    find_primary(nodes[2:])
    assert [line for n in nodes for line in n.log.splitlines() if "n0t-in-argv" in line] == []


@pytest.mark.parametrize("args, status, message", [
    (["--replicate-ca", "ca.pem"], 5, b"--replicate-ca needs --replicate"),
    (["--replicate", "tls://127.0.0.1:4222", "--replicate-key", "k.pem"], 5,
     b"--replicate-key needs --replicate-cert"),
    (["--replicate", "tls://127.0.0.1:4222", "--replicate-ca", "/nonexistent/ca.pem"], 78,
     b"--replicate TLS files /nonexistent/ca.pem: No such file or directory"),
    (["--replicate-auth-file", "auth"], 5, b"--replicate-auth-file needs --replicate"),
    (["--replicate", "nats://127.0.0.1:4222", "--replicate-auth-file", "/nonexistent/auth"], 78,
     b"--replicate-auth-file /nonexistent/auth: No such file or directory"),
])
def test_replication_tls_flags_are_checked(args, status, message):
    proc = subprocess.run(fastbean_cmd() + ["-p", "0"] + args, capture_output=True, timeout=30)
    assert proc.returncode == status and message in proc.stderr, proc.stderr
    assert b"Traceback" not in proc.stderr
