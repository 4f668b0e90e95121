"""Memory held per job, and memory given back after a drain: fastbean against C beanstalkd.

    python -m benchmarks.memory                 # 1,000,000 jobs of 100 bytes
    python -m benchmarks.memory --jobs 50000

For each server (a fresh process each, no binlog): the RSS of the empty server;
put N jobs of BODY bytes with the load generator, RSS full; reserve and delete
them all, wait a second, RSS drained. RSS per job is (full - empty) / N. The
issue's targets are checked at the end: fastbean's RSS per job at most 1.3x
beanstalkd's, and fastbean's drained RSS at most 1.2 x empty + 10 MB
(beanstalkd keeps what it allocated). The table goes to the terminal, the
figures to benchmarks/results/memory.json.
"""
import argparse
import os
import sys
import time

from benchmarks.harness import build_loadgen, loadgen, stats, write_results
from tests.servers import KINDS, Server

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
MB = 1 << 20


def settle_rss(server, seconds):
    """RSS after letting the server go idle for a moment (frees and trims happen late)."""
    time.sleep(seconds)
    return server.rss()


def live_jobs(st):
    return sum(int(st["current-jobs-" + state]) for state in ("ready", "reserved", "delayed", "buried"))


def measure(kind, jobs, body):
    with Server.start(kind, timeout=600) as server:
        empty = settle_rss(server, 0.5)
        fill = loadgen(server.port, "put", conns=10, depth=16, body=body, seconds=0, total=jobs)
        full = settle_rss(server, 0.2)
        held = int(stats(server.port)["current-jobs-ready"])
        drain = loadgen(server.port, "reserve", conns=10, depth=16, seconds=0, tube="bench")
        drained = settle_rss(server, 1.0)
        left = live_jobs(stats(server.port))
    if fill["errors"] or held != jobs or left:
        sys.exit("%s: fill or drain went wrong (put errors %d, %d of %d jobs held, %d left)"
                 % (kind, fill["errors"], held, jobs, left))
    return {"empty": empty, "full": full, "drained": drained,
            "per_job": (full - empty) / jobs, "drained_over_empty": drained / empty,
            "fill_seconds": fill["seconds"], "drain_seconds": drain["seconds"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--body", type=int, default=100)
    ap.add_argument("--json", default=os.path.join(RESULTS, "memory.json"))
    args = ap.parse_args(argv)
    build_loadgen()

    started = time.time()
    res = {}
    for kind in KINDS:
        res[kind] = measure(kind, args.jobs, args.body)
        print("%-10s done" % kind, file=sys.stderr, flush=True)

    print("\n%d jobs of %d bytes" % (args.jobs, args.body))
    print("%-10s %10s %10s %11s %9s %14s" % ("server", "empty MB", "full MB", "drained MB",
                                             "B/job", "drained/empty"))
    for kind in KINDS:
        r = res[kind]
        print("%-10s %10.1f %10.1f %11.1f %9.1f %13.2fx" % (
            kind, r["empty"] / MB, r["full"] / MB, r["drained"] / MB, r["per_job"],
            r["drained_over_empty"]))

    b, f = res["beanstalkd"], res["fastbean"]
    per_job_ratio = f["per_job"] / b["per_job"]
    drain_limit = 1.2 * f["empty"] + 10 * MB
    targets = [
        {"what": "RSS per job, fastbean / beanstalkd", "value": per_job_ratio, "goal": "<= 1.3x",
         "met": per_job_ratio <= 1.3},
        {"what": "fastbean drained RSS (MB), goal 1.2 x empty + 10 MB", "value": f["drained"] / MB,
         "goal": "<= %.1f MB" % (drain_limit / MB), "met": f["drained"] <= drain_limit},
    ]
    print("\ntargets:")
    for t in targets:
        print("  %-4s %-52s %7.2f  (%s)" % ("ok" if t["met"] else "MISS", t["what"], t["value"],
                                            t["goal"]))

    write_results(args.json, started, jobs=args.jobs, body=args.body, results=res, targets=targets)


if __name__ == "__main__":
    main()
