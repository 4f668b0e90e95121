"""How close the servers come to this machine's ceiling.

    python -m benchmarks.ceiling [--reps 3] [--seconds 2]

Puts with 10 and 50 connections at depth 1, and 50 at depth 16. At depth 1
each command costs a server at least one read and one write on its socket,
and on loopback the kernel's part of those two calls (the TCP stack of both
ends, waking the client) is most of a command's cost. nullserver.c does only
that: it answers puts without keeping them. Its throughput with the same
load generator is the most any server can reach here, so the figures show
how much of it each server keeps, with and without a binlog.

With -b DIR -f 0 the null server also makes each put durable before it
answers, in the cheapest way there is (see nullserver.c: a record per put,
one write per loop turn, fdatasync back to back in a native thread, replies
let out as each sync returns, no queue and no Python). Its -f 0 / no-binlog
ratio is therefore the most of its own speed any server can keep with -f 0 on
this machine with this load generator, and fastbean -f 0 is shown against it.
Results go to results/ceiling.json.
"""
import argparse
import json
import os
import sys

from benchmarks.compare import RESULTS, Case, measure, summarize
from benchmarks.harness import machine

SERVERS = (("nullserver", "off"), ("nullserver", "-f0"), ("beanstalkd", "off"),
           ("beanstalkd", "-f50"), ("beanstalkd", "-f0"),
           ("fastbean", "off"), ("fastbean", "-f50"), ("fastbean", "-f0"))
LOADS = ((10, 1), (50, 1), (50, 16))       # (connections, depth)


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
    for conns, depth in LOADS:
        runs = {label(*s): [] for s in SERVERS}
        for rep in range(args.reps):
            for kind, binlog in SERVERS:        # one of each per round, in turn
                res = measure(kind, Case("put", conns, depth, 100, binlog), args.seconds,
                              args.warmup)
                runs[label(kind, binlog)].append(res)
                print("  put c%d d%d round %d/%d %-18s %9.0f/s" % (
                    conns, depth, rep + 1, args.reps, label(kind, binlog), res["ops_per_sec"]),
                    file=sys.stderr, flush=True)
        summary = {name: summarize(rs) for name, rs in runs.items()}
        spread = {name: (min(r["ops_per_sec"] for r in rs), max(r["ops_per_sec"] for r in rs))
                  for name, rs in runs.items()}
        results.append({"conns": conns, "depth": depth, "runs": runs, "summary": summary,
                        "spread": spread})

    print("put, 100-byte bodies: transactions/s, median (min..max) (server cpu, client cpu)")
    for r in results:
        s = r["summary"]
        null = s["nullserver"]["ops_per_sec"]
        print("c%d d%d" % (r["conns"], r["depth"]))
        for name, v in s.items():
            print("  %-18s %9.0f (%7.0f..%7.0f)  (%.2f, %.2f)  %5.1f%% of nullserver" % (
                name, v["ops_per_sec"], *r["spread"][name], v["server_cpu"], v["client_cpu"],
                100 * v["ops_per_sec"] / null))
        base = s["beanstalkd -f50"]["ops_per_sec"]
        if r["depth"] == 1:
            print("  2x beanstalkd -f50 would be %.0f/s: %.2fx the nullserver's" % (
                2 * base, 2 * base / null))
            print("  20x beanstalkd -f0 would be %.0f/s: %.2fx the nullserver's" % (
                20 * s["beanstalkd -f0"]["ops_per_sec"],
                20 * s["beanstalkd -f0"]["ops_per_sec"] / null))
        print("  fastbean / beanstalkd: %.2fx without a binlog, %.2fx with -f50, %.2fx with -f0" % (
            s["fastbean"]["ops_per_sec"] / s["beanstalkd"]["ops_per_sec"],
            s["fastbean -f50"]["ops_per_sec"] / base,
            s["fastbean -f0"]["ops_per_sec"] / s["beanstalkd -f0"]["ops_per_sec"]))
        null_f0 = s["nullserver -f0"]["ops_per_sec"]
        print("  -f0 / no binlog: nullserver %.2f, fastbean %.2f; fastbean -f0 is %.0f%% of "
              "nullserver -f0" % (null_f0 / null, s["fastbean -f0"]["ops_per_sec"]
                                  / s["fastbean"]["ops_per_sec"],
                                  100 * s["fastbean -f0"]["ops_per_sec"] / null_f0))
        # No server commits more cheaply than the null server: its -f0 rate
        # bounds what any -f0 can reach here.
        print("  at nullserver -f0's rate, fastbean -f0 / no binlog would be %.2f" % (
            null_f0 / s["fastbean"]["ops_per_sec"]))
        if r["depth"] == 1:
            print("  20x beanstalkd -f0 would be %.2fx nullserver -f0's rate" % (
                20 * s["beanstalkd -f0"]["ops_per_sec"] / null_f0))
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"machine": machine(), "reps": args.reps, "seconds": args.seconds,
                   "results": results}, f, indent=1)
    print("wrote", args.json)


if __name__ == "__main__":
    main()
