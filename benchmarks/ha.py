"""Replicated group commit against a local fsync per commit, in one run.

    python -m benchmarks.ha                # put c50 d1, put c50 d16, mixed c50 d1; 3 rounds
    python -m benchmarks.ha --reps 1 --seconds 3

Three servers take the same load in turn (A B C A B C ...): beanstalkd -f 0
and fastbean -f 0 with a binlog on this machine's disk, and a fastbean
primary replicating to a three-server NATS JetStream cluster on loopback
(with a standby following). Each measurement gets fresh servers; the
replicated one a stream of its own on the same NATS cluster.
"""
import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile

from benchmarks.harness import loadgen, machine
from tests.support.hanodes import Node, find_primary
from tests.support.natscluster import NatsCluster
from tests.support.servers import Server

CASES = (("put", 50, 1), ("put", 50, 16), ("mixed", 50, 1))
KINDS = ("beanstalkd -f0", "fastbean -f0", "fastbean replicated")


def drop_stream(urls, name):
    import nats

    async def drop():
        nc = await nats.connect(servers=urls.split(","))
        try:
            js = nc.jetstream()
            for stream in (name, "KV_%s-lease" % name):
                await js.delete_stream(stream)
        finally:
            await nc.close()
    asyncio.run(drop())


def measure(kind, case, seconds, cluster, work, n):
    workload, conns, depth = case
    if kind == "fastbean replicated":
        stream = "bench%d" % n
        nodes = [Node("%s-%s" % (stream, x), cluster.urls, work, stream=stream) for x in "ab"]
        try:
            primary = find_primary(nodes)
            res = loadgen(primary.port, workload, conns=conns, depth=depth, body=100,
                          seconds=seconds, warmup=0.5)
        finally:
            for node in nodes:
                node.stop()
            drop_stream(cluster.urls, stream)
        return res
    name = kind.split()[0]
    with Server(name, "-f", "0", binlog=True).start(600) as server:
        return loadgen(server.port, workload, conns=conns, depth=depth, body=100,
                       seconds=seconds, warmup=0.5)


def summarize(runs):
    out = {k: statistics.median(r[k] for r in runs) for k in ("ops_per_sec", "p50_us", "p99_us")}
    out["errors"] = sum(r["errors"] for r in runs)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="fastbean-ha-")
    cluster = NatsCluster(os.path.join(work, "nats"))
    print(machine(), "nats-server", subprocess.run([cluster.servers[0].proc.args[0], "--version"],
                                                   capture_output=True, text=True).stdout.strip())
    runs = {}
    n = 0
    try:
        for _ in range(args.reps):
            for case in CASES:
                for kind in KINDS:
                    n += 1
                    res = measure(kind, case, args.seconds, cluster, work, n)
                    runs.setdefault((case, kind), []).append(res)
                    print("  %s c%d d%d  %-20s %8.0f tx/s" % (case + (kind, res["ops_per_sec"])),
                          flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("%-16s %-20s %10s %8s %8s %8s   %s" % ("case", "server", "tx/s", "p50 us", "p99 us",
                                                 "errors", "vs fastbean -f0 / beanstalkd -f0"))
    for case in CASES:
        s = {kind: summarize(runs[(case, kind)]) for kind in KINDS}
        for kind in KINDS:
            r = s[kind]
            print("%-16s %-20s %10.0f %8.0f %8.0f %8d   %.2fx / %.2fx" % (
                "%s c%d d%d" % case, kind, r["ops_per_sec"], r["p50_us"], r["p99_us"], r["errors"],
                r["ops_per_sec"] / s["fastbean -f0"]["ops_per_sec"],
                r["ops_per_sec"] / s["beanstalkd -f0"]["ops_per_sec"]))


if __name__ == "__main__":
    main()
