"""Several listeners at once (--listen, --tls-listen beside -l/-p): IPv4, IPv6,
a UNIX socket and TLS serving one queue, in real server processes."""
import socket
import subprocess
import sys

import pytest

from tests.support.servers import HOST, Client, Server, free_port, wait_listening

pytestmark = pytest.mark.timeout(60)


def ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_ipv4_ipv6_and_a_unix_socket_serve_one_queue(tmp_path):
    path = str(tmp_path / "fastbean.sock")
    flags = ["--listen", "unix:" + path]
    addresses = [path]
    if ipv6_loopback():
        port6 = free_port("::1")
        flags += ["--listen", "[::1]:%d" % port6]
        addresses.append(("::1", port6))
    s = Server("fastbean", *flags).start()         # with -l 127.0.0.1 -p PORT
    try:
        addresses.append(s.address)
        for n, address in enumerate(addresses, 1):
            with Client(address) as c:
                assert c.put(b"from %d" % n) == n
        with Client(addresses[0]) as c:
            assert c.stats()["current-jobs-ready"] == len(addresses)
            assert c.peek(len(addresses)) == b"from %d" % len(addresses)
    finally:
        s.stop()
    assert s.log.count("listening on") == len(addresses)
    assert "listening on unix:%s" % path in s.log


def test_listen_alone_replaces_the_default_listener():
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "fastbean", "--listen", "%s:%d" % (HOST, port)],
                         stderr=subprocess.PIPE)
    try:
        wait_listening(port, p)
        with Client((HOST, port)) as c:
            assert c.cmd(b"list-tube-used") == b"USING default"
    finally:
        p.terminate()
        p.wait(10)
    log = p.stderr.read().decode()
    assert log.count("listening on") == 1 and "listening on %s:%d" % (HOST, port) in log, log


def run(*args):
    p = subprocess.run([sys.executable, "-m", "fastbean", *map(str, args)], capture_output=True,
                       text=True, timeout=30)
    return p.returncode, p.stderr


def test_a_taken_address_stops_the_start_and_says_which_flag():
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        status, err = run("-p", free_port(), "--listen", "%s:%d" % (HOST, port))
    assert status == 111, err
    assert "--listen: bind %s port %d: Address already in use" % (HOST, port) in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("value", ["11300", "host", "[::1]", "::1:11300", "unix:"])
def test_malformed_listen_addresses_are_usage_errors(value):
    status, err = run("--listen", value)
    assert status == 5 and err.startswith("fastbean: ") and "--listen" in err.splitlines()[0], err
