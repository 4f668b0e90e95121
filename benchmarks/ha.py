"""Replicated group commit against a local fsync per commit, in one run.

    python -m benchmarks.ha                # put c50 d1, put c50 d16, mixed c50 d1; 3 rounds
    python -m benchmarks.ha --reps 1 --seconds 3

Three servers take the same load in turn (A B C A B C ...): beanstalkd -f 0
and fastbean -f 0 with a binlog on this machine's disk, and a fastbean
primary replicating to a three-server NATS JetStream cluster on loopback
(with a standby following). Each measurement gets fresh servers; the
replicated one a stream of its own on the same NATS cluster.

While the replicated primary takes the load, the standby's lag is sampled
every 20 ms: at each sample, how long ago the primary had stored the first
message the standby has not applied yet (0 when it has applied them all).
Every measurement records the CPU steal while it ran; rounds above
harness.STEAL_LIMIT are left out, and the table says how many.
Everything measured goes to benchmarks/results/ha.json.
"""
import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchmarks.harness import STEAL_LIMIT, cpu_times, finish, loadgen, machine, steal, write_results
from tests.support.hanodes import Node, find_primary
from tests.support.natscluster import NatsCluster
from tests.support.servers import Server

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
LAG_EVERY = 0.02            # seconds between samples of the standby's lag

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


class LagSampler(threading.Thread):
    """The stream sequence the primary has stored and the standby applied,
    sampled every LAG_EVERY s until stop()."""

    def __init__(self, primary, standby):
        super().__init__(daemon=True)
        self.primary, self.standby = primary, standby
        self.samples = []       # (time, primary's sequence, standby's sequence)
        self._done = threading.Event()

    def run(self):
        # a standby answers no command: its sequence is on /metrics
        with self.primary.client(10) as p:
            while not self._done.is_set():
                t = time.monotonic()
                ours = p.yaml(b"fastbean-stats")["replication-stream-seq"]
                theirs = self.standby.metrics()["fastbean_replication_stream_sequence"]
                self.samples.append((t, ours, theirs))
                self._done.wait(LAG_EVERY)

    def stop(self):
        self._done.set()
        self.join()

    def lags(self):
        """At each sample, seconds since the primary had stored the first
        message the standby lacked then."""
        out = []
        for t, _, applied in self.samples:
            ahead = next((tp for tp, stored, _ in self.samples if stored > applied), None)
            out.append(max(0.0, t - ahead) if ahead is not None and ahead <= t else 0.0)
        return out


def measure(kind, case, seconds, cluster, work, n):
    workload, conns, depth = case
    t0 = cpu_times()
    if kind == "fastbean replicated":
        stream = "bench%d" % n
        nodes = [Node("%s-%s" % (stream, x), cluster.urls, work, stream=stream) for x in "ab"]
        try:
            primary = find_primary(nodes)
            standby = next(node for node in nodes if node is not primary)
            sampler = LagSampler(primary, standby)
            proc = loadgen(primary.port, workload, conns=conns, depth=depth, body=100,
                           seconds=seconds, warmup=0.5, background=True)
            sampler.start()
            try:
                res = finish(proc)
            finally:
                sampler.stop()
            lags = sorted(sampler.lags())
            res["lag_max_s"] = lags[-1] if lags else 0.0
            res["lag_p99_s"] = lags[min(len(lags) - 1, int(0.99 * len(lags)))] if lags else 0.0
        finally:
            for node in nodes:
                node.stop()
            drop_stream(cluster.urls, stream)
    else:
        name = kind.split()[0]
        with Server(name, "-f", "0", binlog=True).start(600) as server:
            res = loadgen(server.port, workload, conns=conns, depth=depth, body=100,
                          seconds=seconds, warmup=0.5)
    res["steal"] = round(steal(t0, cpu_times()), 3)
    return res


def summarize(runs):
    kept = [r for r in runs if r["steal"] <= STEAL_LIMIT]
    out = {"left_out": len(runs) - len(kept)}
    for k in ("ops_per_sec", "p50_us", "p99_us", "lag_max_s"):
        values = [r[k] for r in kept if k in r]
        if values:
            out[k] = statistics.median(values)
            out[k + "_range"] = (min(values), max(values))
    out["errors"] = sum(r["errors"] for r in runs)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--case", action="append", metavar="WORKLOAD:CLIENTS:DEPTH",
                    help="measure this case (again for more); default: %s" % ", ".join(
                        "%s:%d:%d" % c for c in CASES))
    ap.add_argument("--results", default=os.path.join(RESULTS, "ha.json"))
    args = ap.parse_args(argv)
    cases = CASES
    if args.case:
        try:
            cases = tuple((w, int(c), int(d)) for w, c, d in (x.split(":") for x in args.case))
        except ValueError:
            ap.error("--case: WORKLOAD:CLIENTS:DEPTH, as put:50:1")
    work = tempfile.mkdtemp(prefix="fastbean-ha-")
    cluster = NatsCluster(os.path.join(work, "nats"))
    print(machine(), "nats-server", subprocess.run([cluster.servers[0].proc.args[0], "--version"],
                                                   capture_output=True, text=True).stdout.strip())
    started = time.time()
    runs = {}
    n = 0
    try:
        for _ in range(args.reps):
            for case in cases:
                for kind in KINDS:
                    n += 1
                    res = measure(kind, case, args.seconds, cluster, work, n)
                    runs.setdefault((case, kind), []).append(res)
                    print("  %s c%d d%d  %-20s %8.0f tx/s  steal %.1f%%%s" % (
                        case + (kind, res["ops_per_sec"], 100 * res["steal"],
                                "  standby lag max %.3f s" % res["lag_max_s"] if "lag_max_s" in res else "")),
                        flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("%-16s %-20s %10s %8s %8s %8s %9s   %s" % (
        "case", "server", "tx/s", "p50 us", "p99 us", "errors", "lag max s",
        "vs fastbean -f0 (low-high rounds) / beanstalkd -f0"))
    summary = {}
    for case in cases:
        s = {kind: summarize(runs[(case, kind)]) for kind in KINDS}
        summary["%s c%d d%d" % case] = s
        if any("ops_per_sec" not in r for r in s.values()):
            print("%-16s every round of some server left out for steal" % ("%s c%d d%d" % case))
            continue
        for kind in KINDS:
            r = s[kind]
            ratios = [a["ops_per_sec"] / b["ops_per_sec"]     # round by round: the same noise
                      for a, b in zip(runs[(case, kind)], runs[(case, "fastbean -f0")])
                      if max(a["steal"], b["steal"]) <= STEAL_LIMIT] or [0.0]
            print("%-16s %-20s %10.0f %8.0f %8.0f %8d %9s   %.2fx (%.2f-%.2f) / %.2fx%s" % (
                "%s c%d d%d" % case, kind, r["ops_per_sec"], r["p50_us"], r["p99_us"], r["errors"],
                "%.3f" % r["lag_max_s"] if "lag_max_s" in r else "",
                r["ops_per_sec"] / s["fastbean -f0"]["ops_per_sec"], min(ratios), max(ratios),
                r["ops_per_sec"] / s["beanstalkd -f0"]["ops_per_sec"],
                "; %d left out for steal" % r["left_out"] if r["left_out"] else ""))
    write_results(args.results, started, steal_limit=STEAL_LIMIT,
                  runs={"%s c%d d%d | %s" % (case + (kind,)): r for (case, kind), r in runs.items()},
                  summary=summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
