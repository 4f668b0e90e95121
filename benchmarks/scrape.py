"""What a /metrics scrape costs the queue, with 10,000 tubes.

    python -m benchmarks.scrape                 # 5 rounds (about 1 minute)
    python -m benchmarks.scrape --rounds 3 --seconds 2

fastbean runs with --metrics and 10,000 tubes, tube i holding 1 + i % 5 jobs.
A probe client (loadgen -w probe: one put/reserve/delete round trip every
millisecond, in a tube of its own) runs for --seconds three times: with no
scrapes, while a scraper fetches /metrics every --every-ms (100) over one
keep-alive connection, and while it fetches back to back, the worst case
(Prometheus scrapes every 15 s or so). The three alternate for --rounds
rounds. The probe's worst latency with scrapes against without is what a
scrape stalls other clients by. Two servers are measured: the default
--metrics-tubes 100 (per-tube series for the 100 fullest tubes, the rest
summed) and --metrics-tubes 10000 (every tube its own series), which shows
what the cap saves.

The table goes to the terminal, everything measured to benchmarks/results/scrape.json.
"""
import argparse
import http.client
import os
import statistics
import sys
import threading
import time

from benchmarks.harness import build_loadgen, finish, loadgen, write_results
from benchmarks.storms import Pipe
from tests.support.servers import Server, free_port

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
BODY = b"abcdefghij"


def progress(msg):
    print(msg, file=sys.stderr, flush=True)


def fill(port, tubes):
    """tubes tubes, tube i holding 1 + i % 5 jobs (put in pipelined batches)."""
    pipe = Pipe(port)
    try:
        for lo in range(0, tubes, 1000):
            cmds, lines = [], 0
            for i in range(lo, min(tubes, lo + 1000)):
                cmds.append(b"use t.%d\r\n" % i)
                cmds.append(b"put 0 0 60 %d\r\n%s\r\n" % (len(BODY), BODY) * (1 + i % 5))
                lines += 2 + i % 5
            pipe.exchange(b"".join(cmds), lines)
    finally:
        pipe.close()


class Scraper(threading.Thread):
    """GET /metrics every `every` seconds (0: back to back) until stopped;
    records each scrape's time and size."""

    def __init__(self, port, every):
        super().__init__(daemon=True)
        self.port = port
        self.every = every
        self.stopping = threading.Event()
        self.times = []
        self.size = 0

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            while not self.stopping.wait(self.every):
                t0 = time.perf_counter()
                conn.request("GET", "/metrics")
                resp = conn.getresponse()
                body = resp.read()
                if resp.status != 200:
                    raise RuntimeError("scrape answered %d" % resp.status)
                self.times.append(time.perf_counter() - t0)
                self.size = len(body)
        finally:
            conn.close()


def probe(port, seconds, interval_us):
    res = finish(loadgen(port, "probe", conns=1, interval_us=interval_us, seconds=seconds,
                         background=True))
    if res["errors"]:
        raise RuntimeError("probe errors: %s" % res["first_error"])
    return {k: res[k] for k in ("transactions", "p50_us", "p99_us", "max_us")}


def measure(cap, args):
    mport = free_port()
    with Server("fastbean", "--metrics", "127.0.0.1:%d" % mport, "--metrics-tubes", cap).start() as srv:
        t0 = time.monotonic()
        fill(srv.port, args.tubes)
        progress("  --metrics-tubes %d: %d tubes filled in %.1f s" % (
            cap, args.tubes, time.monotonic() - t0))
        rounds = []
        for r in range(args.rounds):
            res = {"quiet": probe(srv.port, args.seconds, args.interval_us)}
            for mode, every in (("paced", args.every_ms / 1000), ("back-to-back", 0)):
                scraper = Scraper(mport, every)
                scraper.start()
                res[mode] = probe(srv.port, args.seconds, args.interval_us)
                scraper.stopping.set()
                scraper.join()
                t = sorted(scraper.times)
                res[mode].update({"scrapes": len(t), "scrape_ms_p50": 1000 * t[len(t) // 2],
                                  "scrape_ms_max": 1000 * t[-1], "scrape_bytes": scraper.size})
            rounds.append(res)
            progress("    round %d: probe max %.2f ms quiet, %.2f ms scraping every %d ms, "
                     "%.2f ms back to back (%d scrapes of %d KiB, %.1f ms each)" % (
                         r + 1, res["quiet"]["max_us"] / 1000, res["paced"]["max_us"] / 1000,
                         args.every_ms, res["back-to-back"]["max_us"] / 1000,
                         res["back-to-back"]["scrapes"], res["back-to-back"]["scrape_bytes"] // 1024,
                         res["back-to-back"]["scrape_ms_p50"]))
        return {"rounds": rounds, "server_rss_mb": round(srv.rss() / 2**20, 1)}


def spread(values):
    return "%7.2f  %7.2f..%-7.2f" % (statistics.median(values), min(values), max(values))


def table(results, every_ms):
    lines = ["%-15s %-18s %24s %24s %24s %10s %10s" % (
        "--metrics-tubes", "scrapes", "max ms: median min..max", "p99 ms: median min..max",
        "p50 ms: median min..max", "scrape ms", "scrape KiB")]
    for cap, res in results.items():
        rounds = res["rounds"]
        for mode, label in (("quiet", "none"), ("paced", "every %d ms" % every_ms),
                            ("back-to-back", "back to back")):
            def col(key, mode=mode, rounds=rounds):
                return spread([r[mode][key] / 1000 for r in rounds])
            extra = ("%10.2f %10d" % (statistics.median(r[mode]["scrape_ms_p50"] for r in rounds),
                                      rounds[-1][mode]["scrape_bytes"] // 1024)
                     if mode != "quiet" else "")
            lines.append("%-15s %-18s %24s %24s %24s %s" % (
                cap if mode == "quiet" else "", label, col("max_us"), col("p99_us"),
                col("p50_us"), extra))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tubes", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds of each probe run")
    ap.add_argument("--interval-us", type=int, default=1000, help="probe: gap between round trips")
    ap.add_argument("--every-ms", type=int, default=100, help="the paced scraper's interval")
    ap.add_argument("--caps", default="100,10000", help="--metrics-tubes values to measure")
    ap.add_argument("--json", default=os.path.join(RESULTS, "scrape.json"))
    args = ap.parse_args(argv)
    build_loadgen()
    started = time.time()
    results = {}
    for cap in [int(c) for c in args.caps.split(",")]:
        results[cap] = measure(cap, args)
    print()
    print("%d tubes; probe: a put/reserve/delete round trip every %d us for %g s; %d rounds"
          % (args.tubes, args.interval_us, args.seconds, args.rounds))
    print(table(results, args.every_ms))
    write_results(args.json, started, args=vars(args), results=results)


if __name__ == "__main__":
    main()
