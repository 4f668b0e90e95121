"""Replicated group commit against a local fsync per commit, in one run.

    python -m benchmarks.ha                # put c50 d1, put c50 d16, mixed c50 d1; 3 rounds
    python -m benchmarks.ha --reps 1 --seconds 3
    python -m benchmarks.ha --rtt-ms 2     # the nodes' links to NATS 2 ms longer

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

It also records where the CPU went, from the end of the warm-up to the end:
CPU microseconds per transaction in each process (the NATS servers together,
the primary, the standby, the load generator; the server alone for -f 0),
and how busy the machine's CPUs were. A case whose CPUs were busy near 100%
is bound by this machine's cores, and the sum of the per-transaction costs
gives the rate those cores could reach at most: the CPU ceiling.

--rtt-ms adds a round trip to the nodes' links to NATS (not the NATS
servers' links to one another), through benchmarks/delayproxy.c: this
machine's kernel has no netem. It shows what one publish in flight costs
where NATS is a network away.
Everything measured goes to benchmarks/results/ha.json.
"""
import argparse
import asyncio
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchmarks.harness import (
    STEAL_LIMIT,
    build_tool,
    busy_seconds,
    cpu_times,
    finish,
    loadgen,
    machine,
    steal,
    write_results,
)
from tests.support.hanodes import Node, find_primary
from tests.support.natscluster import NatsCluster
from tests.support.servers import Server, free_port, process_cpu

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


class DelayProxy:
    """benchmarks/delayproxy.c in front of each NATS server's client port:
    rtt_ms more for a request and its answer."""

    def __init__(self, cluster, rtt_ms):
        self.ports = [free_port() for _ in cluster.servers]
        self.proc = subprocess.Popen(
            [build_tool("delayproxy"), "-d", str(int(rtt_ms * 500))]
            + ["%d:%d" % (mine, s.port) for mine, s in zip(self.ports, cluster.servers)],
            stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            self.proc.kill()
            raise RuntimeError("delayproxy did not start")

    @property
    def urls(self):
        return ",".join("nats://127.0.0.1:%d" % port for port in self.ports)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


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

    def messages(self, began, ended):
        """How many messages the primary stored between two monotonic times."""
        within = [stored for t, stored, _ in self.samples if began <= t <= ended]
        return within[-1] - within[0] if len(within) > 1 else 0

    def lags(self):
        """At each sample, seconds since the primary had stored the first
        message the standby lacked then."""
        out = []
        for t, _, applied in self.samples:
            ahead = next((tp for tp, stored, _ in self.samples if stored > applied), None)
            out.append(max(0.0, t - ahead) if ahead is not None and ahead <= t else 0.0)
        return out


WARMUP = 0.5


class CpuAccount:
    """CPU seconds each named group of processes, the load generator and the
    whole machine use from start() (the end of the warm-up) to stop()."""

    def __init__(self, groups, loadgen_proc):
        self.groups, self.loadgen = groups, loadgen_proc    # {name: [pid, ...]}, a Popen

    def start(self):
        self._machine = cpu_times()
        self._wall = time.monotonic()
        self._procs = {name: sum(process_cpu(pid) for pid in pids) for name, pids in self.groups.items()}
        self._loadgen = process_cpu(self.loadgen.pid)
        self._children = resource.getrusage(resource.RUSAGE_CHILDREN)

    def stop(self):
        """Once the load generator has exited and been waited for (nothing else
        the benchmark started may be waited for in between)."""
        self.began, self.ended = self._wall, time.monotonic()
        self.wall = self.ended - self.began
        self.machine_busy = busy_seconds(self._machine, cpu_times())
        self.procs = {name: sum(process_cpu(pid) for pid in pids) - self._procs[name]
                      for name, pids in self.groups.items()}
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.procs["loadgen"] = (children.ru_utime + children.ru_stime - self._children.ru_utime
                                 - self._children.ru_stime - self._loadgen)

    def result(self, transactions):
        """CPU µs per transaction by process group, and the machine's share busy."""
        per = {name: round(1e6 * s / transactions, 1) for name, s in self.procs.items()}
        per["other"] = round(1e6 * (self.machine_busy - sum(self.procs.values())) / transactions, 1)
        return {"cpu_us_per_tx": per,
                "cpu_busy": round(self.machine_busy / (self.wall * os.cpu_count()), 3)}


def run_load(port, workload, conns, depth, seconds, groups):
    """The load generator against port, with the CPU of groups accounted after
    the warm-up."""
    proc = loadgen(port, workload, conns=conns, depth=depth, body=100, seconds=seconds,
                   warmup=WARMUP, background=True)
    account = CpuAccount(groups, proc)
    time.sleep(WARMUP)
    account.start()
    res = finish(proc)
    account.stop()
    res.update(account.result(max(1.0, res["ops_per_sec"] * seconds)))
    res["measured_from"], res["measured_to"] = account.began, account.ended
    return res


def measure(kind, case, seconds, cluster, work, n, urls, extra_pids):
    workload, conns, depth = case
    t0 = cpu_times()
    if kind == "fastbean replicated":
        stream = "bench%d" % n
        nodes = [Node("%s-%s" % (stream, x), urls, work, stream=stream) for x in "ab"]
        try:
            primary = find_primary(nodes)
            standby = next(node for node in nodes if node is not primary)
            sampler = LagSampler(primary, standby)
            sampler.start()
            try:
                groups = {"nats": [s.proc.pid for s in cluster.servers],
                          "primary": [primary.pid], "standby": [standby.pid]}
                if extra_pids:
                    groups["delayproxy"] = extra_pids
                res = run_load(primary.port, workload, conns, depth, seconds, groups)
            finally:
                sampler.stop()
            messages = sampler.messages(res.pop("measured_from"), res.pop("measured_to"))
            if messages:    # how many transactions one message carried, on average
                res["tx_per_message"] = round(res["ops_per_sec"] * seconds / messages, 1)
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
            res = run_load(server.port, workload, conns, depth, seconds, {"server": [server.pid]})
            del res["measured_from"], res["measured_to"]
    res["steal"] = round(steal(t0, cpu_times()), 3)
    return res


def summarize(runs):
    kept = [r for r in runs if r["steal"] <= STEAL_LIMIT]
    out = {"left_out": len(runs) - len(kept)}
    for k in ("ops_per_sec", "p50_us", "p99_us", "lag_max_s", "tx_per_message"):
        values = [r[k] for r in kept if k in r]
        if values:
            out[k] = statistics.median(values)
            out[k + "_range"] = (min(values), max(values))
    out["errors"] = sum(r["errors"] for r in runs)
    if kept:
        out["cpu_busy"] = statistics.median(r["cpu_busy"] for r in kept)
        out["cpu_us_per_tx"] = {name: statistics.median(r["cpu_us_per_tx"][name] for r in kept)
                                for name in kept[0]["cpu_us_per_tx"]}
        total = sum(out["cpu_us_per_tx"].values())
        out["cpu_ceiling_tx_per_sec"] = round(os.cpu_count() * 1e6 / total) if total > 0 else None
    return out


def print_cpu(summary):
    """Where the CPU went, case by case."""
    print("\nCPU per transaction (µs, medians of the rounds kept), and the machine's CPUs busy")
    for case, kinds in summary.items():
        for kind, r in kinds.items():
            if "cpu_us_per_tx" not in r:
                continue
            parts = "  ".join("%s %.1f" % kv for kv in r["cpu_us_per_tx"].items())
            if "tx_per_message" in r:
                parts += "   (%.1f transactions a message)" % r["tx_per_message"]
            print("%-16s %-20s busy %3.0f%%  ceiling %8s tx/s   %s" % (
                case, kind, 100 * r["cpu_busy"], r["cpu_ceiling_tx_per_sec"], parts))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--case", action="append", metavar="WORKLOAD:CLIENTS:DEPTH",
                    help="measure this case (again for more); default: %s" % ", ".join(
                        "%s:%d:%d" % c for c in CASES))
    ap.add_argument("--rtt-ms", type=float, default=0.0,
                    help="add this round trip (ms) to the nodes' links to NATS")
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
    proxy = DelayProxy(cluster, args.rtt_ms) if args.rtt_ms > 0 else None
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
                    res = measure(kind, case, args.seconds, cluster, work, n,
                                  proxy.urls if proxy else cluster.urls,
                                  [proxy.proc.pid] if proxy else [])
                    runs.setdefault((case, kind), []).append(res)
                    print("  %s c%d d%d  %-20s %8.0f tx/s  steal %.1f%%%s" % (
                        case + (kind, res["ops_per_sec"], 100 * res["steal"],
                                "  standby lag max %.3f s" % res["lag_max_s"] if "lag_max_s" in res else "")),
                        flush=True)
    finally:
        if proxy:
            proxy.stop()
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
    print_cpu(summary)
    write_results(args.results, started, steal_limit=STEAL_LIMIT, rtt_ms=args.rtt_ms,
                  runs={"%s c%d d%d | %s" % (case + (kind,)): r for (case, kind), r in runs.items()},
                  summary=summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
