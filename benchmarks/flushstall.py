"""How long a flush-tube holds up other clients' replies, with a binlog.

    python -m benchmarks.flushstall                    # 200,000 jobs, -f 0, 3 runs
    python -m benchmarks.flushstall --jobs 1000000 --fsync 50 --runs 3
    python -m benchmarks.flushstall --fsync none       # no binlog, for comparison

Each run starts a fresh fastbean (-b in a temporary directory and -f as
given), fills tube `big` with one-byte jobs, then one client sends
`flush-tube big` while a probe client, in a tube of its own, sends
`stats-tube probe` and `put` to `probe` one at a time until the FLUSHED
reply is in, timing each reply. A reply that waits for every binlog record
(as before issue 35) waits for the flush's too; one that waits only for the
records it shows or confirms does not. The worst and median waits of each
command, and the flush's duration, per run; the spread over the runs.
"""
import argparse
import statistics
import sys
import threading
import time

from tests.support.servers import Server, client, put_many


def one_run(jobs, fsync):
    args = () if fsync == "none" else ("-f", fsync)
    srv = Server("fastbean", *args, binlog=fsync != "none").start()
    try:
        with client(srv.port, 60) as filler:
            filler.cmd(b"use big", b"USING big")
            put_many(filler, jobs)
        flusher, probe = client(srv.port, 120), client(srv.port, 60)
        probe.cmd(b"use probe", b"USING probe")
        probe.cmd(b"put 0 0 60 1\r\nx", None)     # the probe tube exists
        done = threading.Event()
        reply = []

        def flush():
            reply.append(flusher.cmd(b"flush-tube big"))
            done.set()

        waits = {"stats-tube": [], "put": []}
        started = time.perf_counter()
        t = threading.Thread(target=flush)
        t.start()
        while not done.is_set():
            t0 = time.perf_counter()
            probe.yaml(b"stats-tube probe")
            t1 = time.perf_counter()
            probe.cmd(b"put 0 0 60 1\r\nx")
            t2 = time.perf_counter()
            waits["stats-tube"].append(t1 - t0)
            waits["put"].append(t2 - t1)
        t.join()
        took = time.perf_counter() - started
        assert reply == [b"FLUSHED %d" % jobs], reply
        flusher.close()
        probe.close()
        return took, waits
    finally:
        srv.cleanup()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=200_000)
    ap.add_argument("--fsync", default="0", help="-f value in ms, or 'none' for no binlog")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args(argv)
    worst = {"stats-tube": [], "put": []}
    for i in range(a.runs):
        took, waits = one_run(a.jobs, a.fsync)
        line = ["run %d: flush of %d jobs %.0f ms;" % (i + 1, a.jobs, took * 1000)]
        for name, w in waits.items():
            worst[name].append(max(w))
            line.append("%s n=%d worst %.1f ms median %.2f ms;" % (
                name, len(w), max(w) * 1000, statistics.median(w) * 1000))
        print(" ".join(line), flush=True)
    worst["either"] = [max(a, b) for a, b in zip(worst["stats-tube"], worst["put"])]
    for name, w in worst.items():
        print("%s worst wait over %d runs: %.1f-%.1f ms (median of worsts %.1f ms)" % (
            name, a.runs, min(w) * 1000, max(w) * 1000, statistics.median(w) * 1000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
