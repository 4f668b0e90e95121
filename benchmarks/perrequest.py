"""Where a depth-1 request's time goes: system calls and server CPU per transaction.

    python -m benchmarks.perrequest                     # 4 cases x 3 rounds x 4-6 servers, ~4 min
    python -m benchmarks.perrequest --only put --reps 5
    python -m benchmarks.perrequest --profile           # and where fastbean's CPU goes, by library
    python -m benchmarks.perrequest --baseline ../old --servers fastbean   # before and after a change

Each run starts a fresh server, has the load generator (loadgen.c) run a fixed
number of transactions at depth 1, and counts what the server did for them:
its system calls, by name, from the kernel's syscall tracepoints (`perf stat
-p PID`, which counts in the kernel and barely slows the server, unlike strace),
its context switches, and its user and system CPU time (/proc/PID/stat). All
figures are per transaction: a put is one request, a reserve transaction is
two (reserve-with-timeout 0, then delete; LMOVE then LREM; XREADGROUP then XACK
and XDEL in one write), a roundtrip three. Counts do not depend on the
machine's load the way rates do; CPU per transaction depends on it much less.

The servers: fastbean without a binlog, C beanstalkd, Redis (no AOF, no
snapshots) as a list and as a stream queue (docs/benchmarks.md, "Against
Redis", says why these patterns), nullserver.c, which answers puts and
keeps nothing, and uvnull.py, which does the same on uvloop in Python (puts
only, both): what the event loop and the interpreter cost a request before
any queue work. They alternate round after round.

--profile adds one run of fastbean under `perf record` for each case and
prints the share of its CPU samples by library: the kernel, the Python
interpreter, uvloop (with libuv), the engine and parser (compiled Cython), libc.

Needs perf (Debian: linux-perf) with access to the syscall tracepoints (root, or
kernel.perf_event_paranoid <= -1), a C compiler for loadgen, and redis-server for
the Redis columns (they are left out, with a note, if it is missing).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.compare import RESULTS
from benchmarks.harness import build_loadgen, busy_seconds, cpu_times, loadgen, steal, write_results

KINDS = ("fastbean", "beanstalkd", "redis-list", "redis-stream", "nullserver", "uvnull")
PUTS_ONLY = ("nullserver", "uvnull")

# (workload, connections): depth 1 always
CASES = (("put", 10), ("put", 50), ("reserve", 10), ("roundtrip", 10))

# system calls counted by name; the rest are summed as "other"
SYSCALLS = ("read", "write", "epoll_wait", "epoll_pwait", "epoll_ctl", "recvfrom", "sendto",
            "readv", "writev", "recvmsg", "sendmsg", "futex")

# how --profile groups perf's DSOs
GROUPS = (("kernel", ("[kernel", "[vdso")), ("uvloop+libuv", ("loop.cpython", "libuv")),
          ("engine", ("core.cpython",)), ("parser", ("parser.cpython",)),
          ("python", ("python3", "libpython")), ("libc", ("libc.so", "libc-", "libm.so")))


def fail(msg):
    sys.exit("perrequest: " + msg)


def check_tools(kinds):
    """The kinds that can run here; a one-line exit when a tool every run needs is missing."""
    if shutil.which("perf") is None:
        fail("needs perf to count system calls (Debian: apt-get install linux-perf)")
    probe = subprocess.run(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0 or "not supported" in probe.stderr or "<not counted>" in probe.stderr:
        fail("perf cannot count syscall tracepoints here (run as root, or set "
             "kernel.perf_event_paranoid=-1): %s" % (probe.stderr.strip().splitlines() or ["?"])[-1])
    from tests.support.servers import REDIS_SERVER
    if any(k.startswith("redis") for k in kinds) and not os.path.exists(REDIS_SERVER):
        print("note: no redis-server (%s); leaving Redis out" % REDIS_SERVER)
        kinds = [k for k in kinds if not k.startswith("redis")]
    return kinds


class UvNull:
    """benchmarks/uvnull.py in a process of its own, as tests.support.servers starts the others."""

    def start(self):
        from tests.support.servers import free_port, wait_listening
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.uvnull", str(self.port)])
        wait_listening(self.port, self.proc, lambda: "uvnull exited")
        return self

    @property
    def pid(self):
        return self.proc.pid

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait()


BASELINE = None      # --baseline DIR: the checkout whose fastbean "baseline" runs
FASTBEAN_ARGS = ()   # --args: fastbean's (and the baseline's) command-line options


def start(kind):
    from tests.support.servers import RedisServer, Server
    if kind == "baseline":
        saved = os.environ.get("FASTBEAN_CMD")
        # -m puts the working directory first on sys.path: run from the checkout
        os.environ["FASTBEAN_CMD"] = "env -C %s PYTHONPATH=%s %s -m fastbean" % (BASELINE, BASELINE, sys.executable)
        try:
            return Server("fastbean", *FASTBEAN_ARGS).start(600)
        finally:
            if saved is None:
                del os.environ["FASTBEAN_CMD"]
            else:
                os.environ["FASTBEAN_CMD"] = saved
    if kind == "uvnull":
        return UvNull().start()
    if kind.startswith("redis-"):
        return RedisServer("--appendonly", "no").start()
    return Server(kind, *(FASTBEAN_ARGS if kind == "fastbean" else ())).start(600)


def proc_cpu(pid):
    """(user, system) CPU seconds of process pid so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def perf_stat(pid):
    events = ["raw_syscalls:sys_enter", "context-switches"] + \
        ["syscalls:sys_enter_" + name for name in SYSCALLS]
    proc = subprocess.Popen(["perf", "stat", "-x,", "-e", ",".join(events), "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)      # perf attaches before the load starts
    return proc


def perf_counts(proc):
    proc.send_signal(2)
    _, err = proc.communicate()
    counts = {}
    for line in err.splitlines():
        f = line.split(",")
        if len(f) > 2 and f[0].strip().isdigit():
            name = f[2].replace("syscalls:sys_enter_", "")
            counts["syscalls" if name == "raw_syscalls:sys_enter" else name] = int(f[0])
    return counts


def perf_record(pid, path):
    return subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "2999", "-p", str(pid),
                             "-o", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def dso_shares(path):
    """{group: share of samples} from a perf.data file, DSOs grouped by GROUPS."""
    out = subprocess.run(["perf", "report", "-i", path, "--sort", "dso", "--stdio", "-q",
                          "--percent-limit", "0"], capture_output=True, text=True).stdout
    shares = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[0].endswith("%"):
            continue
        pct, dso = float(parts[0].rstrip("%")), parts[1]
        group = next((g for g, keys in GROUPS if any(k in dso for k in keys)), "other")
        shares[group] = shares.get(group, 0.0) + pct / 100
    return shares


def top_symbols(path, dso_filter, n=8):
    """The n symbols of the DSOs whose name has dso_filter with the most samples, as (share, name)."""
    out = subprocess.run(["perf", "report", "-i", path, "--sort", "dso,sym", "--stdio", "-q",
                          "--percent-limit", "0"], capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) == 4 and parts[0].endswith("%") and dso_filter in parts[1]:
            rows.append((float(parts[0].rstrip("%")) / 100, parts[3].strip()))
    return rows[:n]


def measure(kind, workload, conns, total, profile=None):
    pattern = kind[len("redis-"):] if kind.startswith("redis-") else None
    with start(kind) as server:
        if workload == "reserve":
            loadgen(server.port, "put", conns=10, depth=16, seconds=0, total=total, redis=pattern)
        watcher = perf_record(server.pid, profile) if profile else perf_stat(server.pid)
        if profile:
            time.sleep(0.3)
        cpu0, stat0, t0 = proc_cpu(server.pid), cpu_times(), time.monotonic()
        res = loadgen(server.port, workload, conns=conns, depth=1, seconds=0, total=total, redis=pattern)
        wall = time.monotonic() - t0
        cpu1, stat1 = proc_cpu(server.pid), cpu_times()
        if profile:
            watcher.send_signal(2)
            watcher.wait()
            return None
        counts = perf_counts(watcher)
    n = res["transactions"]
    if n == 0 or res.get("errors"):
        fail("%s %s c%d: %d transactions, %s errors" % (kind, workload, conns, n, res.get("errors")))
    per = {k: v / n for k, v in counts.items()}
    named = sum(per.get(name, 0.0) for name in SYSCALLS)
    per["other"] = max(0.0, per.get("syscalls", 0.0) - named)
    return {"transactions": n, "ops_per_sec": res["ops_per_sec"], "p99_us": res["p99_us"],
            "user_us": (cpu1[0] - cpu0[0]) * 1e6 / n, "sys_us": (cpu1[1] - cpu0[1]) * 1e6 / n,
            "cpu_us": (cpu1[0] + cpu1[1] - cpu0[0] - cpu0[1]) * 1e6 / n,
            "steal": steal(stat0, stat1), "wall_s": wall, "per": per,
            # cores the rest of the machine used meanwhile: neighbours, on a shared machine
            "others_cpu": max(0.0, busy_seconds(stat0, stat1) - sum(cpu1) + sum(cpu0)
                              - res["client_cpu_sec"]) / wall}


def cell(values, fmt="%.2f"):
    if len(values) == 1:
        return fmt % values[0]
    return (fmt + " (" + fmt + "-" + fmt + ")") % (statistics.median(values), min(values), max(values))


def report(workload, conns, runs):
    print("\n%s c%d d1, per transaction: median (lowest-highest of %d rounds)" % (
        workload, conns, max(len(r) for r in runs.values())))
    print("  %-13s %-22s %-20s %-20s %-20s %9s %7s %6s" % (
        "server", "CPU us", "user us", "system us", "syscalls", "rate/s", "p99 us", "others"))
    for kind, rs in runs.items():
        if not rs:
            continue
        print("  %-13s %-22s %-20s %-20s %-20s %9.0f %7.0f %6.2f%s" % (
            kind, cell([r["cpu_us"] for r in rs]), cell([r["user_us"] for r in rs]),
            cell([r["sys_us"] for r in rs]), cell([r["per"].get("syscalls", 0) for r in rs]),
            statistics.median(r["ops_per_sec"] for r in rs), statistics.median(r["p99_us"] for r in rs),
            max(r["others_cpu"] for r in rs), "  STEAL" if any(r["steal"] > 0.10 for r in rs) else ""))
    print("  system calls by name (medians):")
    for kind, rs in runs.items():
        if not rs:
            continue
        names = [n for n in SYSCALLS + ("other", "context-switches")
                 if statistics.median(r["per"].get(n, 0) for r in rs) >= 0.005]
        print("    %-13s %s" % (kind, "  ".join(
            "%s %.3f" % (n, statistics.median(r["per"].get(n, 0) for r in rs)) for n in names)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--transactions", "-n", type=int, default=200_000,
                    help="transactions a run (default 200000)")
    ap.add_argument("--reps", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--only", help="only cases whose name (e.g. 'put c50') contains this")
    ap.add_argument("--servers", default=",".join(KINDS),
                    help="comma-separated, from: " + ", ".join(KINDS))
    ap.add_argument("--baseline", metavar="DIR",
                    help="also run fastbean from the checkout DIR (its extensions built) as \"baseline\"")
    ap.add_argument("--args", default="", help="fastbean's options, e.g. \"--busy-poll 0\"")
    ap.add_argument("--profile", action="store_true",
                    help="also profile fastbean with perf record, once per case")
    ap.add_argument("--out", default=os.path.join(RESULTS, "perrequest.json"))
    args = ap.parse_args(argv)
    kinds = [k for k in args.servers.split(",") if k]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        fail("no server %s (choose from %s)" % (", ".join(bad), ", ".join(KINDS)))
    kinds = check_tools(kinds)
    global FASTBEAN_ARGS, BASELINE
    FASTBEAN_ARGS = tuple(args.args.split())
    if args.baseline:
        BASELINE = os.path.abspath(args.baseline)
        kinds = ["baseline"] + [k for k in kinds if k != "baseline"]
    build_loadgen()
    cases = [c for c in CASES if not args.only or args.only in "%s c%d" % c]
    if not cases:
        fail("no case matches --only %r" % args.only)
    started, results = time.time(), []
    for workload, conns in cases:
        runs = {k: [] for k in kinds if k not in PUTS_ONLY or workload == "put"}
        for _ in range(args.reps):
            for kind in runs:
                runs[kind].append(measure(kind, workload, conns, args.transactions))
        report(workload, conns, runs)
        entry = {"workload": workload, "conns": conns, "depth": 1, "runs": runs}
        if args.profile:
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "perf.data")
                measure("fastbean", workload, conns, args.transactions, profile=path)
                shares = dso_shares(path)
                print("  fastbean's CPU samples by library: " + "  ".join(
                    "%s %.1f%%" % (g, 100 * s) for g, s in sorted(shares.items(), key=lambda x: -x[1])))
                for label, filt in (("kernel", "[kernel"), ("python", "python3"), ("uvloop", "loop.cpython")):
                    syms = top_symbols(path, filt)
                    print("  top %s symbols: %s" % (label, ", ".join("%s %.1f%%" % (s, 100 * p) for p, s in syms)))
                entry["profile"] = shares
        results.append(entry)
    write_results(args.out, started, transactions=args.transactions, reps=args.reps, results=results)


if __name__ == "__main__":
    main()
