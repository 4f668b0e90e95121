"""What an unauthenticated peer costs the server: memory (RSS) and descriptors
per idle connection to a TLS listener with --auth-tokens, in the two states a
peer can hold one in without a token:

  silent       TCP connected, nothing sent
  hello        the start of a ClientHello sent, then nothing (the TLS layer is made)
  handshaken   TLS handshake done, no `auth` sent

For each state a fresh server (no per-address cap and deadlines long enough
to hold the connections; the caps themselves are what docs/tls.md's threat
model multiplies these figures by), N connections spread over loopback
source addresses, its VmRSS from /proc before they come and once they are
all accepted, and its CPU time over --idle seconds while they sit there.
Repeated --reps times; the median and the spread of the bytes per connection.

    python -m benchmarks.preauth [--connections 2000] [--reps 3] [--idle 5]
"""
import argparse
import hashlib
import os
import socket
import ssl
import statistics
import sys
import tempfile
import time

from tests.support.certs import Pki
from tests.support.servers import HOST, Server, free_port

SOURCES = ["127.0.0.%d" % i for i in range(2, 34)]
HELLO_START = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"    # a TLS record, a ClientHello's first bytes


def rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS for %d" % pid)


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def accept_queue(port):
    local = "0100007F:%04X" % port
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[1] == local and fields[3] == "0A":
                return int(fields[4].split(":")[1], 16)
    return 0


def start(pki, directory):
    tokens = os.path.join(directory, "tokens")
    with open(tokens, "w") as f:
        f.write("bench %s\n" % hashlib.sha256(b"bench-token").hexdigest())
    port = free_port()
    s = Server("fastbean", "--tls-listen", "%s:%d" % (HOST, port), "--tls-cert", pki.server[0],
               "--tls-key", pki.server[1], "--auth-tokens", tokens, "--max-unauthenticated-per-address", "0",
               "--tls-handshake-timeout", "3600", "--auth-timeout", "3600").start()
    s.tls_port = port
    return s


def connect(port, n, state, ctx):
    conns = []
    for i in range(n):
        sock = socket.socket()
        sock.bind((SOURCES[i % len(SOURCES)], 0))
        sock.connect((HOST, port))
        if state == "hello":
            sock.sendall(HELLO_START)
        conns.append(ctx.wrap_socket(sock, server_hostname="localhost") if state == "handshaken" else sock)
    return conns


def one(pki, directory, state, n, idle):
    s = start(pki, directory)
    conns = []
    try:
        time.sleep(0.5)
        before, fds_before = rss(s.pid), fds(s.pid)
        conns = connect(s.tls_port, n, state, ssl.create_default_context(cafile=pki.ca.cert))
        while accept_queue(s.tls_port):
            time.sleep(0.05)
        time.sleep(0.5)
        after, fds_after = rss(s.pid), fds(s.pid)
        cpu = s.cpu()
        time.sleep(idle)
        cpu = s.cpu() - cpu
        return (after - before) / n, (fds_after - fds_before) / n, cpu
    finally:
        for c in conns:
            c.close()
        s.stop()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--connections", type=int, default=2000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--idle", type=float, default=5.0)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fastbean-preauth-") as directory:
        pki = Pki(directory)
        for state in ("silent", "hello", "handshaken"):
            runs = [one(pki, directory, state, args.connections, args.idle) for _ in range(args.reps)]
            per = sorted(r[0] for r in runs)
            print("%-10s %5d connections: %6.1f KiB RSS each (median of %d; %.1f-%.1f), "
                  "%.2f descriptors each, %.2f CPU s in %g s idle (max)"
                  % (state, args.connections, statistics.median(per) / 1024, len(runs), per[0] / 1024,
                     per[-1] / 1024, max(r[1] for r in runs), max(r[2] for r in runs), args.idle))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
