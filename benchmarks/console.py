"""What the web console costs the queue, with 10,000 tubes and 1,000,000 jobs.

    python -m benchmarks.console                  # 3 rounds (about 2 minutes)
    python -m benchmarks.console --rounds 5 --jobs 200000

fastbean runs with --console, 10,000 tubes and --jobs jobs spread over
them. Measured in one run, alternating for --rounds rounds:
- round-trip throughput (loadgen roundtrip: put, reserve, delete at depth 1,
  one connection, in a tube of its own) with no console client, and with
  --streams open overview pages (each an SSE stream of a sample a second)
  plus one page load of the overview a second; the ratio is what an open
  console costs a beanstalk client;
- the worst latency of a probe client (a round trip every millisecond)
  while a search for a body no job holds scans every job, against the same
  probe with nothing else running: what a search stalls others by;
- the time to serve /tubes (10,000 tubes, sorted by ready jobs) and a
  tube's page of jobs.

The table goes to the terminal, everything measured to benchmarks/results/console.json.
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time

from benchmarks.harness import build_loadgen, finish, loadgen, write_results
from benchmarks.storms import Pipe
from tests.support.servers import Server, free_port

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def progress(msg):
    print(msg, file=sys.stderr, flush=True)


def fill(port, tubes, jobs):
    """jobs jobs over tubes tubes, round robin in pipelined batches."""
    per = max(jobs // tubes, 1)
    pipe = Pipe(port)
    try:
        for lo in range(0, tubes, 200):
            cmds, lines = [], 0
            for i in range(lo, min(tubes, lo + 200)):
                cmds.append(b"use t.%d\r\n" % i)
                cmds.append(b"".join(b"put 0 0 600 12\r\njob-%08d\r\n" % (i * per + k) for k in range(per)))
                lines += 1 + per
            pipe.exchange(b"".join(cmds), lines)
    finally:
        pipe.close()


class Viewers(threading.Thread):
    """n SSE streams open, and one overview page load a second, until stopped."""

    def __init__(self, port, n):
        super().__init__(daemon=True)
        self.port, self.n = port, n
        self.stopping = threading.Event()
        self.events = 0

    def run(self):
        streams = []
        for _ in range(self.n):
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            conn.request("GET", "/events")
            streams.append((conn, conn.getresponse()))
        page = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            while not self.stopping.wait(1.0):
                page.request("GET", "/")
                page.getresponse().read()
                for _, resp in streams:
                    if resp.fp.readline().startswith(b"data: "):
                        self.events += 1
                        resp.fp.readline()
        finally:
            page.close()
            for conn, _ in streams:
                conn.close()


def get_ms(port, path, times=10):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    out = []
    try:
        for _ in range(times):
            t0 = time.perf_counter()
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise RuntimeError("%s answered %d" % (path, resp.status))
            out.append(1000 * (time.perf_counter() - t0))
    finally:
        conn.close()
    return statistics.median(out)


def search_while_probing(port, cport, seconds, interval_us):
    """The probe's result while back-to-back searches for a missing body scan every job."""
    proc = loadgen(port, "probe", conns=1, interval_us=interval_us, seconds=seconds, background=True)
    conn = http.client.HTTPConnection("127.0.0.1", cport, timeout=60)
    searches, scanned = 0, 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            q = "/search?q=no-such-body-%d&limit=1" % searches
            conn.request("GET", q)
            resp = conn.getresponse()
            resp.read()
            cookie = resp.getheader("Set-Cookie", "").split(";")[0]
            while time.monotonic() < deadline + 60:
                conn.request("GET", "/search.json?q=no-such-body-%d&limit=1" % searches, headers={"Cookie": cookie})
                s = json.loads(conn.getresponse().read())
                if s["state"] != "running":
                    scanned += s["scanned"]
                    break
                time.sleep(0.01)
            searches += 1
    finally:
        conn.close()
    res = finish(proc)
    return {"max_us": res["max_us"], "p99_us": res["p99_us"], "searches": searches, "scanned": scanned}


def measure(args):
    cport = free_port()
    with Server("fastbean", "--console", "127.0.0.1:%d" % cport).start() as srv:
        t0 = time.monotonic()
        fill(srv.port, args.tubes, args.jobs)
        progress("%d tubes, %d jobs filled in %.1f s" % (args.tubes, args.jobs, time.monotonic() - t0))
        rounds = []
        for r in range(args.rounds):
            res = {}
            res["quiet"] = loadgen(srv.port, "roundtrip", conns=1, depth=1, seconds=args.seconds, tube="bench")
            viewers = Viewers(cport, args.streams)
            viewers.start()
            time.sleep(0.5)
            res["viewed"] = loadgen(srv.port, "roundtrip", conns=1, depth=1, seconds=args.seconds, tube="bench")
            viewers.stopping.set()
            viewers.join()
            res["events"] = viewers.events
            res["probe_quiet"] = finish(loadgen(srv.port, "probe", conns=1, interval_us=args.interval_us,
                                                seconds=args.seconds, background=True))
            res["probe_search"] = search_while_probing(srv.port, cport, args.seconds, args.interval_us)
            res["tubes_ms"] = get_ms(cport, "/tubes?sort=ready&dir=desc")
            res["tube_ms"] = get_ms(cport, "/tubes/t.5000?state=ready")
            rounds.append(res)
            progress("  round %d: %.0f vs %.0f round trips/s viewed; probe max %.2f ms quiet, %.2f ms searching "
                     "(%d searches); /tubes %.1f ms" % (
                         r + 1, res["quiet"]["ops_per_sec"], res["viewed"]["ops_per_sec"],
                         res["probe_quiet"]["max_us"] / 1000, res["probe_search"]["max_us"] / 1000,
                         res["probe_search"]["searches"], res["tubes_ms"]))
        return rounds


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tubes", type=int, default=10_000)
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--streams", type=int, default=4, help="open overview pages (SSE streams)")
    ap.add_argument("--interval-us", type=int, default=1000, help="probe: gap between round trips")
    ap.add_argument("--json", default=os.path.join(RESULTS, "console.json"))
    args = ap.parse_args(argv)
    build_loadgen()
    started = time.time()
    rounds = measure(args)
    ratio = statistics.median(r["viewed"]["ops_per_sec"] / r["quiet"]["ops_per_sec"] for r in rounds)
    print()
    print("%d tubes, %d jobs; %d rounds of %g s" % (args.tubes, args.jobs, args.rounds, args.seconds))
    print("round trips at depth 1 with %d streaming pages / without: %.3f (median ratio)" % (args.streams, ratio))
    print("probe worst latency: %.2f ms quiet, %.2f ms while searches scan every job (medians)" % (
        statistics.median(r["probe_quiet"]["max_us"] for r in rounds) / 1000,
        statistics.median(r["probe_search"]["max_us"] for r in rounds) / 1000))
    print("/tubes (%d tubes, sorted): %.1f ms; a tube's page of jobs: %.1f ms (medians)" % (
        args.tubes, statistics.median(r["tubes_ms"] for r in rounds),
        statistics.median(r["tube_ms"] for r in rounds)))
    write_results(args.json, started, args=vars(args), rounds=rounds, ratio=ratio)


if __name__ == "__main__":
    main()
