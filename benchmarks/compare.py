"""fastbean against C beanstalkd, same workloads, same machine, one run.

    python -m benchmarks.compare                  # the standard suite, 3 rounds
    python -m benchmarks.compare --suite quick    # a few cases, 1 round
    python -m benchmarks.compare --suite full     # every combination
    python -m benchmarks.compare --suite durable  # the binlog policies against no binlog
    python -m benchmarks.compare --only put --reps 5
    python -m benchmarks.compare --suite quick --reps 3 --baseline ../old-checkout

--baseline DIR runs fastbean from another checkout (its extensions built in
place) where beanstalkd would run: a before/after of a change, ratios new/old.

Every measurement gets a fresh server; the two servers alternate (A B A B A B)
so that drift on a shared machine hits both alike. Throughput is in
transactions per second (a put; a reserve and its delete; a put, reserve and
delete), latencies are per transaction, as the load generator (loadgen.c)
reports them. For each case the table shows the medians over the rounds and
the fastbean / beanstalkd ratio; server CPU is in cores (1.00 = one full core).
Results go to a JSON file and a PNG chart of the ratios, and the issue's
targets are checked at the end.
"""
import argparse
import datetime
import itertools
import json
import os
import statistics
import sys
import time

from benchmarks.harness import build_loadgen, loadgen, machine
from tests.support.servers import KINDS, Server

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

WORKLOADS = ("put", "reserve", "roundtrip", "mixed")
BINLOG = {                      # name -> server flags
    "off": None,
    "-F": ["-F"],
    "-f50": [],                 # beanstalkd's default policy
    "-f0": ["-f", "0"],
}


class Case:
    def __init__(self, workload, conns, depth, body, binlog="off"):
        self.workload, self.conns, self.depth, self.body, self.binlog = (
            workload, conns, depth, body, binlog)

    @property
    def name(self):
        size = "16K" if self.body == 16384 else "%dB" % self.body
        return "%s c%d d%d %s %s" % (self.workload, self.conns, self.depth, size, self.binlog)

    def as_dict(self):
        return {"workload": self.workload, "conns": self.conns, "depth": self.depth,
                "body": self.body, "binlog": self.binlog}


def suite(name):
    """The cases of a suite, in the order they run."""
    cases = []
    if name == "quick":
        for w in WORKLOADS:
            cases.append(Case(w, 10, 1, 100))
        cases += [Case("put", 10, 16, 100), Case("mixed", 10, 16, 100),
                  Case("put", 50, 1, 100, "-f0")]
        return cases
    if name == "durable":
        return [Case("put", 50, 1, 100, bl) for bl in ("off", "-f0", "-f50")] + \
            [Case("put", 50, 16, 100, bl) for bl in ("off", "-f0")] + \
            [Case("put", 10, 1, 100, bl) for bl in ("off", "-f0")]
    if name == "full":
        for w, c, d, b, bl in itertools.product(WORKLOADS, (1, 10, 50, 1000), (1, 16),
                                                (100, 16384), ("off", "-f50", "-f0")):
            cases.append(Case(w, c, d, b, bl))
        return cases
    # standard: every workload at every connection count and depth with small
    # bodies; large bodies at 10 connections; the binlog policies where they matter.
    for w, c, d in itertools.product(WORKLOADS, (1, 10, 50, 1000), (1, 16)):
        cases.append(Case(w, c, d, 100))
    for w, d in itertools.product(WORKLOADS, (1, 16)):
        cases.append(Case(w, 10, d, 16384))
    for w, c, bl in itertools.product(("put", "roundtrip", "mixed"), (10, 50), ("-F", "-f50", "-f0")):
        cases.append(Case(w, c, 1, 100, bl))
    for bl in ("-F", "-f50", "-f0"):
        cases.append(Case("put", 50, 16, 100, bl))
    return cases


def prefill_count(case, seconds):
    """Jobs to put before a reserve run: enough for the run, at most ~4 GB of bodies
    (16 KiB jobs are reserved at up to 100,000/s)."""
    per_second = 700_000 if case.depth > 1 else 300_000
    return max(1000, min(int(per_second * seconds), (4 << 30) // (case.body + 200)))


def measure(kind, case, seconds, warmup, baseline=None):
    """One fresh server, one run of the load generator; the result as a dict.
    kind "baseline": fastbean from the checkout `baseline`."""
    flags = BINLOG[case.binlog]
    saved = os.environ.get("FASTBEAN_CMD")
    if kind == "baseline":
        # -m puts the working directory first on sys.path, ahead of PYTHONPATH:
        # started from this checkout, it would run this checkout's fastbean
        where = os.path.abspath(baseline)
        os.environ["FASTBEAN_CMD"] = "env -C %s PYTHONPATH=%s %s -m fastbean" % (where, where, sys.executable)
        kind = "fastbean"
    try:
        server = Server(kind, *(flags or ()), binlog=True if flags is not None else None).start(600)
    finally:
        if saved is None:
            os.environ.pop("FASTBEAN_CMD", None)
        else:
            os.environ["FASTBEAN_CMD"] = saved
    with server:
        conns = max(2, case.conns) if case.workload == "mixed" else case.conns
        if case.workload == "reserve":
            loadgen(server.port, "put", conns=10, depth=16, body=case.body, seconds=0,
                    total=prefill_count(case, seconds + warmup))
        cpu0, t0 = server.cpu(), time.monotonic()
        res = loadgen(server.port, case.workload, conns=conns, depth=case.depth, body=case.body,
                      seconds=seconds, warmup=warmup)
        wall = time.monotonic() - t0
        res["server_cpu"] = (server.cpu() - cpu0) / wall
        res["client_cpu"] = res["client_cpu_sec"] / wall
        res["server_rss"] = server.rss()
    return res


def summarize(runs):
    """Medians over the rounds."""
    keys = ("ops_per_sec", "p50_us", "p99_us", "max_us", "server_cpu", "client_cpu")
    out = {k: statistics.median(r[k] for r in runs) for k in keys}
    out["errors"] = sum(r["errors"] for r in runs)
    return out


def ratio(a, b):
    return a / b if b else float("nan")


def header(kinds):
    return "%-26s %11s %11s %6s  %15s  %15s  %11s %11s" % (
        "case", kinds[0], kinds[1], "ratio", "p50 us (%s / f)" % kinds[0][0], "p99 us (%s / f)" % kinds[0][0],
        "srv cpu", "client cpu")


def row(case, s, other="beanstalkd"):
    b, f = s[other], s["fastbean"]
    flag = "  ERRORS" if b["errors"] or f["errors"] else ""
    return "%-26s %11.0f %11.0f %5.2fx  %7.0f /%6.0f  %7.0f /%6.0f  %4.2f / %4.2f %4.2f / %4.2f%s" % (
        case.name, b["ops_per_sec"], f["ops_per_sec"], ratio(f["ops_per_sec"], b["ops_per_sec"]),
        b["p50_us"], f["p50_us"], b["p99_us"], f["p99_us"], b["server_cpu"], f["server_cpu"],
        b["client_cpu"], f["client_cpu"], flag)


# What a binlog policy may cost: fastbean with it / fastbean without a
# binlog, same workload, same run (workload, conns, depth, policy, goal).
DURABLE_GOALS = (("put", 50, 1, "-f0", 0.8), ("put", 50, 16, "-f0", 0.9),
                 ("put", 50, 1, "-f50", 0.95), ("put", 10, 1, "-f0", 0.6))


def check_targets(results):
    """The issues' targets, each as (what, measured ratio, goal, met)."""
    checks = []

    def add(what, value, goal, higher=True):
        checks.append((what, value, goal, value >= goal if higher else value <= goal))

    for r in results:
        c, s = r["case"], r["summary"]
        b, f = s["beanstalkd"], s["fastbean"]
        thr = ratio(f["ops_per_sec"], b["ops_per_sec"])
        name = Case(**c).name
        if c["binlog"] == "off" and c["body"] == 100:
            if c["depth"] == 1 and c["conns"] in (10, 50):
                add("throughput " + name, thr, 1.1)
            if c["depth"] == 16 and c["workload"] in ("put", "mixed") and c["conns"] >= 10:
                add("throughput " + name, thr, 5.0)
            if c["depth"] == 1 and c["conns"] == 10:
                add("p99 latency " + name, ratio(f["p99_us"], b["p99_us"]), 1.0, higher=False)
        # The binlog goals name no depth: both are checked.
        if c["workload"] == "put" and c["conns"] == 50 and c["body"] == 100:
            if c["binlog"] == "-f0":
                add("throughput " + name, thr, 20.0 if c["depth"] == 1 else 10.0)
            elif c["binlog"] == "-f50":
                add("throughput " + name, thr, 2.0)
    fastbean = {Case(**r["case"]).name: r["summary"]["fastbean"]["ops_per_sec"] for r in results}
    for w, conns, depth, policy, goal in DURABLE_GOALS:
        with_it = Case(w, conns, depth, 100, policy).name
        without = Case(w, conns, depth, 100).name
        if with_it in fastbean and without in fastbean:
            add("throughput fastbean %s / off %s" % (policy, without[:-4]),
                ratio(fastbean[with_it], fastbean[without]), goal)
    return checks


def chart(results, path):
    """Horizontal bars of the throughput ratio per case, log scale, 1x marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [Case(**r["case"]).name for r in results]
    ratios = [ratio(r["summary"]["fastbean"]["ops_per_sec"],
                    r["summary"]["beanstalkd"]["ops_per_sec"]) for r in results]
    fig, ax = plt.subplots(figsize=(9, 0.24 * len(names) + 1.6))
    colors = ["#2b8a3e" if x >= 1 else "#c92a2a" for x in ratios]
    ax.barh(range(len(names)), ratios, color=colors)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=7, family="monospace")
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    for i, x in enumerate(ratios):
        ax.text(x, i, " %.2fx" % x, va="center", fontsize=6)
    ax.set_xlabel("throughput, fastbean / C beanstalkd (log scale; >1 is faster)")
    ax.set_title("fastbean vs beanstalkd %s, same machine, same run" % machine()["beanstalkd"].split()[-1],
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=("quick", "standard", "full", "durable"), default="standard")
    ap.add_argument("--reps", type=int, default=None, help="rounds per server (default 3; quick: 1)")
    ap.add_argument("--seconds", type=float, default=2.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=0.3, help="unmeasured seconds first")
    ap.add_argument("--only", action="append", default=[],
                    help="keep cases whose name contains this (repeatable; all must match)")
    ap.add_argument("--json", default=os.path.join(RESULTS, "compare.json"))
    ap.add_argument("--chart", default=os.path.join(RESULTS, "compare.png"))
    ap.add_argument("--baseline", metavar="DIR",
                    help="compare with fastbean from this checkout instead of beanstalkd")
    args = ap.parse_args(argv)
    reps = args.reps or (1 if args.suite == "quick" else 3)
    kinds = ("baseline", "fastbean") if args.baseline else KINDS

    cases = [c for c in suite(args.suite) if all(o in c.name for o in args.only)]
    if not cases:
        sys.exit("no case matches")
    build_loadgen()
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    total = len(cases) * reps * len(kinds)
    print("%d cases x %d rounds x 2 servers = %d runs of %.1f s" % (len(cases), reps, total, args.seconds),
          file=sys.stderr)
    results, lines, n = [], [], 0
    started = time.time()
    for case in cases:
        runs = {k: [] for k in kinds}
        for _ in range(reps):
            for kind in kinds:
                n += 1
                res = measure(kind, case, args.seconds, args.warmup, args.baseline)
                runs[kind].append(res)
                print("[%d/%d] %-26s %-10s %10.0f ops/s  p99 %7.0f us  cpu %.2f%s" % (
                    n, total, case.name, kind, res["ops_per_sec"], res["p99_us"], res["server_cpu"],
                    "  errors: %d (%s)" % (res["errors"], res["first_error"]) if res["errors"] else ""),
                    file=sys.stderr, flush=True)
        summary = {k: summarize(v) for k, v in runs.items()}
        results.append({"case": case.as_dict(), "runs": runs, "summary": summary})
        lines.append(row(case, summary, kinds[0]))

    print()
    print(header(kinds))
    print("\n".join(lines))
    if args.baseline:
        print("\nfastbean here / fastbean in %s: throughput ratios %s" % (args.baseline, ", ".join(
            "%.3f" % ratio(r["summary"]["fastbean"]["ops_per_sec"], r["summary"]["baseline"]["ops_per_sec"])
            for r in results)))
    checks = [] if args.baseline else check_targets(results)
    if checks:
        print("\ntargets (fastbean / beanstalkd, or fastbean with a binlog / without):")
        for what, value, goal, met in checks:
            print("  %-4s %-40s %6.2fx  (goal %s %.2gx)" % (
                "ok" if met else "MISS", what, value, ">=" if "throughput" in what else "<=", goal))
    doc = {
        "started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
        "seconds": args.seconds, "warmup": args.warmup, "reps": reps, "suite": args.suite,
        "machine": machine(), "results": results,
        "targets": [{"what": w, "ratio": v, "goal": g, "met": m} for w, v, g, m in checks],
    }
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=1)
    if args.baseline:
        print("\nwrote %s" % args.json)
        return
    try:
        chart(results, args.chart)
        print("\nwrote %s and %s" % (args.json, args.chart))
    except ImportError:
        print("\nwrote %s (no chart: pip install matplotlib, or '.[bench]')" % args.json)


if __name__ == "__main__":
    main()
