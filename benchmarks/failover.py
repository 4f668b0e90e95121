"""Failover through HAProxy: time from SIGKILL of the primary to the first put
that HAProxy's clients get accepted again, over many takeovers.

    python -m benchmarks.failover                    # 20 takeovers, default lease
    python -m benchmarks.failover --lease-ttl 2 --takeovers 5
    python -m benchmarks.failover --jobs 1000000     # with a large queue

Three nats-server processes clustered on loopback, three fastbean nodes
(--replicate), HAProxy with contrib/haproxy/haproxy.cfg. After each kill the
killed node comes back as a standby. With --jobs the queue is filled first,
and the new primaries' logs say how long placing the replayed jobs took.
"""
import argparse
import os
import re
import shutil
import statistics
import tempfile
import time

from benchmarks.harness import loadgen
from tests.support.hanodes import Haproxy, Node, find_primary
from tests.support.natscluster import NatsCluster


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--takeovers", type=int, default=20)
    ap.add_argument("--lease-ttl", type=float, default=None, help="fastbean's --lease-ttl")
    ap.add_argument("--jobs", type=int, default=0, help="jobs in the queue at each takeover")
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="fastbean-failover-")
    cluster = NatsCluster(os.path.join(work, "nats"))
    extra = ["--lease-ttl", args.lease_ttl] if args.lease_ttl else []
    nodes = [Node(name, cluster.urls, work, *extra) for name in ("a", "b", "c")]
    proxy = Haproxy(nodes, work)
    times, finishes = [], []
    try:
        primary = find_primary(nodes)
        proxy.settle()
        if args.jobs:
            loadgen(primary.port, "put", conns=10, depth=16, body=100, seconds=0, total=args.jobs)
        for n in range(args.takeovers):
            proxy.put_until_accepted(b"before")
            time.sleep(1.0)
            primary.kill()
            t0 = time.monotonic()
            proxy.put_until_accepted(b"after", timeout=120)
            times.append(time.monotonic() - t0)
            new = find_primary(nodes, exclude=(primary,))
            took = re.findall(r"placing the jobs took ([0-9.]+) s", new.log[-4000:])
            finishes.append(float(took[-1]) if took else float("nan"))
            print("takeover %2d: %s -> %s  %.2f s  (placing %s jobs: %.3f s)" % (
                n + 1, primary.name, new.name, times[-1], args.jobs or "the", finishes[-1]),
                flush=True)
            primary.start()
            primary = new
            time.sleep(2.0 if not args.jobs else 5.0)       # the restarted node catches up
    finally:
        proxy.stop()
        for node in nodes:
            node.stop()
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("kill -> first accepted put through HAProxy over %d takeovers: median %.2f s, "
          "worst %.2f s, best %.2f s; placing the jobs at takeover: median %.3f s" % (
              len(times), statistics.median(times), max(times), min(times),
              statistics.median(finishes)))


if __name__ == "__main__":
    main()
