"""How close the servers come to this machine's ceiling at depth 1.

    python -m benchmarks.ceiling [--reps 3] [--seconds 2]

At depth 1 each command costs a server at least one read and one write on its
socket, and on loopback the kernel's part of those two calls (the TCP stack of
both ends, waking the client) is most of a command's cost. nullserver.c does
only that: it answers puts without keeping them. Its throughput with the same
load generator is the most any server can reach here, so the figures show
how much of it each server keeps, with and without a binlog (default policy).
Results go to results/ceiling.json.
"""
import argparse
import json
import os
import sys

from benchmarks.compare import RESULTS, Case, measure, summarize
from benchmarks.harness import machine

SERVERS = (("nullserver", "off"), ("beanstalkd", "off"), ("beanstalkd", "-f50"),
           ("fastbean", "off"), ("fastbean", "-f50"))
CONNS = (10, 50)


def label(kind, binlog):
    return kind if binlog == "off" else "%s %s" % (kind, binlog)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--seconds", type=float, default=2.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=0.3, help="unmeasured seconds first")
    ap.add_argument("--json", default=os.path.join(RESULTS, "ceiling.json"))
    args = ap.parse_args(argv)

    results = []
    for conns in CONNS:
        runs = {label(*s): [] for s in SERVERS}
        for rep in range(args.reps):
            for kind, binlog in SERVERS:        # one of each per round, in turn
                res = measure(kind, Case("put", conns, 1, 100, binlog), args.seconds, args.warmup)
                runs[label(kind, binlog)].append(res)
                print("  put c%d d1 round %d/%d %-18s %9.0f/s" % (
                    conns, rep + 1, args.reps, label(kind, binlog), res["ops_per_sec"]),
                    file=sys.stderr, flush=True)
        summary = {name: summarize(rs) for name, rs in runs.items()}
        results.append({"conns": conns, "runs": runs, "summary": summary})

    print("put, depth 1, 100-byte bodies: transactions/s (server cpu, client cpu)")
    for r in results:
        s = r["summary"]
        null = s["nullserver"]["ops_per_sec"]
        print("c%d" % r["conns"])
        for name, v in s.items():
            print("  %-18s %9.0f  (%.2f, %.2f)  %5.1f%% of nullserver" % (
                name, v["ops_per_sec"], v["server_cpu"], v["client_cpu"],
                100 * v["ops_per_sec"] / null))
        base = s["beanstalkd -f50"]["ops_per_sec"]
        print("  2x beanstalkd -f50 would be %.0f/s: %.2fx the nullserver's" % (2 * base, 2 * base / null))
        print("  fastbean / beanstalkd: %.2fx without a binlog, %.2fx with -f50" % (
            s["fastbean"]["ops_per_sec"] / s["beanstalkd"]["ops_per_sec"],
            s["fastbean -f50"]["ops_per_sec"] / base))
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"machine": machine(), "reps": args.reps, "seconds": args.seconds,
                   "results": results}, f, indent=1)
    print("wrote", args.json)


if __name__ == "__main__":
    main()
