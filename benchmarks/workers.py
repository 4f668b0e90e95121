"""fastbean's worker against RQ and Celery: whole job systems, end to end, one run.

    python -m benchmarks.workers                                  # the issue's sizes, 3 rounds
    python -m benchmarks.workers --jobs 2000 --sleep-jobs 1000    # what fits in a few minutes
    python -m benchmarks.workers --systems fastbean --concurrency 8 --rounds 1   # a smoke run

Each system runs in its documented configuration, as separate processes:
  fastbean  a fastbean server (no binlog) and `python -m fastbean.worker
            benchmarks.workload.fastbean_app:app -c N -q`, a Tasks app's worker
            (fastbean-binlog: the same server with -b DIR, default fsync)
  rq        Debian's redis-server and N `rq worker -q` processes (RQ runs one job at a
            time per worker and forks a work horse for each; more workers, more jobs)
  celery    redis-server as the broker and `celery -A benchmarks.workload.celery_app
            worker -c N` (the default prefork pool, default acks and prefetch)
Per-job logs are off in all three (fastbean's -q, RQ's -q, Celery's default level).

Two workloads: no-op tasks (--jobs) and tasks that sleep 10 ms (--sleep-jobs),
each at every --concurrency. The workers start first; once they wait for work,
a producer process puts the jobs as fast as it can with the system's own client
API, the put time in each job; each task appends (put, start, finish) to a file
of its process on /dev/shm (benchmarks/workload). Measured: jobs per second from
the first put to the last finish, the p50 and p99 of start - put, and CPU per
job of every process of the system (server or Redis, workers and their
children, the producer's puts), with the CPU steal (/proc/stat) and the load
average of each run. Systems alternate within a round (fastbean, rq, celery,
then the next concurrency); a round's runs make its ratios, and rounds with
over 10% steal in either run are left out of them. Results go to
benchmarks/results/workers.json.
"""
import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.harness import STEAL_LIMIT, busy_seconds, cpu_times, steal, write_results
from benchmarks.workload import LINE
from fastbean.errors import FastbeanError
from tests.support.servers import REDIS_SERVER, RedisServer, Server, client, redis_call

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
SYSTEMS = ("fastbean", "rq", "celery", "fastbean-binlog")
WORKLOADS = ("noop", "sleep")
CLK_TCK = os.sysconf("SC_CLK_TCK")
READY_S = 180.0                 # 64 Python workers start in well under this on 2 cores
SLOWEST = 20                    # jobs/s: RQ ran 24 at the least on 2 cores (docs/benchmarks.md)
SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None
# the goals: fastbean / other, jobs per second
GOALS = {("noop", "rq"): 5.0, ("noop", "celery"): 2.0, ("sleep", "rq"): 1.0, ("sleep", "celery"): 1.0}


class Usage(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise Usage(message)


# -- processes

def proc_table():
    """{pid: (ppid, cpu seconds of it and of its children it has waited for)}."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15)
        out[int(name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / CLK_TCK)
    return out


def tree(roots, table=None):
    """The pids of roots and of all their descendants."""
    table = table or proc_table()
    kids = {}
    for pid, (ppid, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    seen, todo = set(), [r for r in roots if r in table]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo += kids.get(pid, ())
    return seen


def tree_cpu(roots):
    """CPU seconds of roots and their live descendants so far, children they reaped
    included (an RQ work horse is in its worker's cutime once the worker waited for it)."""
    table = proc_table()
    return sum(table[p][1] for p in tree(roots, table))


def stop_all(procs, timeout=20.0):
    """SIGTERM each Popen (and whatever it started, by pid), wait, then SIGKILL what is left."""
    live = [p for p in procs if p.poll() is None]
    pids = tree([p.pid for p in live])
    for p in live:
        try:
            p.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    for p in live:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for pid in pids & set(proc_table()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in live:
        if p.poll() is None:
            p.kill()
        p.wait()


def tail(path, n=2000):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


# -- the systems

class System:
    """One system's server (or broker) and workers, started on free ports; a context manager."""

    def __init__(self, name, concurrency, tmp):
        self.name, self.concurrency, self.tmp = name, concurrency, tmp
        self.server = self.port = None
        self.workers = []
        self.record_dir = tempfile.mkdtemp(prefix="wbench-", dir=SHM)
        self.env = dict(os.environ, WBENCH_DIR=self.record_dir,
                        PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def spawn(self, cmd, log):
        with open(os.path.join(self.tmp, log), "ab") as out:
            self.workers.append(subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL,
                                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True))

    def start(self):
        n, py = self.concurrency, sys.executable
        if self.name.startswith("fastbean"):
            self.server = Server("fastbean", binlog=self.name == "fastbean-binlog").start(60)
            self.port = self.server.port
            self.env["WBENCH_PORT"] = str(self.port)
            self.spawn([py, "-m", "fastbean.worker", "benchmarks.workload.fastbean_app:app", "-c", str(n),
                        "-q", "-l", "127.0.0.1", "-p", str(self.port)], "worker.log")
        else:
            self.server = RedisServer().start()
            self.port = self.server.port
            url = "redis://127.0.0.1:%d/0" % self.port
            if self.name == "rq":
                for i in range(n):
                    self.spawn([py, "-m", "rq.cli", "worker", "-q", "-u", url, "wbench"], "rq-%d.log" % i)
            else:
                self.env["WBENCH_BROKER"] = url
                self.spawn([py, "-m", "celery", "-A", "benchmarks.workload.celery_app", "worker", "-c", str(n),
                            "-l", "WARNING"], "celery.log")
        self.wait_ready()
        return self

    def waiting(self):
        """How many of the workers' connections wait for work."""
        if self.name.startswith("fastbean"):
            try:
                with client(self.port) as c:
                    return c.yaml(b"stats-tube wbench").get("current-watching", 0)
            except Exception:
                return 0
        lines = redis_call(self.port, "CLIENT", "LIST").decode().splitlines()
        return sum(" flags=b " in x for x in lines)          # blocked: BLMOVE (RQ 3), BRPOP (Celery)

    def expected_waiting(self):
        if self.name.startswith("fastbean"):       # the worker's lanes (fastbean.worker.Worker)
            from fastbean.worker import MAX_BATCH
            return math.ceil(self.concurrency / min(self.concurrency, MAX_BATCH))
        return self.concurrency if self.name == "rq" else 1

    def wait_ready(self):
        deadline, want = time.monotonic() + READY_S, self.expected_waiting()
        while self.waiting() < want:
            dead = [w for w in self.workers if w.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError("%s workers did not start (%s):\n%s" % (
                    self.name, "one exited" if dead else "timed out",
                    "".join(tail(os.path.join(self.tmp, f)) for f in sorted(os.listdir(self.tmp))[:2])))
            time.sleep(0.2)
        if self.name == "celery":
            # the master consumes before its pool children have all forked: wait for them too
            while len(tree([self.workers[0].pid])) < self.concurrency + 1:
                if time.monotonic() > deadline:
                    raise RuntimeError("celery's pool did not start")
                time.sleep(0.2)

    def pids(self):
        return [self.server.pid] + [w.pid for w in self.workers]

    def server_pid(self):
        return self.server.pid

    def stop(self):
        try:
            stop_all(self.workers)
        finally:
            self.workers = []
            if self.server is not None:
                if isinstance(self.server, Server):
                    self.server.cleanup()
                else:
                    self.server.stop()
                self.server = None
            shutil.rmtree(self.record_dir, ignore_errors=True)

    # -- one workload

    def recorded(self):
        total = 0
        for name in os.listdir(self.record_dir):
            try:
                total += os.stat(os.path.join(self.record_dir, name)).st_size
            except FileNotFoundError:
                pass
        return total // LINE

    def take_records(self):
        """Every record so far, as (put, start, finish); the files are emptied."""
        out = []
        for name in os.listdir(self.record_dir):
            path = os.path.join(self.record_dir, name)
            with open(path, "rb") as f:
                data = f.read()
            os.truncate(path, 0)
            for line in data.splitlines():
                put, start, finish = line.split()
                out.append((float(put), float(start), float(finish)))
        return out

    def run(self, workload, n, timeout):
        """Put n jobs of the workload, wait for all to be run; the measures as a dict."""
        with open("/proc/loadavg") as f:
            load = float(f.read().split()[0])
        pids = self.pids()
        cpu0, srv0, machine0 = tree_cpu(pids), tree_cpu([self.server_pid()]), cpu_times()
        producer = subprocess.Popen([sys.executable, "-m", "benchmarks.workload.produce", self.name, workload,
                                     str(n), str(self.port)], cwd=ROOT, env=self.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while self.recorded() < n:
                if time.monotonic() > deadline:
                    raise RuntimeError("%s: %d of %d %s jobs run in %.0f s" % (
                        self.name, self.recorded(), n, workload, timeout))
                if producer.poll() not in (None, 0):
                    raise RuntimeError("%s's producer failed: %s" % (
                        self.name, producer.stderr.read().decode()[-2000:]))
                dead = [w for w in self.workers if w.poll() is not None]
                if dead:
                    raise RuntimeError("%s: a worker exited (%d)" % (self.name, dead[0].returncode))
                time.sleep(0.02)
            out, err = producer.communicate(timeout=60)
            if producer.returncode != 0:
                raise RuntimeError("%s's producer failed: %s" % (self.name, err.decode()[-2000:]))
        finally:
            stop_all([producer])
        time.sleep(0.05)        # the last work horse reaped, the last ack sent
        cpu1, srv1, machine1 = tree_cpu(pids), tree_cpu([self.server_pid()]), cpu_times()
        prod = json.loads(out.decode().strip().splitlines()[-1])
        recs = self.take_records()
        if len(recs) != n:
            raise RuntimeError("%s: %d records for %d jobs" % (self.name, len(recs), n))
        first_put, last_finish = min(r[0] for r in recs), max(r[2] for r in recs)
        waits = sorted(r[1] - r[0] for r in recs)
        system_cpu = cpu1 - cpu0 + prod["cpu_s"]
        wall = last_finish - first_put
        return {
            "jobs": n, "wall_s": wall, "jobs_per_s": n / wall,
            "p50_ms": 1000 * waits[len(waits) // 2],
            "p99_ms": 1000 * waits[min(len(waits) - 1, int(0.99 * len(waits)))],
            "cpu_ms_per_job": 1000 * system_cpu / n,
            "cpu_s": {"server": srv1 - srv0, "workers": cpu1 - cpu0 - (srv1 - srv0), "producer": prod["cpu_s"]},
            "put_per_s": n / max(1e-9, prod["last_put"] - prod["first_put"]),
            "steal": steal(machine0, machine1), "load1": load,
            "others_cores": max(0.0, busy_seconds(machine0, machine1) - system_cpu) / max(1e-9, wall),
        }


# -- the report

def spread(values):
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "rounds": len(values)}


def cell(sp):
    return "n/a" if sp is None else "%.2fx (%.2f-%.2f)" % (sp["median"], sp["min"], sp["max"])


def summarize(results, systems):
    """Per workload and concurrency: medians per system, and fastbean's ratio to each
    other system per round (rounds with too much steal in either run left out)."""
    rows = []
    keys = sorted({(r["workload"], r["concurrency"]) for r in results}, key=lambda k: (WORKLOADS.index(k[0]), k[1]))
    for key in keys:
        runs = {s: {r["round"]: r for r in results if (r["workload"], r["concurrency"]) == key and r["system"] == s}
                for s in systems}
        med = {}
        for s, by_round in runs.items():
            rs = list(by_round.values())
            if rs:
                med[s] = {k: statistics.median(r[k] for r in rs)
                          for k in ("jobs_per_s", "p50_ms", "p99_ms", "cpu_ms_per_job", "steal", "load1")}
                for part in ("server", "workers", "producer"):
                    med[s][part + "_ms_per_job"] = statistics.median(1000 * r["cpu_s"][part] / r["jobs"] for r in rs)
        ratios = {}
        for other in systems:
            if other == "fastbean" or "fastbean" not in runs:
                continue
            vals = [runs["fastbean"][rd]["jobs_per_s"] / runs[other][rd]["jobs_per_s"]
                    for rd in runs["fastbean"] if rd in runs[other]
                    and runs["fastbean"][rd]["steal"] <= STEAL_LIMIT and runs[other][rd]["steal"] <= STEAL_LIMIT]
            ratios[other] = spread(vals)
        rows.append({"workload": key[0], "concurrency": key[1], "median": med, "ratios": ratios})
    return rows


def report(rows, systems):
    """Two tables: jobs/s of each system and fastbean's ratios; then latency and CPU per system."""
    others = [x for x in systems if x != "fastbean"]
    lines = ["%-10s" % "workload" + "".join("%16s" % x for x in systems) +
             "".join("  %-21s" % ("f/%s (lo-hi)" % x) for x in others)]
    for row in rows:
        m = row["median"]
        lines.append("%-10s" % ("%s c%d" % (row["workload"], row["concurrency"])) +
                     "".join("%16s" % ("%.0f" % m[x]["jobs_per_s"] if x in m else "-") for x in systems) +
                     "".join("  %-21s" % cell(row["ratios"].get(x)) for x in others))
    lines += ["", "%-10s %-16s %9s %9s %11s   %s" % ("workload", "system", "p50 ms", "p99 ms", "CPU ms/job",
                                                     "server / workers / producer")]
    for row in rows:
        for x in systems:
            v = row["median"].get(x)
            if v is not None:
                lines.append("%-10s %-16s %9.1f %9.1f %11.2f   %.3f / %.3f / %.3f" % (
                    "%s c%d" % (row["workload"], row["concurrency"]), x, v["p50_ms"], v["p99_ms"],
                    v["cpu_ms_per_job"], v["server_ms_per_job"], v["workers_ms_per_job"], v["producer_ms_per_job"]))
    return "\n".join(x.rstrip() for x in lines)


def targets(rows):
    out = []
    for row in rows:
        for other, sp in row["ratios"].items():
            goal = GOALS.get((row["workload"], other))
            if goal is not None and sp is not None:
                out.append({"what": "%s c%d fastbean/%s" % (row["workload"], row["concurrency"], other),
                            "ratio": sp["median"], "goal": goal, "met": sp["median"] >= goal})
    return out


# -- arguments

def positive(text):
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError("not a whole number above 0: %r" % text)
    return v


def concurrency_list(text):
    return [positive(x) for x in text.split(",")]


def system_list(text):
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in names if x not in SYSTEMS]
    if bad or not names:
        raise argparse.ArgumentTypeError("no system %r (known: %s)" % (",".join(bad) or text, ", ".join(SYSTEMS)))
    return list(dict.fromkeys(names))


def workload_list(text):
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in names if x not in WORKLOADS]
    if bad or not names:
        raise argparse.ArgumentTypeError("no workload %r (known: %s)" % (",".join(bad) or text, ", ".join(WORKLOADS)))
    return list(dict.fromkeys(names))


def build_parser():
    ap = Parser(prog="python -m benchmarks.workers", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--jobs", type=positive, metavar="N", default=100_000, help="no-op tasks per run (default 100000)")
    ap.add_argument("--sleep-jobs", type=positive, metavar="N", default=10_000,
                    help="10 ms tasks per run (default 10000)")
    ap.add_argument("--concurrency", type=concurrency_list, metavar="N,N,...", default=[1, 8, 64],
                    help="comma-separated handler counts (default 1,8,64)")
    ap.add_argument("--rounds", type=positive, metavar="R", default=3, help="rounds (default 3)")
    ap.add_argument("--systems", type=system_list, metavar="NAME,...", default=["fastbean", "rq", "celery"],
                    help="comma-separated, from %s (default fastbean,rq,celery)" % ",".join(SYSTEMS))
    ap.add_argument("--workloads", type=workload_list, metavar="NAME,...", default=list(WORKLOADS),
                    help="comma-separated: noop, sleep (default both)")
    ap.add_argument("--timeout", type=positive, metavar="SECONDS", default=None,
                    help="seconds a run may take (default: 600, or N / %d if longer)" % SLOWEST)
    ap.add_argument("--json", default=os.path.join(RESULTS, "workers.json"), help="where results go")
    ap.add_argument("--report", metavar="JSON", help="print the tables of a saved run, and run nothing")
    return ap


def check_installed(systems):
    if any(s in ("rq", "celery") for s in systems) and not os.path.exists(REDIS_SERVER):
        raise Usage("no redis-server at %s (apt-get install redis-server, or set REDIS_SERVER)" % REDIS_SERVER)
    for s in systems:
        mods = {"rq": ("rq", "redis"), "celery": ("celery", "redis")}.get(s, ())
        for m in mods:
            try:
                __import__(m)
            except ImportError:
                raise Usage("%s needs the %s package: python3 -m pip install -e '.[bench]'" % (s, m)) from None


def interrupted(signum, frame):
    raise KeyboardInterrupt


def main(argv=None):
    try:
        args = build_parser().parse_args(argv)
        if args.report:
            try:
                with open(args.report) as f:
                    doc = json.load(f)
                sizes, runs, systems, rounds = doc["sizes"], doc["runs"], doc["systems"], doc["rounds"]
            except (OSError, ValueError, KeyError) as e:
                raise Usage("cannot read %s: %s" % (args.report, e)) from None
            show(runs, systems, sizes, rounds)
            return 0
        check_installed(args.systems)
    except Usage as e:
        sys.stderr.write("python -m benchmarks.workers: %s\n" % e)
        return 2
    # Ctrl-C, or SIGTERM, even where the shell started it ignoring SIGINT: stop what it started
    saved = signal.signal(signal.SIGINT, signal.default_int_handler), signal.signal(signal.SIGTERM, interrupted)
    try:
        return run(args)
    finally:
        signal.signal(signal.SIGINT, saved[0])
        signal.signal(signal.SIGTERM, saved[1])


def run(args):
    sizes = {"noop": args.jobs, "sleep": args.sleep_jobs}
    started = time.time()
    results = []
    tmp = tempfile.mkdtemp(prefix="fastbean-wbench-")
    total = args.rounds * len(args.concurrency) * len(args.systems) * len(args.workloads)
    n = 0
    try:
        for rd in range(args.rounds):
            for conc in args.concurrency:
                for name in args.systems:
                    logs = tempfile.mkdtemp(dir=tmp)
                    with System(name, conc, logs) as system:
                        t0 = time.monotonic()
                        system.start()
                        ready = time.monotonic() - t0
                        for w in args.workloads:
                            n += 1
                            res = system.run(w, sizes[w], args.timeout or max(600, sizes[w] / SLOWEST))
                            res.update(system=name, workload=w, concurrency=conc, round=rd, ready_s=ready)
                            results.append(res)
                            print("[%d/%d] round %d %-8s %-5s c%-3d %8.0f jobs/s  p50 %7.1f ms  p99 %7.1f ms  "
                                  "cpu %.2f ms/job  steal %.0f%%  load %.1f" % (
                                      n, total, rd + 1, name, w, conc, res["jobs_per_s"], res["p50_ms"],
                                      res["p99_ms"], res["cpu_ms_per_job"], 100 * res["steal"], res["load1"]),
                                  file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        sys.stderr.write("python -m benchmarks.workers: interrupted; the processes it started are stopped\n")
        return 130
    except (RuntimeError, OSError, FastbeanError) as e:    # a system that did not start, or did not finish
        sys.stderr.write("python -m benchmarks.workers: %s\n" % e)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows, checks = show(results, args.systems, sizes, args.rounds)
    write_results(args.json, started, sizes=sizes, rounds=args.rounds, concurrency=args.concurrency,
                  systems=args.systems, runs=results, summary=rows, targets=checks)
    return 0


def show(results, systems, sizes, rounds):
    """Print the tables, the targets and the steal of a run's results; (summary rows, targets)."""
    rows = summarize(results, systems)
    loads = [r["load1"] for r in results]
    print()
    ran = {r["workload"] for r in results}
    jobs = ", ".join("%d %s" % (sizes[w], label) for w, label in (("noop", "no-op"), ("sleep", "sleeping 10 ms"))
                     if w in ran)
    print("jobs: %s; %d rounds; jobs/s are medians of the rounds, ratios fastbean's jobs/s over the other's, "
          "median (lowest-highest round)" % (jobs, rounds))
    print(report(rows, systems))
    checks = targets(rows)
    if checks:
        print("\ntargets (the issue's: no-op >= 5x RQ and >= 2x Celery; sleeping: no worse):")
        for c in checks:
            print("  %-4s %-30s %6.2fx  (goal >= %gx)" % (
                "ok" if c["met"] else "MISS", c["what"], c["ratio"], c["goal"]))
    stolen = sum(r["steal"] > STEAL_LIMIT for r in results)
    print("\nCPU steal: at most %.1f%% in a run; load average (1 min) at the runs' start: %.1f to %.1f" % (
        100 * max(r["steal"] for r in results), min(loads), max(loads)))
    if stolen:
        print("%d of %d runs had over %d%% CPU steal; their rounds are left out of the ratios"
              % (stolen, len(results), 100 * STEAL_LIMIT))
    return rows, checks

if __name__ == "__main__":
    sys.exit(main())
