"""Unauthenticated peers against a node at a low descriptor limit (issue 35,
defect 1): silent TCP connections to a TLS listener with --auth-tokens, more
of them than the process may open files. Real server processes under
`prlimit --nofile`, real sockets, real TLS clients."""
import errno
import socket
import time

import pytest

from tests.certs import Pki
from tests.servers import HOST, client
from tests.test_auth import TOKENS, tokens_file
from tests.test_tls import ask, client_context, tls_connect, tls_server

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
    import os
    return len(os.listdir("/proc/%d/fd" % server.pid))


def put_and_check(server, plain, tls, puts=20):
    """puts on connections opened before the flood, plain and TLS, each
    acknowledged (-f 0: once on disk); then every job acknowledged is there,
    and the server serves and did not fail-stop."""
    ids = []
    for i in range(puts):
        ids.append(plain.put(b"p%d" % i))
        reply = ask(tls, b"put 0 0 60 2\r\nt%d\r\n" % (i % 10))
        assert reply.startswith(b"INSERTED "), reply
        ids.append(int(reply.split()[1]))
    for jid in ids:
        assert plain.stats_job(jid)["state"] == "ready"
    assert plain.stats()["current-jobs-ready"] == len(ids)
    assert server.running
    assert "fail-stop" not in server.log and "binlog-error" not in server.log, server.log
    return ids


def test_silent_connections_at_the_connection_cap_cost_nothing_open(pki, tmp_path):
    """The issue's reproduction: 420 silent TCP connections to the TLS port of
    a node with --max-connections 50 and 400 descriptors, then puts on
    connections opened before. Connections count from accept, so those beyond
    the cap are closed at once; the puts are acknowledged and on disk."""
    s = guarded_server(pki, tmp_path, "--max-connections", "50")
    ctx = client_context(pki.ca.cert)
    socks = []
    try:
        with client(s.port) as plain, tls_connect(s.tls_port, ctx) as tls:
            assert ask(tls, b"auth %s\r\n" % TOKENS["producer"].encode()) == b"AUTHENTICATED\r\n"
            socks = flood(s.tls_port, FLOOD)
            wait_accepted(s.tls_port)
            # two clients are in: 48 of the silent ones are left their handshake
            wait_closed(socks, FLOOD - 48)
            assert fds(s) < NOFILE - 300
            put_and_check(s, plain, tls)
        assert "connection limit (50) reached" in s.log
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
            # descriptors free again: a new client gets in and is served
            with tls_connect(s.tls_port, ctx) as late:
                assert ask(late, b"auth %s\r\n" % TOKENS["worker"].encode()) == b"AUTHENTICATED\r\n"
                assert ask(late, b"peek 1\r\n", b"p0\r\n") == b"FOUND 1 2\r\np0\r\n"
    finally:
        for sock in socks:
            sock.close()
        s.stop()
    assert s.proc.returncode == 0, s.log
