"""Unauthenticated peers against a node at a low descriptor limit (issue 35,
defect 1): silent TCP connections to a TLS listener with --auth-tokens, more
of them than the process may open files. Real server processes under
`prlimit --nofile`, real sockets, real TLS clients."""
import os
import socket
import ssl
import time

import pytest

from tests.operations.test_metrics import get, samples
from tests.security.test_auth import TOKENS, tokens_file
from tests.security.test_tls import ask, client_context, start_fails, tls_connect, tls_server
from tests.support.certs import Pki
from tests.support.servers import HOST, client, free_port

pytestmark = pytest.mark.timeout(120)

NOFILE = 400                # the server's open-files limit
FLOOD = 420                 # silent connections, more than it may open


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(str(tmp_path_factory.mktemp("pki")))


def guarded_server(pki, tmp_path, *args):
    """The issue's node: a TLS listener asking for tokens, -b with -f 0,
    NOFILE descriptors at most."""
    binlog = tmp_path / "binlog"
    binlog.mkdir()
    return tls_server(pki.server, "--auth-tokens", tokens_file(tmp_path / "tokens"),
                      "-b", str(binlog), "-f", "0", *args, nofile=NOFILE)


def flood(port, n, sources=("127.0.0.1",)):
    """n TCP connections to port that send nothing, spread over the loopback
    source addresses given."""
    socks = []
    for i in range(n):
        sock = socket.socket()
        socks.append(sock)
        sock.bind((sources[i % len(sources)], 0))
        sock.connect((HOST, port))
        sock.setblocking(False)
    return socks


def accept_queue(port):
    """Connections waiting in the kernel for the listener on HOST:port to accept them."""
    local = "0100007F:%04X" % port
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[1] == local and fields[3] == "0A":        # LISTEN
                return int(fields[4].split(":")[1], 16)
    raise AssertionError("nothing listens on %s:%d" % (HOST, port))


def wait_accepted(port, timeout=30.0):
    """Until the listener's accept queue is empty (every connection accepted,
    whether kept or closed at once)."""
    deadline = time.monotonic() + timeout
    while accept_queue(port):
        assert time.monotonic() < deadline, "%d connections still not accepted" % accept_queue(port)
        time.sleep(0.05)


def closed(socks):
    """How many of socks the server has closed."""
    n = 0
    for sock in socks:
        try:
            if sock.recv(1) == b"":
                n += 1
        except BlockingIOError:
            pass
        except ConnectionResetError:
            n += 1
    return n


def wait_closed(socks, count, timeout=30.0):
    deadline = time.monotonic() + timeout
    while closed(socks) < count:
        assert time.monotonic() < deadline, "%d of %d closed, not %d" % (closed(socks), len(socks), count)
        time.sleep(0.05)


def fds(server):
    """Descriptors the server has open."""
    return len(os.listdir("/proc/%d/fd" % server.pid))


def put_and_check(server, plain, tls, puts=20, known=0):
    """puts on connections opened before the flood, plain and TLS, each
    acknowledged (-f 0: once on disk); then every job acknowledged is there
    (beside `known` ones from before), and the server serves and did not
    fail-stop."""
    ids = []
    for i in range(puts):
        ids.append(plain.put(b"p%d" % i))
        reply = ask(tls, b"put 0 0 60 2\r\nt%d\r\n" % (i % 10))
        assert reply.startswith(b"INSERTED "), reply
        ids.append(int(reply.split()[1]))
    for jid in ids:
        assert plain.stats_job(jid)["state"] == "ready"
    assert plain.stats()["current-jobs-ready"] == known + len(ids)
    assert server.running
    assert "fail-stop" not in server.log and "binlog-error" not in server.log, server.log
    return ids


def test_silent_connections_at_the_connection_cap_cost_nothing_open(pki, tmp_path):
    """The issue's reproduction, four times over (four fail-stops in a minute
    made it exit with 74): 420 silent TCP connections to the TLS port of a
    node with --max-connections 50 and 400 descriptors, then puts on
    connections opened before. Connections count from accept, so those beyond
    the cap are closed at once; the puts are acknowledged, and after kill -9
    every one of them is there."""
    s = guarded_server(pki, tmp_path, "--max-connections", "50")
    ctx = client_context(pki.ca.cert)
    socks = []
    ids = []
    try:
        with client(s.port) as plain, tls_connect(s.tls_port, ctx) as tls:
            assert ask(tls, b"auth %s\r\n" % TOKENS["producer"].encode()) == b"AUTHENTICATED\r\n"
            for _ in range(4):
                socks = flood(s.tls_port, FLOOD)
                wait_accepted(s.tls_port)
                # two clients are in: at most 48 of the silent ones are left their handshake
                wait_closed(socks, FLOOD - 48)
                assert fds(s) < NOFILE - 300
                ids += put_and_check(s, plain, tls, known=len(ids))
                for sock in socks:
                    sock.close()
                socks = []
        assert "connection limit (50) reached" in s.log
        assert s.running and "exiting" not in s.log, s.log
        s.kill()
        s.start()                       # -f 0: what was acknowledged was on disk
        with client(s.port) as c:
            assert c.stats()["current-jobs-ready"] == len(ids) == 4 * 40
            for jid in ids:
                assert c.stats_job(jid)["state"] == "ready"
    finally:
        for sock in socks:
            sock.close()
        s.stop()
    assert s.proc.returncode == 0, s.log


def test_silent_connections_beyond_the_descriptor_limit_fail_nothing_open(pki, tmp_path):
    """No --max-connections, and the flood from eight loopback addresses (each
    below the per-address cap): the descriptors do run out. Accepting at
    EMFILE neither spins nor fails anything open, the binlog syncs without a
    new descriptor, and once the flood is gone new clients get in again."""
    s = guarded_server(pki, tmp_path, "--max-unauthenticated-per-address", "64")
    ctx = client_context(pki.ca.cert)
    socks = []
    try:
        with client(s.port) as plain, tls_connect(s.tls_port, ctx) as tls:
            assert ask(tls, b"auth %s\r\n" % TOKENS["producer"].encode()) == b"AUTHENTICATED\r\n"
            socks = flood(s.tls_port, FLOOD, ["127.0.0.%d" % i for i in range(2, 10)])
            wait_accepted(s.tls_port)
            assert fds(s) > NOFILE - 10         # out of descriptors, as the node
            assert closed(socks) > 0            # accepted and closed at EMFILE (libuv's spare fd)
            cpu, start = s.cpu(), time.monotonic()
            time.sleep(3)
            used, wall = s.cpu() - cpu, time.monotonic() - start
            print("\nserver CPU with %d silent connections at nofile %d: %.2f s in %.2f s"
                  % (FLOOD, NOFILE, used, wall))
            assert used < wall / 2, "the loop spins: %.2f CPU s in %.2f s" % (used, wall)
            put_and_check(s, plain, tls)
            for sock in socks:
                sock.close()
            socks = []
            deadline = time.monotonic() + 30
            while fds(s) > 100:
                assert time.monotonic() < deadline, "%d descriptors still open" % fds(s)
                time.sleep(0.05)
            # descriptors free again: a new client gets in and is served
            with tls_connect(s.tls_port, ctx) as late:
                assert ask(late, b"auth %s\r\n" % TOKENS["worker"].encode()) == b"AUTHENTICATED\r\n"
                assert ask(late, b"peek 1\r\n", b"p0\r\n") == b"FOUND 1 2\r\np0\r\n"
    finally:
        for sock in socks:
            sock.close()
        s.stop()
    assert s.proc.returncode == 0, s.log


def tls_fails(port, ctx, source="127.0.0.1"):
    """A TLS connection from source that the server closes before its handshake is done."""
    sock = socket.socket()
    sock.settimeout(10)
    try:
        sock.bind((source, 0))
        sock.connect((HOST, port))
        with pytest.raises((ssl.SSLError, ConnectionError)):
            ctx.wrap_socket(sock, server_hostname="localhost")
    finally:
        sock.close()


def test_connections_not_yet_in_are_capped_per_address(pki, tmp_path):
    """--max-unauthenticated-per-address: one address's connections still in
    their handshake or before auth beyond it are closed at accept; another
    address, and a client once it is in, are not held back."""
    mport = free_port()
    s = tls_server(pki.server, "--auth-tokens", tokens_file(tmp_path / "tokens"),
                   "--max-unauthenticated-per-address", "3", "--metrics", str(mport))
    ctx = client_context(pki.ca.cert)
    waiting = []
    try:
        waiting = [tls_connect(s.tls_port, ctx) for _ in range(3)]    # handshake done, no token
        tls_fails(s.tls_port, ctx)
        with socket.create_connection((HOST, s.tls_port), timeout=10) as silent:
            assert silent.recv(10) == b""           # refused at accept: closed, nothing sent
        values = samples(get(mport, "/metrics")[2])[0]
        assert values["fastbean_connections_unauthenticated"] == 3
        assert values["fastbean_connections_refused_unauthenticated_total"] == 2
        with tls_connect_from(s.tls_port, ctx, "127.0.0.2") as other:
            assert ask(other, b"auth %s\r\n" % TOKENS["worker"].encode()) == b"AUTHENTICATED\r\n"
        # one of the three gets in: room for one more from its address
        assert ask(waiting[0], b"auth %s\r\n" % TOKENS["producer"].encode()) == b"AUTHENTICATED\r\n"
        with tls_connect(s.tls_port, ctx) as late:
            assert ask(late, b"auth %s\r\n" % TOKENS["producer"].encode()) == b"AUTHENTICATED\r\n"
        waiting.append(tls_connect(s.tls_port, ctx))   # with the other two: three again
        tls_fails(s.tls_port, ctx)
        assert ask(waiting[0], b"put 0 0 60 2\r\nok\r\n") == b"INSERTED 1\r\n"
        # each time the cap is reached is said once, as each time it clears
        assert s.log.count("127.0.0.1 has 3 connections not yet in") == 2, s.log
        assert s.log.count("127.0.0.1 is below the cap of connections not yet in (3) again") == 1, s.log
    finally:
        for t in waiting:
            t.close()
        s.stop()


def tls_connect_from(port, ctx, source):
    sock = socket.socket()
    sock.settimeout(10)
    sock.bind((source, 0))
    sock.connect((HOST, port))
    return ctx.wrap_socket(sock, server_hostname="localhost")


def test_handshake_and_auth_deadlines_are_flags(pki, tmp_path):
    s = tls_server(pki.server, "--auth-tokens", tokens_file(tmp_path / "tokens"),
                   "--tls-handshake-timeout", "1", "--auth-timeout", "1.5")
    ctx = client_context(pki.ca.cert)
    try:
        with socket.create_connection((HOST, s.tls_port), timeout=30) as silent, \
                tls_connect(s.tls_port, ctx) as mute:
            mute.settimeout(30)
            assert silent.recv(10) == b""           # no handshake: closed
            assert mute.recv(10) == b""             # handshake, no token: closed
        assert "did not authenticate within 1.5s" in s.log
        with tls_connect(s.tls_port, ctx) as t:     # and a client in time gets in
            assert ask(t, b"auth %s\r\n" % TOKENS["worker"].encode()) == b"AUTHENTICATED\r\n"
    finally:
        s.stop()


@pytest.mark.parametrize("args, message", [
    (["--auth-timeout", "0"], "--auth-timeout: between 0 and 86400 seconds"),
    (["--tls-handshake-timeout", "soon"], "invalid --tls-handshake-timeout: soon"),
    (["--max-unauthenticated-per-address", "-1"], "invalid --max-unauthenticated-per-address: -1"),
])
def test_bad_deadlines_and_caps_are_one_line(pki, tmp_path, args, message):
    status, err = start_fails("--tls-listen", "127.0.0.1:1", "--tls-cert", pki.server[0], "--tls-key",
                              pki.server[1], "--auth-tokens", tokens_file(tmp_path / "tokens"), *args)
    assert status == 5 and err.startswith("fastbean: " + message), err
    assert "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    (["--auth-timeout", "5"], "--auth-timeout needs --auth-tokens"),
    (["--tls-handshake-timeout", "5"], "--tls-handshake-timeout needs --tls-cert"),
    (["--max-unauthenticated-per-address", "5"], "--max-unauthenticated-per-address needs --tls-cert"),
])
def test_deadline_flags_without_what_they_time_are_usage_errors(args, message):
    status, err = start_fails(*args)
    assert status == 5 and err.startswith("fastbean: " + message), err
