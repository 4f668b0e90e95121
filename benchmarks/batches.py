"""Consuming jobs with reserve-batch and delete-batch against pipelined single
commands, on fastbean (and the single commands on beanstalkd beside it).

    python -m benchmarks.batches                 # 200,000 jobs per way
    python -m benchmarks.batches --jobs 20000

One client takes every job of a full tube, a round of k jobs at a time (k =
--depth), each round two writes and two reads:

  single   k x reserve-with-timeout 0, then k x delete of the ids they gave
  batch    reserve-batch k, then one delete-batch line of the k ids (a batch
           line may hold 1000, tuber's limit)

The figure is jobs consumed per second (each reserved and deleted), the client
being Python on the same machine; results to benchmarks/results/batches.json.
"""
import argparse
import os
import re
import time

from benchmarks.harness import build_loadgen, loadgen, write_results
from benchmarks.storms import Pipe
from tests.support.servers import Server

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
RESERVED = re.compile(rb"RESERVED (\d+) ")
IDS_PER_LINE = 1000            # the most ids one delete-batch line may hold


def fill(srv, n):
    loadgen(srv.port, "put", conns=4, depth=16, body=10, seconds=0, total=n, tube="default")


def single(pipe, n, k):
    done = 0
    while done < n:
        b = min(k, n - done)
        reply = pipe.exchange(b"reserve-with-timeout 0\r\n" * b, 2 * b)
        ids = RESERVED.findall(reply)
        pipe.exchange(b"".join(b"delete %s\r\n" % i for i in ids), len(ids))
        done += len(ids)


def batch(pipe, n, k):
    done = 0
    while done < n:
        b = min(k, n - done)
        reply = pipe.exchange(b"reserve-batch %d\r\n" % b, 1 + 2 * b)
        ids = RESERVED.findall(reply)
        lines = [b"delete-batch %s\r\n" % b" ".join(ids[i:i + IDS_PER_LINE])
                 for i in range(0, len(ids), IDS_PER_LINE)]
        pipe.exchange(b"".join(lines), len(lines))
        done += len(ids)


def measure(kind, way, n, k):
    with Server(kind).start(600) as srv:
        fill(srv, n)
        pipe = Pipe(srv.port)
        t0 = time.monotonic()
        way(pipe, n, k)
        seconds = time.monotonic() - t0
        left = pipe.tube_stat(b"current-jobs-ready", b"default")
        pipe.close()
    if left:
        raise RuntimeError("%d jobs left" % left)
    return {"jobs": n, "depth": k, "seconds": seconds, "jobs_per_sec": n / seconds}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=200_000)
    ap.add_argument("--depth", type=int, action="append",
                    help="jobs per round (k), repeatable (default: 20 and 1000)")
    ap.add_argument("--json", default=os.path.join(RESULTS, "batches.json"))
    args = ap.parse_args(argv)
    build_loadgen()
    started = time.time()
    results = {}
    for k in args.depth or (20, 1000):
        for kind, name, way in (("beanstalkd", "single", single), ("fastbean", "single", single),
                                ("fastbean", "batch", batch)):
            key = "%s %s k=%d" % (kind, name, k)
            r = results[key] = measure(kind, way, args.jobs, k)
            print("%-24s %8.0f jobs/s  (%d jobs, %.2f s)" % (
                key, r["jobs_per_sec"], r["jobs"], r["seconds"]), flush=True)
        print("fastbean batch / single at k=%d: %.2fx" % (
            k, results["fastbean batch k=%d" % k]["jobs_per_sec"]
            / results["fastbean single k=%d" % k]["jobs_per_sec"]), flush=True)
    write_results(args.json, started, results=results)


if __name__ == "__main__":
    main()
