"""Memory held per job, memory given back after a drain, and churn at a steady size.

    python -m benchmarks.memory                           # 1,000,000 x 100 B, 30,000 x 16 KiB
    python -m benchmarks.memory --sizes 50000x100         # JOBSxBODY, comma-separated
    python -m benchmarks.memory --churn --base DIR        # + a steady-queue churn, this tree vs DIR

For each server and size (a fresh process each, no binlog): the RSS of the
empty server once idle; put N jobs of BODY bytes with the load generator; the
RSS full, right after the fill and once the server has been idle (fastbean
gives back its prefault pools then); reserve and delete them all, then watch
RSS from /proc, with no traffic at all, until it is back within 10 MB of the
empty server's. RSS per job is (full at rest - empty) / N.

Targets (the issue's): fastbean's RSS per job at most beanstalkd's at each
size, and fastbean's drained RSS within 10 MB of its empty RSS within 5 s.

--churn: a queue held at a steady size (put, reserve, delete round trips on
top of a prefilled backlog) must neither resize the id table back and forth
nor run slower for the give-back machinery: each run reports the table's
buckets before and after and the round trips per second, for this tree and
for another checkout of fastbean (--base, built in place), alternating,
with the spread over the repeats. CPU steal (/proc/stat) is recorded per run.

The tables go to the terminal, the figures to benchmarks/results/memory.json.
"""
import argparse
import os
import statistics
import sys
import time

from benchmarks.harness import build_loadgen, loadgen, stats, write_results
from tests.support.servers import KINDS, Server, client

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
MB = 1 << 20
IDLE_SETTLE = 2.0           # s: past the engine's IDLE_WAIT (1 s) and the give-back after it
GIVE_BACK_LIMIT = 5.0       # s after the drain for RSS to come back within 10 MB of empty
GIVE_BACK_ROOM = 10 * MB


def steal_ticks():
    """CPU steal so far (field 8 of /proc/stat's cpu line), in clock ticks."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[8])


def live_jobs(st):
    return sum(int(st["current-jobs-" + state]) for state in ("ready", "reserved", "delayed", "buried"))


def table_buckets(port):
    with client(port, 60.0) as c:
        return int(c.yaml(b"fastbean-stats")["job-table-buckets"])


def watch_rss(server, seconds):
    """RSS every 50 ms for `seconds`, from /proc (no traffic): [(elapsed, rss), ...]."""
    start = time.monotonic()
    trace = []
    while True:
        elapsed = time.monotonic() - start
        trace.append((elapsed, server.rss()))
        if elapsed > seconds:
            return trace
        time.sleep(0.05)


def first_at_most(trace, goal):
    """When the trace first came down to goal; None if it never did."""
    return next((t for t, rss in trace if rss <= goal), None)


def measure(kind, jobs, body):
    with Server(kind).start(600) as server:
        time.sleep(IDLE_SETTLE)
        empty = server.rss()
        fill = loadgen(server.port, "put", conns=10, depth=16, body=body, seconds=0, total=jobs)
        time.sleep(0.2)
        busy = server.rss()
        held = int(stats(server.port)["current-jobs-ready"])
        time.sleep(IDLE_SETTLE)
        full = server.rss()
        drain = loadgen(server.port, "reserve", conns=10, depth=16, seconds=0, tube="bench")
        trace = watch_rss(server, GIVE_BACK_LIMIT)
        left = live_jobs(stats(server.port))
    drained = trace[-1][1]
    if fill["errors"] or held != jobs or left:
        sys.exit("%s: fill or drain went wrong (put errors %d, %d of %d jobs held, %d left)"
                 % (kind, fill["errors"], held, jobs, left))
    return {"empty": empty, "full_busy": busy, "full": full, "drained": drained,
            "at_drain": trace[0][1], "per_job": (full - empty) / jobs,
            "per_job_busy": (busy - empty) / jobs,
            "give_back_seconds": first_at_most(trace, empty + GIVE_BACK_ROOM),
            "settled_seconds": first_at_most(trace, drained + MB),
            "fill_seconds": fill["seconds"], "drain_seconds": drain["seconds"]}


def parse_sizes(text):
    sizes = []
    for item in text.split(","):
        jobs, body = item.lower().split("x")
        sizes.append((int(jobs), int(body)))
    return sizes


def report_sizes(res, sizes):
    targets = []
    for jobs, body in sizes:
        key = "%dx%d" % (jobs, body)
        print("\n%d jobs of %d bytes" % (jobs, body))
        print("%-10s %8s %8s %8s %10s %9s %8s %11s %8s %8s" % (
            "server", "empty MB", "full MB", "B/job", "B/job busy", "at drain", "drained",
            "drained-emp", "back in", "settled"))
        for kind in KINDS:
            r = res[key][kind]
            back = r["give_back_seconds"]
            print("%-10s %8.1f %8.1f %8.1f %10.1f %9.1f %8.1f %11.1f %8s %7.2fs" % (
                kind, r["empty"] / MB, r["full"] / MB, r["per_job"], r["per_job_busy"],
                r["at_drain"] / MB, r["drained"] / MB, (r["drained"] - r["empty"]) / MB,
                "-" if back is None else "%.2fs" % back, r["settled_seconds"]))
        b, f = res[key]["beanstalkd"], res[key]["fastbean"]
        back = f["give_back_seconds"]
        targets += [
            {"what": "%s: B/job fastbean / beanstalkd" % key, "value": f["per_job"] / b["per_job"],
             "goal": "<= 1.00", "met": f["per_job"] <= b["per_job"]},
            {"what": "%s: s to drained <= empty + 10 MB" % key,
             "value": -1.0 if back is None else back, "goal": "<= %.0f s" % GIVE_BACK_LIMIT,
             "met": back is not None and back <= GIVE_BACK_LIMIT
             and f["drained"] <= f["empty"] + GIVE_BACK_ROOM},
        ]
    return targets


def base_cmd(base):
    """A fastbean command line that runs the checkout at `base` (built in place)."""
    code = ("import runpy, sys; sys.path.insert(0, %r); "
            "runpy.run_module('fastbean', run_name='__main__', alter_sys=True)" % base)
    return "%s -c %s" % (sys.executable, _quote(code))


def _quote(s):
    return "'" + s.replace("'", "'\"'\"'") + "'"


def timed(server, workload, **kw):
    """A loadgen run with the server's CPU per transaction and the CPU steal beside it."""
    steal0, cpu0 = steal_ticks(), server.cpu()
    run = loadgen(server.port, workload, **kw)
    run["cpu_us"] = (server.cpu() - cpu0) * 1e6 / max(1, run["transactions"])
    run["steal_ticks"] = steal_ticks() - steal0
    return run


def churn_once(queue, seconds):
    """Puts of a backlog, round trips (put, reserve, delete) on top of it at a
    steady size, then reserve and delete of the whole backlog."""
    with Server("fastbean").start(600) as server:
        fill = timed(server, "put", conns=10, depth=16, seconds=0, total=queue)
        before = table_buckets(server.port)
        run = timed(server, "roundtrip", conns=10, depth=4, seconds=seconds, warmup=0)
        after = table_buckets(server.port)
        held = int(stats(server.port, b"stats-tube bench")["current-jobs-ready"])
        drain = timed(server, "reserve", conns=10, depth=16, seconds=0, tube="bench")
    if run["errors"] or fill["errors"] or held != queue:
        sys.exit("churn went wrong (errors %d, %d of %d jobs held)" % (run["errors"], held, queue))
    return {"ops": run["ops_per_sec"], "cpu_us": run["cpu_us"], "put_ops": fill["ops_per_sec"],
            "put_cpu_us": fill["cpu_us"], "drain_ops": drain["ops_per_sec"],
            "drain_cpu_us": drain["cpu_us"], "buckets_before": before, "buckets_after": after,
            "steal_ticks": fill["steal_ticks"] + run["steal_ticks"] + drain["steal_ticks"]}


def churn(base, queue, seconds, repeats):
    """This tree against the checkout at `base`, alternating runs."""
    builds = {"this": None, "base": base_cmd(base)}
    runs = {name: [] for name in builds}
    saved = os.environ.get("FASTBEAN_CMD")
    try:
        for _ in range(repeats):
            for name, cmd in builds.items():
                if cmd is None:
                    os.environ.pop("FASTBEAN_CMD", None)
                else:
                    os.environ["FASTBEAN_CMD"] = cmd
                runs[name].append(churn_once(queue, seconds))
                print("churn %-5s done" % name, file=sys.stderr, flush=True)
    finally:
        if saved is None:
            os.environ.pop("FASTBEAN_CMD", None)
        else:
            os.environ["FASTBEAN_CMD"] = saved
    def ratio(key):
        return [t[key] / b[key] for t, b in zip(runs["this"], runs["base"])]
    ratios, cpu_ratios = ratio("ops"), ratio("cpu_us")
    print("\n%d puts (c10 d16), then round trips (put, reserve, delete) at that steady size"
          " (c10 d4, %.0f s), then reserve+delete of them all (c10 d16)" % (queue, seconds))
    print("%-6s %9s %9s %13s %9s %9s %9s %16s %6s" % (
        "build", "puts/s", "us/put", "round trips/s", "us/trip", "drain/s", "us/job",
        "table buckets", "steal"))
    for name in builds:
        for r in runs[name]:
            print("%-6s %9.0f %9.2f %13.0f %9.2f %9.0f %9.2f %8d->%-7d %6d" % (
                name, r["put_ops"], r["put_cpu_us"], r["ops"], r["cpu_us"], r["drain_ops"],
                r["drain_cpu_us"], r["buckets_before"], r["buckets_after"], r["steal_ticks"]))
    print("this / base (us: the server's CPU per operation):")
    for what, key in (("puts/s", "put_ops"), ("us/put", "put_cpu_us"), ("round trips/s", "ops"),
                      ("us/trip", "cpu_us"), ("drain/s", "drain_ops"),
                      ("us/job drained", "drain_cpu_us")):
        xs = ratio(key)
        print("  %-15s %s (median %.3f, spread %.3f-%.3f)" % (
            what, " ".join("%.3f" % x for x in xs), statistics.median(xs), min(xs), max(xs)))
    steady = all(r["buckets_before"] == r["buckets_after"] for r in runs["this"])
    targets = [
        {"what": "churn: id table the same size before and after", "value": float(steady),
         "goal": "1", "met": steady},
        {"what": "churn: round trips/s this / base (median of %d)" % repeats,
         "value": statistics.median(ratios), "goal": ">= 0.97 (noise)",
         "met": statistics.median(ratios) >= 0.97},
        {"what": "churn: server CPU per trip this / base (median)",
         "value": statistics.median(cpu_ratios), "goal": "<= 1.03 (noise)",
         "met": statistics.median(cpu_ratios) <= 1.03},
    ]
    return {"runs": runs, "ratios": ratios, "cpu_ratios": cpu_ratios}, targets


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000x100,30000x16384",
                    help="JOBSxBODY[,JOBSxBODY...] (default %(default)s)")
    ap.add_argument("--churn", action="store_true", help="also run the steady-queue churn")
    ap.add_argument("--base", help="another fastbean checkout, built in place, for --churn")
    ap.add_argument("--churn-queue", type=int, default=200_000)
    ap.add_argument("--churn-seconds", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=os.path.join(RESULTS, "memory.json"))
    args = ap.parse_args(argv)
    if args.churn and not args.base:
        ap.error("--churn needs --base")
    build_loadgen()

    started = time.time()
    sizes = parse_sizes(args.sizes) if args.sizes else []
    res = {}
    for jobs, body in sizes:
        key = "%dx%d" % (jobs, body)
        res[key] = {}
        for kind in KINDS:
            steal0 = steal_ticks()
            res[key][kind] = measure(kind, jobs, body)
            res[key][kind]["steal_ticks"] = steal_ticks() - steal0
            print("%-10s %s done" % (kind, key), file=sys.stderr, flush=True)
    targets = report_sizes(res, sizes)
    churned = None
    if args.churn:
        churned, more = churn(os.path.abspath(args.base), args.churn_queue, args.churn_seconds,
                              args.repeats)
        targets += more

    print("\ntargets:")
    for t in targets:
        print("  %-4s %-56s %7.3f  (%s)" % ("ok" if t["met"] else "MISS", t["what"], t["value"],
                                            t["goal"]))
    write_results(args.json, started, sizes=args.sizes, results=res, churn=churned,
                  targets=targets)


if __name__ == "__main__":
    main()
