"""What talks to fastbean speaks TLS too: fastbean.client.Client with
tls_context(), fastbean.testing's servers, and fastbean-ctl's --tls options,
against real server processes."""
import json
import os
import signal
import ssl
import subprocess
import sys
import time

import greenstalk
import pytest

from fastbean import testing
from fastbean.client import Client, ClientError, ConnectError, tls_context
from tests.conftest import ROOT
from tests.support.certs import Pki
from tests.support.servers import HOST, free_port, wait_listening

pytestmark = pytest.mark.timeout(90)

CTL = [sys.executable, "-m", "fastbean.ctl"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture(scope="module")
def tls_server(pki):
    """A TLS-only server (fastbean.testing, its own certificate pinned by client())."""
    with testing.server(tls_cert=pki.server[0], tls_key=pki.server[1], testing=True) as s:
        yield s


@pytest.fixture(scope="module")
def mutual_server(pki):
    with testing.server(tls_cert=pki.server[0], tls_key=pki.server[1], tls_ca=pki.ca.cert,
                        tls_client=tls_context(pki.ca.cert, *pki.client)) as s:
        yield s


def test_the_client_speaks_tls_and_verifies_the_server(pki, tls_server):
    with Client(tls_server.address, tls=tls_context(pki.ca.cert)) as c:
        assert c.sock.version() in ("TLSv1.2", "TLSv1.3")
        c.use("mail")
        job = c.put(b"hello")
        assert c.reserve_job(job) == (job, b"hello")
        c.delete(job)
    with pytest.raises(ConnectError, match="over TLS: the server's certificate is not trusted"):
        Client(tls_server.address, tls=tls_context(pki.other_ca.cert))
    with pytest.raises(ConnectError, match="not trusted: Hostname mismatch"):
        Client(tls_server.address, tls=tls_context(pki.ca.cert), server_hostname="elsewhere")
    # the client certificate a server without --tls-ca does not ask for changes nothing
    with Client(tls_server.address, tls=tls_context(pki.ca.cert, *pki.client)) as c:
        assert c.stats()["current-connections"] >= 1


def test_the_client_shows_its_certificate_for_mutual_tls(pki, mutual_server):
    with Client(mutual_server.address, tls=tls_context(pki.ca.cert, *pki.client)) as c:
        assert c.cmd(b"list-tube-used") == b"USING default"
    with pytest.raises(ClientError):           # at the handshake (1.2) or at the first reply (1.3)
        with Client(mutual_server.address, tls=tls_context(pki.ca.cert)) as c:
            c.stats()


def test_testing_servers_start_reset_and_hand_out_tls_clients(tls_server):
    with tls_server.client() as c:
        c.put(b"x")
        assert isinstance(c.sock, ssl.SSLSocket)
    tls_server.reset()
    with tls_server.client() as c:
        assert c.stats()["current-jobs-ready"] == 0
    assert "(TLS)" in tls_server.log and tls_server.log.count("listening on") == 1


def test_a_testing_server_over_tls_on_a_unix_socket(pki):
    with testing.server(unix_socket=True, tls_cert=pki.self_signed[0], tls_key=pki.self_signed[1]) as s:
        with s.client() as c:
            assert c.cmd(b"list-tube-used") == b"USING default"
        assert "listening on unix:%s (TLS)" % s.unix_socket in s.log


def test_testing_refuses_tls_settings_that_cannot_work(pki):
    with pytest.raises(ValueError, match="give tls_client"):
        testing.Server(tls_cert=pki.server[0], tls_ca=pki.ca.cert)
    with pytest.raises(ValueError, match="need tls_cert"):
        testing.Server(tls_ca=pki.ca.cert)


def ctl(server, *args):
    host, port = server.address
    return subprocess.run(CTL + ["-l", "localhost", "-p", str(port), *map(str, args)],
                          capture_output=True, text=True, timeout=30)


def test_ctl_over_tls(pki, tls_server):
    tls_server.reset()
    p = ctl(tls_server, "put", "-t", "ctl", "over tls", "--json", "--tls-ca", pki.ca.cert)
    assert p.returncode == 0, p.stderr
    p = ctl(tls_server, "--tls-ca", pki.ca.cert, "tubes", "ctl", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)[0]["current-jobs-ready"] == 1, p.stdout
    # the system's CAs do not know the test CA
    p = ctl(tls_server, "--tls", "stats")
    assert p.returncode == 3 and "certificate is not trusted" in p.stderr, p.stderr
    p = ctl(tls_server, "stats")                 # plain text to a TLS port
    assert p.returncode in (3, 5) and p.stderr.startswith("fastbean-ctl: "), p.stderr


def test_ctl_over_mutual_tls(pki, mutual_server):
    p = ctl(mutual_server, "--tls-ca", pki.ca.cert, "--tls-cert", pki.client[0], "--tls-key",
            pki.client[1], "stats", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["pid"] == mutual_server.pid, p.stderr
    p = ctl(mutual_server, "--tls-ca", pki.ca.cert, "stats")
    assert p.returncode in (3, 5) and p.stderr.count("\n") == 1, p.stderr


def test_ctl_tls_files_that_cannot_be_used_are_usage_errors(pki, tls_server, tmp_path):
    missing = str(tmp_path / "missing.pem")
    for args in (["--tls-ca", missing], ["--tls-cert", pki.client[0], "--tls-key", pki.server[1]],
                 ["--tls-key", pki.client[1]]):
        p = ctl(tls_server, *args, "stats")
        assert p.returncode == 2 and p.stderr.startswith("fastbean-ctl: "), (args, p.stderr)
        assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    assert os.path.basename(missing) in ctl(tls_server, "--tls-ca", missing, "stats").stderr


def test_the_beanstalkd_stand_in_for_client_suites(tmp_path):
    """tools/beanstalkd-over-tls, which client libraries' own suites start in
    beanstalkd's place: what it serves crosses a TLS listener, SIGUSR1 reaches
    fastbean (drain mode), SIGTERM stops the server and the tunnel."""
    pki = Pki(str(tmp_path))
    port = free_port()
    env = dict(os.environ, CERT=pki.server[0], KEY=pki.server[1], CA=pki.ca.cert, PYTHON=sys.executable,
               PYTHONPATH=ROOT)
    stand_in = subprocess.Popen([os.path.join(ROOT, "tools", "beanstalkd-over-tls"), "-l", HOST, "-p", str(port)],
                                env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_listening(port, stand_in)
        with greenstalk.Client((HOST, port), use="t", watch="t") as g:
            job = g.put("through TLS")
            assert g.reserve(timeout=5).body == "through TLS"
            g.delete(job)
            stand_in.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 5
            while g.stats()["draining"] != "true":
                assert time.monotonic() < deadline
                time.sleep(0.05)
        stand_in.send_signal(signal.SIGTERM)
        assert stand_in.wait(10) == 0
    finally:
        if stand_in.poll() is None:
            os.killpg(stand_in.pid, signal.SIGKILL)
    log = stand_in.stderr.read()
    assert "inherited listen fd" in log or "listening" in log, log
    assert "exiting with status 0" in log, log
    # nothing left behind: no fastbean nor stunnel of this stand-in still runs
    leftover = subprocess.run(["pgrep", "-s", str(stand_in.pid)], capture_output=True, text=True).stdout
    assert leftover == "", leftover
