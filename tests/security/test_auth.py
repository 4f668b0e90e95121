"""Token authentication on the TLS listeners (--auth-tokens): every command
before `auth`, wrong and revoked tokens, brute force met by the limit, the
timeout, SIGHUP, and the tools that send a token; real server processes,
real TLS clients."""
import base64
import hashlib
import http.client
import signal
import socket
import subprocess
import sys
import time

import pytest

from fastbean import testing
from fastbean.client import Client, ServerError, tls_context
from tests.security.test_tls import ask, client_context, start_fails, tls_connect, tls_server, wait_for_log
from tests.support.certs import Pki
from tests.support.prometheus import Prometheus
from tests.support.servers import HOST, Server, client, wait_listening

pytestmark = pytest.mark.timeout(90)

TOKENS = {"producer": "p-7f3c9a1e5b2d4c6e8f0a1b3c5d7e9f1a", "worker": "w-0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"}
# every command of the protocol, each of which must meet the gate
COMMANDS = [b"put 0 0 60 2", b"use t", b"reserve", b"reserve-with-timeout 0", b"reserve-job 1",
            b"delete 1", b"release 1 0 0", b"bury 1 0", b"touch 1", b"watch t", b"ignore t",
            b"peek 1", b"peek-ready", b"peek-delayed", b"peek-buried", b"kick 1", b"kick-job 1",
            b"stats-job 1", b"stats-tube default", b"stats", b"list-tubes", b"list-tube-used",
            b"list-tubes-watched", b"pause-tube default 1", b"auth", b"AUTH x", b"nonsense"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(str(tmp_path_factory.mktemp("pki")))


def tokens_file(path, tokens=TOKENS):
    path.write_text("# name  sha256 of the token\n" + "".join(
        "%s %s\n" % (name, hashlib.sha256(token.encode()).hexdigest()) for name, token in tokens.items()))
    return str(path)


@pytest.fixture
def guarded(pki, tmp_path):
    """A server whose TLS listener asks for tokens; its plain -p port does not."""
    s = tls_server(pki.server, "--auth-tokens", tokens_file(tmp_path / "tokens"))
    s.tokens = str(tmp_path / "tokens")
    yield s
    s.stop()


def connections(server):
    with client(server.port) as c:
        return c.stats()["current-connections"]


def test_before_auth_every_command_is_refused_and_the_engine_never_hears(pki, guarded):
    ctx = client_context(pki.ca.cert)
    for start in range(0, len(COMMANDS), 7):        # eight refusals end a connection
        with tls_connect(guarded.tls_port, ctx) as t:
            for line in COMMANDS[start:start + 7]:
                assert ask(t, line + b"\r\n") == b"NOT_AUTHENTICATED\r\n", line
            assert connections(guarded) == 1         # only the plain client asking
            t.sendall(b"quit\r\n")
            assert t.recv(100) == b""
    with client(guarded.port) as c:
        stats = c.stats()
    # the engine counted the plain clients (the start-up check's, the loop's and
    # this one), and none of the TLS ones
    assert stats["current-jobs-ready"] == 0
    assert stats["total-connections"] == 1 + len(range(0, len(COMMANDS), 7)) + 1


def test_a_client_that_will_not_authenticate_is_closed_after_eight_refusals(pki, guarded):
    with tls_connect(guarded.tls_port, client_context(pki.ca.cert)) as t:
        t.sendall(b"stats\r\n" * 1000)         # and reads nothing meanwhile
        time.sleep(0.5)
        data = b""
        chunk = t.recv(65536)
        while chunk:
            data += chunk
            chunk = t.recv(65536)
        assert data == b"NOT_AUTHENTICATED\r\n" * 8


def test_a_right_token_lets_in_and_a_wrong_one_does_not(pki, guarded):
    ctx = client_context(pki.ca.cert)
    with tls_connect(guarded.tls_port, ctx) as t:
        assert ask(t, b"auth not-a-token\r\n") == b"NOT_AUTHENTICATED\r\n"
        assert ask(t, b"auth %s\r\n" % TOKENS["producer"].encode()) == b"AUTHENTICATED\r\n"
        assert ask(t, b"use jobs\r\nput 0 0 60 2\r\nhi\r\n", b"INSERTED 1\r\n") == \
            b"USING jobs\r\nINSERTED 1\r\n"
        assert connections(guarded) == 2
        # once in, auth is no command of the protocol
        assert ask(t, b"auth %s\r\n" % TOKENS["producer"].encode()) == b"UNKNOWN_COMMAND\r\n"
    # commands sent with the token in one write run once it is accepted
    with tls_connect(guarded.tls_port, ctx) as t:
        reply = ask(t, b"auth %s\r\nwatch jobs\r\nreserve\r\n" % TOKENS["worker"].encode(), b"hi\r\n")
        assert reply == b"AUTHENTICATED\r\nWATCHING 2\r\nRESERVED 1 2\r\nhi\r\n"
    # the plain listener asks for nothing
    with client(guarded.port) as c:
        assert c.peek(1) == b"hi"
    assert "sent a token that is not in" in guarded.log and "not-a-token" not in guarded.log


def test_brute_force_is_met_by_the_limit(pki, guarded):
    ctx = client_context(pki.ca.cert)
    with tls_connect(guarded.tls_port, ctx) as t:
        for i in range(5):
            assert ask(t, b"auth guess-%d\r\n" % i) == b"NOT_AUTHENTICATED\r\n"
        # (five refusals: the connection is still open, below the eight that close it)
        # the address is refused now, even with a good token, and the connection closed
        t.sendall(b"auth %s\r\n" % TOKENS["worker"].encode())
        assert t.recv(100) == b"NOT_AUTHENTICATED\r\n"
        assert t.recv(100) == b""
    with tls_connect(guarded.tls_port, ctx) as t:
        t.sendall(b"auth %s\r\n" % TOKENS["worker"].encode())
        assert t.recv(100) == b"NOT_AUTHENTICATED\r\n"
    assert guarded.log.count("sent a token that is not in") == 5
    assert guarded.log.count("failed to authenticate 5 times") == 1


def test_a_line_too_long_or_a_silent_client_is_closed(pki, guarded):
    ctx = client_context(pki.ca.cert)
    with tls_connect(guarded.tls_port, ctx) as t:
        t.sendall(b"auth " + b"x" * 300)
        assert t.recv(100) == b"BAD_FORMAT\r\n"
        assert t.recv(100) == b""
    with tls_connect(guarded.tls_port, ctx) as t:
        t.settimeout(20)
        start = time.monotonic()
        assert t.recv(100) == b""
        assert 9 < time.monotonic() - start < 15
    assert "did not authenticate within 10s" in guarded.log


def test_sighup_revokes_a_token_and_keeps_those_in(pki, guarded, tmp_path):
    ctx = client_context(pki.ca.cert)
    with tls_connect(guarded.tls_port, ctx) as kept:
        assert ask(kept, b"auth %s\r\n" % TOKENS["worker"].encode()) == b"AUTHENTICATED\r\n"
        tokens_file(tmp_path / "tokens", {"producer": TOKENS["producer"]})
        guarded.signal(signal.SIGHUP)
        wait_for_log(guarded, "tokens reloaded from %s: 1" % guarded.tokens, 1)
        assert ask(kept, b"list-tube-used\r\n") == b"USING default\r\n"
        with tls_connect(guarded.tls_port, ctx) as t:
            assert ask(t, b"auth %s\r\n" % TOKENS["worker"].encode()) == b"NOT_AUTHENTICATED\r\n"
            assert ask(t, b"auth %s\r\n" % TOKENS["producer"].encode()) == b"AUTHENTICATED\r\n"
        # a broken file leaves the tokens as they were
        (tmp_path / "tokens").write_text("producer not-a-hash\n")
        guarded.signal(signal.SIGHUP)
        wait_for_log(guarded, "tokens not reloaded", 1)
        with tls_connect(guarded.tls_port, ctx) as t:
            assert ask(t, b"auth %s\r\n" % TOKENS["producer"].encode()) == b"AUTHENTICATED\r\n"
    assert guarded.running


def test_traced_connections_after_auth(pki, tmp_path):
    s = tls_server(pki.server, "-VV", "--auth-tokens", tokens_file(tmp_path / "tokens"))
    try:
        with tls_connect(s.tls_port, client_context(pki.ca.cert)) as t:
            assert ask(t, b"auth %s\r\nlist-tube-used\r\n" % TOKENS["worker"].encode(),
                       b"USING default\r\n") == b"AUTHENTICATED\r\nUSING default\r\n"
    finally:
        s.stop()
    assert "authenticated as worker" in s.log and "'list-tube-used\\r\\n'" in s.log, s.log
    assert TOKENS["worker"] not in s.log


def test_unusable_tokens_files_stop_the_start(pki, tmp_path):
    tls = ["--tls-listen", "%s:%d" % (HOST, testing.free_port()), "--tls-cert", pki.server[0],
           "--tls-key", pki.server[1]]
    (tmp_path / "bad").write_text("worker 1234\n")
    (tmp_path / "empty").write_text("# nobody\n")
    for path, message in ((tmp_path / "missing", "No such file or directory"),
                          (tmp_path / "bad", "line 1: not NAME SHA256-HEX"),
                          (tmp_path / "empty", "no token in it")):
        status, err = start_fails(*tls, "--auth-tokens", path)
        assert status == 78 and message in err and "Traceback" not in err, err
    status, err = start_fails("--auth-tokens", tokens_file(tmp_path / "t"))
    assert status == 5 and err.startswith("fastbean: --auth-tokens needs --tls-cert"), err
    status, err = start_fails("-p", testing.free_port(), "--metrics", testing.free_port(), "--metrics-tls",
                              "--tls-cert", pki.server[0], "--tls-key", pki.server[1],
                              "--auth-tokens", tokens_file(tmp_path / "t"))
    assert status == 5 and "--auth-tokens: nothing asks for them" in err, err
    for args, message in ((["--metrics-auth"], "--metrics-auth needs --auth-tokens"),
                          (["--metrics", "1", "--tls-cert", "x", "--auth-tokens", "t", "--metrics-auth"],
                           "--metrics-auth needs --metrics-tls")):
        status, err = start_fails(*args)
        assert status == 5 and err.startswith("fastbean: " + message), err


def test_the_client_ctl_and_testing_send_the_token(pki, tmp_path):
    path = tokens_file(tmp_path / "tokens")
    with testing.server("--auth-tokens", path, tls_cert=pki.server[0], tls_key=pki.server[1],
                        auth_token=TOKENS["worker"]) as s:
        with s.client() as c:
            c.put(b"in")
        tls = tls_context(pki.ca.cert)
        with Client(s.address, tls=tls, server_hostname="localhost") as c:
            with pytest.raises(ServerError, match="NOT_AUTHENTICATED"):
                c.stats()
            c.auth(TOKENS["producer"])
            assert c.stats()["current-jobs-ready"] == 1
        with pytest.raises(ServerError, match="NOT_AUTHENTICATED"):
            Client(s.address, tls=tls, server_hostname="localhost", token="wrong")
        token_file = tmp_path / "token"
        token_file.write_text(TOKENS["producer"] + "\n")
        cmd = [sys.executable, "-m", "fastbean.ctl", "-l", "localhost", "-p", str(s.port),
               "--tls-ca", pki.ca.cert]
        p = subprocess.run(cmd + ["--auth-token-file", str(token_file), "stats"],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0 and "current-jobs-ready" in p.stdout, p.stderr
        p = subprocess.run(cmd + ["stats"], capture_output=True, text=True, timeout=30)
        assert p.returncode == 4 and "NOT_AUTHENTICATED" in p.stderr, p.stderr
        p = subprocess.run(cmd + ["--auth-token-file", str(tmp_path / "none"), "stats"],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and "--auth-token-file" in p.stderr, p.stderr


def test_no_plain_socket_can_skip_the_gate(pki, guarded):
    # plain text on the guarded port never reaches the gate, let alone the engine
    with socket.create_connection((HOST, guarded.tls_port), timeout=5) as plain:
        plain.sendall(b"auth %s\r\nstats\r\n" % TOKENS["worker"].encode())
        data = plain.recv(100)
        while data:
            assert b"AUTHENTICATED" not in data
            data = plain.recv(100)


def test_with_a_ca_too_a_client_needs_its_certificate_and_a_token(pki, tmp_path):
    s = tls_server(pki.server, "--auth-tokens", tokens_file(tmp_path / "tokens"), ca=pki.ca.cert)
    try:
        with tls_connect(s.tls_port, client_context(pki.ca.cert, pki.client)) as t:
            assert ask(t, b"stats\r\n") == b"NOT_AUTHENTICATED\r\n"
            assert ask(t, b"auth %s\r\nlist-tube-used\r\n" % TOKENS["worker"].encode(),
                       b"USING default\r\n") == b"AUTHENTICATED\r\nUSING default\r\n"
        with pytest.raises((ConnectionError, OSError)):
            with tls_connect(s.tls_port, client_context(pki.ca.cert)) as t:     # no certificate
                ask(t, b"auth %s\r\n" % TOKENS["worker"].encode())
    finally:
        s.stop()


def metrics_server(pki, tmp_path, *args):
    """TLS-only HTTP endpoint whose /metrics wants a token; plain beanstalk port."""
    mport = testing.free_port()
    s = Server("fastbean", "--metrics", "%s:%d" % (HOST, mport), "--metrics-tls", "--metrics-auth",
               "--tls-cert", pki.server[0], "--tls-key", pki.server[1],
               "--auth-tokens", tokens_file(tmp_path / "tokens"), *args).start()
    s.mport = mport
    wait_listening(mport, s.proc, lambda: s.log)
    return s


def https_get(port, path, ctx, authorization=None):
    conn = http.client.HTTPSConnection("localhost", port, timeout=10, context=ctx)
    try:
        conn.request("GET", path, headers={"Authorization": authorization} if authorization else {})
        r = conn.getresponse()
        return r.status, r.getheader("WWW-Authenticate"), r.read()
    finally:
        conn.close()


def basic(name, token):
    return "Basic " + base64.b64encode(("%s:%s" % (name, token)).encode()).decode()


def test_metrics_wants_a_bearer_or_basic_token_and_health_stays_open(pki, tmp_path):
    s = metrics_server(pki, tmp_path)
    ctx = client_context(pki.ca.cert)
    try:
        status, challenge, _ = https_get(s.mport, "/metrics", ctx)
        assert status == 401 and challenge.startswith("Bearer")
        status, _, body = https_get(s.mport, "/metrics", ctx, "Bearer " + TOKENS["worker"])
        assert status == 200 and b"current_jobs_ready 0" in body
        assert https_get(s.mport, "/metrics", ctx, basic("producer", TOKENS["producer"]))[0] == 200
        assert https_get(s.mport, "/metrics", ctx, basic("worker", TOKENS["producer"]))[0] == 401
        assert https_get(s.mport, "/healthz", ctx)[0] == 200
        assert https_get(s.mport, "/readyz", ctx)[0] == 200
        for i in range(5):
            assert https_get(s.mport, "/metrics", ctx, "Bearer guess-%d" % i)[0] == 401
        # over the limit: refused unheard, the good token too
        assert https_get(s.mport, "/metrics", ctx, "Bearer " + TOKENS["worker"])[0] == 429
        assert https_get(s.mport, "/healthz", ctx)[0] == 200
    finally:
        s.stop()
    assert "guess-" not in s.log and "failed to authenticate 5 times" in s.log


def test_health_auth_closes_the_health_endpoints_too(pki, tmp_path):
    s = metrics_server(pki, tmp_path, "--health-auth")
    ctx = client_context(pki.ca.cert)
    try:
        for path in ("/healthz", "/readyz"):
            status, challenge, body = https_get(s.mport, path, ctx)
            assert status == 401 and challenge.startswith("Bearer") and body == b"a token is needed for %s\n" % (
                path.encode())
            assert https_get(s.mport, path, ctx, "Bearer wrong")[0] == 401
            # any token will do: the health of the node is no one's secret among its clients
            status, _, body = https_get(s.mport, path, ctx, "Bearer " + TOKENS["producer"])
            assert status == 200 and body in (b"ok\n", b"ready\n"), body
        assert https_get(s.mport, "/metrics", ctx, "Bearer " + TOKENS["worker"])[0] == 200
    finally:
        s.stop()
    assert "sent /readyz a token that is not in" in s.log
    status, err = start_fails("--health-auth")
    assert status == 5 and "--health-auth needs --metrics-auth" in err, err


def test_prometheus_scrapes_with_a_bearer_token(pki, tmp_path):
    s = metrics_server(pki, tmp_path)
    token_file = tmp_path / "prometheus.token"
    token_file.write_text(TOKENS["worker"])
    job = ("    scheme: https\n    authorization:\n      credentials_file: %s\n"
           "    tls_config:\n      ca_file: %s\n      server_name: localhost\n" % (token_file, pki.ca.cert))
    try:
        with Prometheus(tmp_path, s.mport, job) as prom:
            prom.until("up", lambda r: r[0]["value"][1] == "1")
    finally:
        s.stop()
