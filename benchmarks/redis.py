"""fastbean against Redis as a job queue, and against C beanstalkd, same workloads, one run.

    python -m benchmarks.redis                       # the cases below, 3 rounds
    python -m benchmarks.redis --reps 5 --only put
    python -m benchmarks.redis --seconds 1 --reps 1  # a smoke run

Redis is measured the two ways job queues are built on it, from the same load
generator (loadgen.c -r; docs/benchmarks.md, "Against Redis", says why these):
  list    put RPUSH; take LMOVE into a processing list (BLMOVE for the mixed
          workload's consumers); ack LREM from the processing list
  stream  put XADD; take XREADGROUP of a consumer group (BLOCK for the mixed
          workload's consumers); ack XACK and XDEL, in one write
Durability side by side: no binlog against no AOF, `-b DIR -f 50` against
`appendfsync everysec`, `-b DIR -f 0` against `appendfsync always`; Redis never
snapshots (`--save ''`).

Every measurement gets a fresh server; the four (fastbean, beanstalkd, Redis
list, Redis stream) alternate, round after round, so that drift on a shared
machine hits all alike. A round's four runs make its ratios; the table shows
the medians over the rounds and the lowest and highest round. Throughput is in
transactions per second, latencies are per transaction, server CPU in cores.
Runs during which the hypervisor stole more than 10% of the CPU (/proc/stat)
are marked, and the CPU that other processes used meanwhile is shown (the
"others" column, in cores): on a shared machine both make a run noise.
Results go to a JSON file and a PNG chart.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

from benchmarks.compare import BINLOG, RESULTS, Case, prefill_count, ratio, summarize
from benchmarks.harness import STEAL_LIMIT, build_loadgen, busy_seconds, cpu_times, loadgen, steal, write_results
from tests.support.servers import REDIS_SERVER, RedisServer, Server

KINDS = ("fastbean", "beanstalkd", "redis-list", "redis-stream")
OTHERS = KINDS[1:]

# Redis's append-only file beside each binlog policy of compare.BINLOG
REDIS_AOF = {
    "off": ["--appendonly", "no"],
    "-f50": ["--appendonly", "yes", "--appendfsync", "everysec"],
    "-f0": ["--appendonly", "yes", "--appendfsync", "always"],
}
AOF_NAMES = {"off": "no AOF", "-f50": "everysec", "-f0": "always"}

# Issue #29's table: depth 1 where a request's fixed cost shows, depth 16 where
# pipelining hides it, and puts with each durability policy.
CASES = (
    Case("put", 50, 1, 100),
    Case("reserve", 10, 1, 100),
    Case("roundtrip", 10, 1, 100),
    Case("put", 50, 16, 100),
    Case("mixed", 50, 16, 100),
    Case("put", 50, 1, 100, "-f0"),
    Case("put", 50, 1, 100, "-f50"),
)


def case_name(case):
    return "%s / %s" % (case.name, AOF_NAMES[case.binlog])


def start(kind, case):
    if kind.startswith("redis-"):
        return RedisServer(*REDIS_AOF[case.binlog]).start()
    flags = BINLOG[case.binlog]
    return Server(kind, *(flags or ()), binlog=flags is not None).start(600)


def measure(kind, case, seconds, warmup):
    """One fresh server, one run of the load generator; the result as a dict, with
    the server's CPU, the machine's CPU steal and the other processes' CPU over the run."""
    pattern = kind[len("redis-"):] if kind.startswith("redis-") else None
    with start(kind, case) as server:
        conns = max(2, case.conns) if case.workload == "mixed" else case.conns
        if case.workload == "reserve":
            loadgen(server.port, "put", conns=10, depth=16, body=case.body, seconds=0,
                    total=prefill_count(case, seconds + warmup), redis=pattern)
        cpu0, stolen0, t0 = server.cpu(), cpu_times(), time.monotonic()
        res = loadgen(server.port, case.workload, conns=conns, depth=case.depth, body=case.body,
                      seconds=seconds, warmup=warmup, redis=pattern)
        wall = time.monotonic() - t0
        stolen1 = cpu_times()
        res["steal"] = steal(stolen0, stolen1)
        server_cpu = server.cpu() - cpu0
        res["server_cpu"] = server_cpu / wall
        res["client_cpu"] = res["client_cpu_sec"] / wall
        # the rest of the machine's work: neighbours competing for the same cores
        res["others_cpu"] = max(0.0, busy_seconds(stolen0, stolen1) - server_cpu - res["client_cpu_sec"]) / wall
        res["server_rss"] = server.rss()
    return res


def round_ratios(runs, other, key="ops_per_sec"):
    """fastbean / other of each round (the runs of one round ran back to back)."""
    return [ratio(f[key], o[key]) for f, o in zip(runs["fastbean"], runs[other])]


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def spread_cell(sp):
    return "%5.2fx (%.2f-%.2f)" % (sp["median"], sp["min"], sp["max"])


def throughput_table(results):
    lines = ["%-34s %9s %9s %9s %9s  %-20s %-20s %-20s" % (
        "case / Redis AOF", "fastbean", "beanstalk", "list", "stream",
        "f/list (lo-hi)", "f/stream (lo-hi)", "f/beanstalkd (lo-hi)")]
    for r in results:
        s, rt = r["summary"], r["ratios"]
        cells = [spread_cell(rt[o]) for o in ("redis-list", "redis-stream", "beanstalkd")]
        marks = ("  ERRORS" if any(s[k]["errors"] for k in KINDS) else "") + \
            ("  STEAL" if r["steal_runs"] else "")
        lines.append("%-34s %9.0f %9.0f %9.0f %9.0f  %-20s %-20s %-20s%s" % (
            r["name"], *(s[k]["ops_per_sec"] for k in KINDS), *cells, marks))
    return "\n".join(line.rstrip() for line in lines)


def latency_table(results):
    lines = ["%-34s %-27s %-30s %-31s %s" % ("case / Redis AOF", "p50 us f / bs / list / str",
                                             "p99 us f / bs / list / str", "server cpu f / bs / list / str",
                                             "others")]
    for r in results:
        s = r["summary"]
        lines.append("%-34s %-27s %-30s %-31s %.2f" % (
            r["name"], " / ".join("%.0f" % s[k]["p50_us"] for k in KINDS),
            " / ".join("%.0f" % s[k]["p99_us"] for k in KINDS),
            " / ".join("%.2f" % s[k]["server_cpu"] for k in KINDS), r["others_cpu"]))
    return "\n".join(line.rstrip() for line in lines)


def p99_table(results):
    lines = ["%-34s %-20s %-20s %-20s" % ("case / Redis AOF", "f/list (lo-hi)", "f/stream (lo-hi)",
                                          "f/beanstalkd (lo-hi)")]
    for r in results:
        lines.append("%-34s %-20s %-20s %-20s" % (r["name"], *(
            spread_cell(r["p99_ratios"][o]) for o in ("redis-list", "redis-stream", "beanstalkd"))))
    return "\n".join(line.rstrip() for line in lines)


def chart(results, path):
    """Per case, fastbean's throughput over each other server's, log scale, 1x marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["name"] for r in results]
    bars = (("redis-list", "Redis list", "#c2410c"), ("redis-stream", "Redis stream", "#7c3aed"),
            ("beanstalkd", "C beanstalkd", "#2563eb"))
    height = 0.26
    fig, ax = plt.subplots(figsize=(9, 0.8 * len(names) + 1.6))
    for i, (kind, label, color) in enumerate(bars):
        values = [r["ratios"][kind]["median"] for r in results]
        ys = [n + (i - 1) * height for n in range(len(names))]
        ax.barh(ys, values, height=height, color=color, label="fastbean / " + label)
        for y, x in zip(ys, values):
            ax.text(x, y, " %.2fx" % x, va="center", fontsize=6)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=7, family="monospace")
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("throughput ratio, medians over the rounds (log scale; >1: fastbean is faster)")
    ax.set_title("fastbean against Redis %s and beanstalkd, same machine, same run" % redis_version(),
                 fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def redis_version():
    out = subprocess.run([REDIS_SERVER, "--version"], capture_output=True, text=True).stdout
    return next((w[2:] for w in out.split() if w.startswith("v=")), "?")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3, help="rounds per server (default 3)")
    ap.add_argument("--seconds", type=float, default=2.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=0.3, help="unmeasured seconds first")
    ap.add_argument("--only", action="append", default=[],
                    help="keep cases whose name contains this (repeatable; all must match)")
    ap.add_argument("--json", default=os.path.join(RESULTS, "redis.json"))
    ap.add_argument("--chart", default=os.path.join(RESULTS, "redis.png"))
    args = ap.parse_args(argv)
    if not os.path.exists(REDIS_SERVER):
        sys.exit("no redis-server at %s (apt-get install redis-server, or set REDIS_SERVER)" % REDIS_SERVER)

    cases = [c for c in CASES if all(o in case_name(c) for o in args.only)]
    if not cases:
        sys.exit("no case matches")
    build_loadgen()
    total = len(cases) * args.reps * len(KINDS)
    print("%d cases x %d rounds x %d servers = %d runs of %.1f s" % (
        len(cases), args.reps, len(KINDS), total, args.seconds), file=sys.stderr)
    results, n, stolen = [], 0, 0
    started = time.time()
    for case in cases:
        runs = {k: [] for k in KINDS}
        for _ in range(args.reps):
            for kind in KINDS:
                n += 1
                res = measure(kind, case, args.seconds, args.warmup)
                runs[kind].append(res)
                noisy = res["steal"] > STEAL_LIMIT
                stolen += noisy
                print("[%d/%d] %-34s %-12s %10.0f ops/s  p99 %7.0f us  cpu %.2f  others %.2f%s%s" % (
                    n, total, case_name(case), kind, res["ops_per_sec"], res["p99_us"], res["server_cpu"],
                    res["others_cpu"],
                    "  STEAL %.0f%%" % (100 * res["steal"]) if noisy else "",
                    "  errors: %d (%s)" % (res["errors"], res["first_error"]) if res["errors"] else ""),
                    file=sys.stderr, flush=True)
        results.append({
            "case": case.as_dict(), "name": case_name(case), "redis_aof": REDIS_AOF[case.binlog],
            "runs": runs, "summary": {k: summarize(v) for k, v in runs.items()},
            "ratios": {o: spread(round_ratios(runs, o)) for o in OTHERS},
            "p99_ratios": {o: spread(round_ratios(runs, o, "p99_us")) for o in OTHERS},
            "steal_runs": sum(r["steal"] > STEAL_LIMIT for v in runs.values() for r in v),
            "others_cpu": statistics.median(r["others_cpu"] for v in runs.values() for r in v),
        })

    print()
    print("throughput, transactions/s (medians of %d rounds); fastbean / each, median (lowest-highest round)"
          % args.reps)
    print(throughput_table(results))
    print()
    print(latency_table(results))
    print()
    print("p99 latency, fastbean / each (below 1: a shorter tail), median (lowest-highest round)")
    print(p99_table(results))
    if stolen:
        print("\n%d of %d runs had more than %d%% CPU steal (cases marked STEAL): read them as noise"
              % (stolen, total, 100 * STEAL_LIMIT))
    write_results(args.json, started, seconds=args.seconds, warmup=args.warmup, reps=args.reps,
                  redis=redis_version(), steal_limit=STEAL_LIMIT, results=results)
    try:
        chart(results, args.chart)
        print("wrote %s" % args.chart)
    except ImportError:
        print("no chart: pip install matplotlib, or '.[bench]'")


if __name__ == "__main__":
    main()
