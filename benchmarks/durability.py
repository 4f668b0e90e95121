"""How close -f 0 comes to the limit that the disk and the round trip set.

    python -m benchmarks.durability [--reps 3] [--seconds 2] [--clients 1,10,50,200]
    python -m benchmarks.durability --reads [--reps 3]

--reads measures what fastbean's rule for reads costs them: a reply, a
peek's or stats' too, leaves only once the records it shows are durable,
so that no reply reveals a change the disk may not hold (a NOT_FOUND after
a delete whose fsync then fails). A client peeks a job of tube default in
a loop, alone and beside puts from 10 clients to tube bench, with -f 0 and
with -f 50. Since issue 35 the peek waits only for default's records, so
it no longer waits for the puts' fsync; before, every reply waited for
every record logged before it, and the difference was the cost of that.

With -f 0 a client is answered only once its record is on disk, so a client
with one put in flight waits at least one fdatasync and one round trip per
put: n clients can do at most n / (fsync + round trip) puts a second, however
well the server groups them. This benchmark measures both terms on this
machine (the fdatasync of a binlog-like overwrite in the binlog's directory,
and the put round trip of one client without a binlog), then puts at depth 1
with 1, 10, 50 and 200 clients with -f 0 and without a binlog, and reads from
the server's /metrics how many records each fsync covered and how long the
fsyncs took. The same loads go to nullserver.c with -f 0, the cheapest group
commit there is (see benchmarks/ceiling.py): what it reaches is the real
limit here, since the bound counts neither the CPU an fdatasync costs nor
the wake-ups around it, and on two cores shared with the load generator
those matter. Runs with more than 10% CPU steal are measured again. Results go
to results/durability.json and a chart to results/durability.png.
"""
import argparse
import os
import re
import statistics
import tempfile
import time
import urllib.request

from benchmarks.compare import RESULTS
from benchmarks.harness import STEAL_LIMIT, cpu_times, finish, loadgen, steal, write_results
from tests.support.servers import Server, client, free_port


def fsync_latency(directory, count=400, record=2048):
    """Seconds per fdatasync of `record` bytes written over zeroed, allocated
    blocks (what a group commit does with -f 0): median and 90th percentile."""
    fd, path = tempfile.mkstemp(dir=directory)
    try:
        size = count * record
        os.write(fd, b"\0" * size)
        os.fsync(fd)
        times = []
        for i in range(count):
            os.pwrite(fd, b"r" * record, i * record)
            t0 = time.perf_counter()
            os.fdatasync(fd)
            times.append(time.perf_counter() - t0)
        times.sort()
        return times[len(times) // 2], times[len(times) * 9 // 10]
    finally:
        os.close(fd)
        os.unlink(path)


def thread_cpu(pid):
    """CPU seconds of a process's first thread (the event loop) and of all its others."""
    tick = os.sysconf("SC_CLK_TCK")
    main = others = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue                    # a thread that just ended
        used = (int(fields[11]) + int(fields[12])) / tick      # utime + stime
        if int(tid) == pid:
            main += used
        else:
            others += used
    return main, others


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for name in ("fastbean_binlog_fsync_seconds", "fastbean_binlog_group_commit_records"):
        for part in ("sum", "count"):
            m = re.search(r"^%s_%s (\S+)$" % (name, part), text, re.M)
            out[name + "_" + part] = float(m.group(1)) if m else 0.0
    return out


def run_once(clients, binlog, seconds, warmup, kind="fastbean"):
    """One fresh server, one load; returns the figures or None when steal was high."""
    mport = free_port()
    args = ["-f", "0"] if binlog else []
    if binlog and kind == "fastbean":
        args += ["--metrics", str(mport)]
    with Server(kind, *args, binlog=binlog).start(600) as srv:
        loadgen(srv.port, "put", conns=clients, depth=1, seconds=warmup)
        if binlog and kind == "fastbean":
            m0 = scrape(mport)
        t0, c0 = cpu_times(), thread_cpu(srv.pid)
        res = loadgen(srv.port, "put", conns=clients, depth=1, seconds=seconds)
        c1 = thread_cpu(srv.pid)
        st = steal(t0, cpu_times())
        if st > STEAL_LIMIT:
            return None, st
        n = max(1, res["transactions"])
        out = {"ops": res["ops_per_sec"], "p50_us": res["p50_us"], "steal": round(st, 3),
               # CPU per put, in microseconds: the server's event loop, its other
               # threads (fsync, zero-fill), the load generator
               "loop_us": 1e6 * (c1[0] - c0[0]) / n, "threads_us": 1e6 * (c1[1] - c0[1]) / n,
               "client_us": 1e6 * res["client_cpu_sec"] / n}
        if binlog and kind == "fastbean":
            m1 = scrape(mport)
            d = {k: m1[k] - m0[k] for k in m1}
            syncs = d["fastbean_binlog_fsync_seconds_count"]
            out["fsyncs_per_s"] = syncs / seconds
            out["fsync_ms"] = 1000 * d["fastbean_binlog_fsync_seconds_sum"] / max(1, syncs)
            out["group"] = (d["fastbean_binlog_group_commit_records_sum"]
                            / max(1, d["fastbean_binlog_group_commit_records_count"]))
        return out, st


def measure(clients, binlog, seconds, warmup, tries=5, kind="fastbean"):
    for _ in range(tries):
        out, st = run_once(clients, binlog, seconds, warmup, kind)
        if out is not None:
            return out
        print("  (steal %.0f%%: measured again)" % (100 * st))
    raise SystemExit("CPU steal stayed above %d%%: no figure is worth reporting" % (100 * STEAL_LIMIT))


def spread(values):
    return statistics.median(values), min(values), max(values)


def peek_latencies(port, seconds):
    """Round trips of `peek` of one job, one at a time, for `seconds`: sorted, in us."""
    out = []
    with client(port) as c:
        jid = c.put(b"read me")
        end = time.perf_counter() + seconds
        while True:
            t0 = time.perf_counter()
            c.send(b"peek %d\r\n" % jid)
            c.line()
            c.body(7)
            t1 = time.perf_counter()
            out.append((t1 - t0) * 1e6)
            if t1 > end:
                return sorted(out)


def read_cost(policy, loaded, seconds):
    """Peek latency (p50, p99 in us) on a fresh server with -f `policy`, alone or
    beside puts from 10 clients at depth 1; None when CPU steal was high."""
    with Server("fastbean", "-f", policy, binlog=True).start() as srv:
        load = None
        if loaded:
            load = loadgen(srv.port, "put", conns=10, depth=1, seconds=seconds + 0.5, background=True)
            time.sleep(0.3)
        t0 = cpu_times()
        lat = peek_latencies(srv.port, seconds)
        st = steal(t0, cpu_times())
        if load is not None:
            finish(load)
    if st > STEAL_LIMIT:
        return None
    return lat[len(lat) // 2], lat[len(lat) * 99 // 100]


def reads(reps, seconds):
    print("peek round trip, us: p50 / p99 (median of %d fresh servers each)" % reps)
    rows = {}
    for policy in ("0", "50"):
        for loaded in (False, True):
            runs = []
            while len(runs) < reps:
                r = read_cost(policy, loaded, seconds)
                if r is None:
                    print("  (steal above %d%%: measured again)" % (100 * STEAL_LIMIT))
                    continue
                runs.append(r)
            p50, p99 = (spread([r[k] for r in runs]) for k in (0, 1))
            rows[(policy, loaded)] = (p50, p99)
            print("  -f %-2s %-22s p50 %6.0f (%4.0f..%4.0f)   p99 %6.0f (%4.0f..%4.0f)" % (
                policy, "beside 10 putting" if loaded else "alone", *p50, *p99))
    f0, f50 = rows[("0", True)], rows[("50", True)]
    print("cost of holding reads for the fsync beside puts: p50 +%.0f us, p99 +%.0f us" % (
        f0[0][0] - f50[0][0], f0[1][0] - f50[1][0]))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--clients", default="1,10,50,200")
    ap.add_argument("--json", default=os.path.join(RESULTS, "durability.json"))
    ap.add_argument("--reads", action="store_true", help="what holding reads for the fsync costs")
    args = ap.parse_args(argv)
    if args.reads:
        reads(args.reps, args.seconds)
        return
    started = time.time()
    clients = [int(c) for c in args.clients.split(",")]

    probe_dir = tempfile.mkdtemp(prefix="fastbean-bench-")
    fsync_p50, fsync_p90 = fsync_latency(probe_dir)
    os.rmdir(probe_dir)
    rtt = spread([measure(1, False, args.seconds, args.warmup)["p50_us"] / 1e6
                  for _ in range(args.reps)])[0]
    print("fdatasync of a 2 KiB overwrite: p50 %.3f ms, p90 %.3f ms; put round trip (c1, no "
          "binlog): %.3f ms" % (fsync_p50 * 1e3, fsync_p90 * 1e3, rtt * 1e3))

    rows = []
    print("%8s %26s %26s %8s %8s %10s %26s %9s %6s %8s" % (
        "clients", "-f 0 puts/s (min..max)", "no binlog puts/s", "f0/off", "bound", "f0/bound",
        "nullserver -f 0 (min..max)", "f0/null", "group", "fsync ms"))
    for c in clients:
        f0, off, null = [], [], []
        for _ in range(args.reps):           # alternate, so drift hits all alike
            f0.append(measure(c, True, args.seconds, args.warmup))
            off.append(measure(c, False, args.seconds, args.warmup))
            null.append(measure(c, True, args.seconds, args.warmup, kind="nullserver"))
        bound = c / (fsync_p50 + rtt)
        f0_ops, off_ops = spread([r["ops"] for r in f0]), spread([r["ops"] for r in off])
        null_ops = spread([r["ops"] for r in null])
        row = {"clients": c, "f0": f0, "off": off, "null_f0": null, "bound": bound,
               "f0_ops": f0_ops, "off_ops": off_ops, "null_f0_ops": null_ops,
               "group": statistics.median(r["group"] for r in f0),
               "fsync_ms": statistics.median(r["fsync_ms"] for r in f0)}
        rows.append(row)
        print("%8d %9.0f (%6.0f..%6.0f) %9.0f (%6.0f..%6.0f) %7.2fx %8.0f %9.2fx "
              "%9.0f (%6.0f..%6.0f) %8.2fx %6.1f %8.3f" % (
                  c, *f0_ops, *off_ops, f0_ops[0] / off_ops[0], bound, f0_ops[0] / bound,
                  *null_ops, f0_ops[0] / null_ops[0], row["group"], row["fsync_ms"]))
    print("\nCPU per put, us (medians): event loop / other threads (fsync, zero-fill) / load generator")
    for row in rows:
        print("%8d" % row["clients"] + "".join(
            "   %s %5.2f / %4.2f / %5.2f" % (name, *(statistics.median(r[k] for r in row[key])
                                                 for k in ("loop_us", "threads_us", "client_us")))
            for name, key in (("-f 0", "f0"), ("off", "off"), ("nullserver -f 0", "null_f0"))))
    write_results(args.json, started, fsync_p50_s=fsync_p50, fsync_p90_s=fsync_p90,
                  round_trip_s=rtt, rows=rows)
    chart(rows, os.path.splitext(args.json)[0] + ".png", fsync_p50, rtt)


def chart(rows, path, fsync, rtt):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no chart")
        return
    xs = [r["clients"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(xs, [r["bound"] for r in rows], "k--",
            label="bound: clients / (fsync %.2f ms + round trip %.2f ms)" % (fsync * 1e3, rtt * 1e3))
    ax.plot(xs, [r["off_ops"][0] for r in rows], "s-", label="fastbean, no binlog")
    ax.errorbar(xs, [r["f0_ops"][0] for r in rows],
                yerr=[[r["f0_ops"][0] - r["f0_ops"][1] for r in rows],
                      [r["f0_ops"][2] - r["f0_ops"][0] for r in rows]],
                fmt="o-", capsize=3, label="fastbean -f 0 (min..max)")
    ax.plot(xs, [r["null_f0_ops"][0] for r in rows], "^:",
            label="nullserver -f 0: the cheapest group commit, no queue")
    for r in rows:
        ax.annotate("%.0f/fsync" % r["group"], (r["clients"], r["f0_ops"][0]),
                    textcoords="offset points", xytext=(4, -12), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("clients, one put in flight each")
    ax.set_ylabel("puts/s")
    ax.set_title("-f 0: throughput against the fsync + round-trip bound")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print("chart: %s" % path)


if __name__ == "__main__":
    main()
