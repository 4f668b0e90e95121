"""How badly an overload storm stalls other clients: C beanstalkd against fastbean.

    python -m benchmarks.storms                  # the issue's sizes (a few minutes)
    python -m benchmarks.storms --quick          # sizes x 0.02
    python -m benchmarks.storms --scale 0.1 --only kick --only ttr

Each scenario runs on a fresh beanstalkd, then on a fresh fastbean, with the same
sizes (x --scale). A probe client (loadgen -w probe: one put/reserve/delete
roundtrip every millisecond, in a tube of its own) runs across the storm; its
worst latency is how long other clients were stalled. The same probe on the idle
server, before anything else, gives the baseline.

  delayed-expiry  1,000,000 delayed jobs in an unwatched tube come due together
  kick            `kick 1000000` on 1,000,000 buried jobs
  flush           `flush-tube` of 1,000,000 buried jobs on fastbean, beside `kick 1000000`
                  of as many on beanstalkd, which has no flush
  ttr-expiry      200,000 jobs reserved with TTR 1 (over 10 connections) expire
  pipeline-flood  one client writes 100,000 puts in one burst and reads the replies
  many-tubes      roundtrip throughput of 10 connections on a quiet server, then
                  beside 10,000 idle connections and 10,000 tubes each holding
                  one delayed job

Storm duration is how long the server needed, from the storm's start: until
stats-tube showed every job ready (expiries; polled every 10 ms), until KICKED
came back (kick), until FLUSHED came back (flush), until the last reply (flood). beanstalkd 1.12 loses TTR
expiries (upstream issues #380, #262): some of its connections keep their jobs
reserved long past the TTR, how many varies from run to run. Then its storm is
smaller than fastbean's, the table says how many jobs did come back, and the
storm duration is unknown ("?").

Delays are whole seconds, so jobs come due together only as closely as their
puts were made: the delayed fill puts only during the first --due-window seconds
(0.1) of each second, with a delay one second shorter each second, so every
deadline falls within about that window. A fill spread evenly over whole seconds
would trickle due at a rate any server keeps up with.

The table goes to the terminal, everything measured to benchmarks/results/storms.json.
"""
import argparse
import math
import os
import re
import resource
import selectors
import socket
import sys
import time

from benchmarks.harness import build_loadgen, finish, loadgen, write_results
from tests.support.servers import KINDS, Server

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

SIZES = {                       # at --scale 1
    "delayed-expiry": 1_000_000,
    "kick": 1_000_000,
    "flush": 1_000_000,
    "ttr-expiry": 200_000,
    "pipeline-flood": 100_000,
    "many-tubes": 10_000,       # idle connections, and as many tubes
}
TUBE = b"storm"
# Bodies are lowercase letters (loadgen's are too): no reply word, no CRLF, so a
# batch of replies is complete when its line ends are all in.
BODY = b"abcdefghij"
BATCH = 5000                    # commands per write in the pipelined fills
BURY_BATCH = 500                # jobs reserved, then buried, per write
LONG_DELAY = 1_000_000          # seconds: never due while we measure
RESERVED = re.compile(rb"RESERVED (\d+) ")
INSERTED = re.compile(rb"INSERTED (\d+)\r\n")


def progress(msg):
    print(msg, file=sys.stderr, flush=True)


def put_lines(count, delay=0, ttr=60):
    return b"put 0 %d %d %d\r\n%s\r\n" % (delay, ttr, len(BODY), BODY) * count


class Pipe:
    """A pipelined client: writes a whole batch of commands while it reads their replies."""

    def __init__(self, port, timeout=600.0):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.sock, selectors.EVENT_READ)
        self.timeout = timeout

    def exchange(self, data, lines):
        """Send data; return the replies once `lines` line ends have come back.
        Writing and reading interleave: with a blocking sendall of a big batch, both
        sides' socket buffers could fill up and each wait on the other."""
        out = memoryview(data)
        buf = bytearray()
        seen = 0
        if out:
            self.sel.modify(self.sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
        while seen < lines or out:
            events = self.sel.select(self.timeout)
            if not events:
                raise TimeoutError("no reply in %.0f s" % self.timeout)
            for _, ev in events:
                if ev & selectors.EVENT_WRITE:
                    try:
                        out = out[self.sock.send(out[:1 << 20]):]
                    except BlockingIOError:
                        pass
                    if not out:
                        self.sel.modify(self.sock, selectors.EVENT_READ)
                if ev & selectors.EVENT_READ:
                    try:
                        chunk = self.sock.recv(1 << 20)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        raise ConnectionError("server closed the connection")
                    start = max(len(buf) - 1, 0)      # a CRLF may straddle two reads
                    buf += chunk
                    seen += buf.count(b"\r\n", start)
        return bytes(buf)

    def tube_stat(self, key, tube=TUBE):
        reply = self.exchange(b"stats-tube %s\r\n" % tube, 2)   # "OK n" and the YAML's end
        return int(re.search(rb"\n%s: (\d+)" % key, reply).group(1))

    def close(self):
        self.sel.close()
        self.sock.close()


def start_probe(port, seconds, args):
    """The probe in the background; returns (process, when it stops measuring)."""
    proc = loadgen(port, "probe", conns=1, interval_us=args.interval_us, seconds=round(seconds, 3),
                   background=True)
    return proc, time.monotonic() + seconds


def probe_result(proc):
    res = finish(proc)
    keep = ("transactions", "p50_us", "p99_us", "max_us", "errors", "first_error")
    return {k: res[k] for k in keep}


def wait_all_ready(pipe, n, give_up):
    """Poll stats-tube until n jobs are ready; return (when that was seen or None, jobs ready)."""
    while True:
        ready = pipe.tube_stat(b"current-jobs-ready")
        if ready >= n:
            return time.monotonic(), ready
        if time.monotonic() > give_up:
            return None, ready
        time.sleep(0.01)


def sleep_until(t):
    time.sleep(max(0.0, t - time.monotonic()))


# ---- scenarios: each gets a fresh server and returns what it measured ----

def delayed_expiry(srv, n, args):
    pipe = Pipe(srv.port)
    window = args.due_window
    # One window of puts, into a tube of its own and deleted again, gives how many
    # jobs one window holds, hence how many seconds the fill takes.
    pipe.exchange(b"use pilot\r\n", 1)
    ids, end = [], time.monotonic() + window
    while time.monotonic() < end:
        ids += INSERTED.findall(pipe.exchange(put_lines(BATCH, LONG_DELAY), BATCH))
    pipe.exchange(b"".join(b"delete %s\r\n" % i for i in ids), len(ids))
    windows = math.ceil(1.5 * n / len(ids))

    # Window k starts at t0 + k and puts with delay windows + 1 - k: every job is
    # due in [t0 + windows + 1, that + window + one batch's round trip).
    pipe.exchange(b"use %s\r\n" % TUBE, 1)
    t0 = time.monotonic()
    left, first, last, k = n, math.inf, 0.0, 0
    while left:
        k += 1
        if k > windows:
            raise RuntimeError("the delayed fill fell behind (a larger --due-window helps)")
        start = t0 + k
        sleep_until(start)
        delay = windows + 1 - k
        while left and time.monotonic() < start + window:
            b = min(BATCH, left)
            sent = time.monotonic()
            pipe.exchange(put_lines(b, delay), b)
            first, last = min(first, sent + delay), time.monotonic() + delay
            left -= b
    fill_s = time.monotonic() - t0
    progress("    filled %d delayed jobs in %.1f s; due in %.1f s, within %.3f s"
             % (n, fill_s, first - time.monotonic(), last - first))

    sleep_until(first - args.lead)
    probe, probe_end = start_probe(srv.port, last - time.monotonic() + args.tail, args)
    done, ready = wait_all_ready(pipe, n, probe_end + args.give_up)
    pipe.close()
    return {"probe": probe_result(probe), "storm_s": done and done - first,
            "covered": done is not None and done < probe_end, "ready": ready, "fill_s": fill_s,
            "due_spread_s": last - first}


def bury_all(srv, n):
    """n buried jobs in the storm tube; returns a Pipe that uses and watches it."""
    loadgen(srv.port, "put", conns=10, depth=16, body=len(BODY), seconds=0, total=n,
            tube=TUBE.decode())
    pipe = Pipe(srv.port)
    pipe.exchange(b"watch %s\r\nignore default\r\nuse %s\r\n" % (TUBE, TUBE), 3)
    t0 = time.monotonic()
    ids, left = [], n
    while left or ids:
        # Each write buries the last batch and reserves the next. Small batches:
        # beanstalkd rescans the connection's reserved list after every bury.
        b = min(BURY_BATCH, left)
        data = b"".join(b"bury %s 0\r\n" % i for i in ids)
        data += b"reserve-with-timeout 0\r\n" * b
        reply = pipe.exchange(data, len(ids) + 2 * b)
        ids, left = RESERVED.findall(reply), left - b
        if len(ids) != b:
            raise RuntimeError("reserve: %r" % reply[-80:])
    buried = pipe.tube_stat(b"current-jobs-buried")
    if buried != n:
        raise RuntimeError("%d jobs buried, not %d" % (buried, n))
    progress("    buried %d jobs in %.1f s" % (n, time.monotonic() - t0))
    return pipe


def one_command_storm(srv, pipe, line, want, args):
    """The probe across one command that works through the whole storm."""
    probe, probe_end = start_probe(srv.port, args.lead + args.tail, args)
    time.sleep(args.lead)
    t0 = time.monotonic()
    reply = pipe.exchange(line, 1)
    done = time.monotonic()
    if reply != want:
        raise RuntimeError("%r: %r" % (line, reply))
    pipe.close()
    return {"probe": probe_result(probe), "storm_s": done - t0, "covered": done < probe_end}


def kick(srv, n, args):
    pipe = bury_all(srv, n)
    return one_command_storm(srv, pipe, b"kick %d\r\n" % n, b"KICKED %d\r\n" % n, args)


def flush(srv, n, args):
    # beanstalkd has no flush-tube: its kick of as many buried jobs is the
    # yardstick, the other command that works through a whole tube at once
    pipe = bury_all(srv, n)
    if srv.kind == "beanstalkd":
        return one_command_storm(srv, pipe, b"kick %d\r\n" % n, b"KICKED %d\r\n" % n, args)
    return one_command_storm(srv, pipe, b"flush-tube %s\r\n" % TUBE, b"FLUSHED %d\r\n" % n,
                             args)


def ttr_expiry(srv, n, args):
    loadgen(srv.port, "put", conns=10, depth=16, body=len(BODY), seconds=0, total=n,
            tube=TUBE.decode(), ttr=args.ttr)
    # Several connections: after every expiry beanstalkd scans the connection's
    # whole reserved list for the next deadline, quadratic in the jobs one
    # connection holds (40,000 on one connection stalled it for 7 s here).
    conns = [Pipe(srv.port) for _ in range(min(args.ttr_conns, n))]
    for c in conns:
        c.exchange(b"watch %s\r\nignore default\r\n" % TUBE, 2)
    probe, probe_end = start_probe(srv.port, args.lead + args.ttr + args.tail, args)
    time.sleep(args.lead)
    t0 = time.monotonic()       # the first reservation, so the first expiry is at t0 + ttr
    for i, c in enumerate(conns):
        b = n // len(conns) + (i < n % len(conns))
        reply = c.exchange(b"reserve-with-timeout 0\r\n" * b, 2 * b)
        if reply.count(b"RESERVED ") != b:
            raise RuntimeError("reserve: %r" % reply[-80:])
    reserve_s = time.monotonic() - t0
    progress("    reserved %d jobs on %d connections in %.2f s" % (n, len(conns), reserve_s))
    done, ready = wait_all_ready(conns[0], n, probe_end + args.give_up)
    for c in conns:
        c.close()
    first = t0 + args.ttr
    return {"probe": probe_result(probe), "storm_s": done and done - first,
            "covered": done is not None and done < probe_end, "ready": ready, "reserve_s": reserve_s,
            "ttr": args.ttr, "conns": len(conns)}


def pipeline_flood(srv, n, args):
    pipe = Pipe(srv.port)
    data = b"use %s\r\n" % TUBE + put_lines(n)
    probe, probe_end = start_probe(srv.port, args.lead + args.tail, args)
    time.sleep(args.lead)
    t0 = time.monotonic()
    reply = pipe.exchange(data, n + 1)
    done = time.monotonic()
    if reply.count(b"INSERTED ") != n:
        raise RuntimeError("flood: %r" % reply[-80:])
    pipe.close()
    return {"probe": probe_result(probe), "storm_s": done - t0, "covered": done < probe_end,
            "bytes": len(data)}


def many_tubes(srv, n, args):
    def roundtrip():
        res = loadgen(srv.port, "roundtrip", conns=10, depth=1, body=len(BODY),
                      seconds=args.seconds, warmup=0.3)
        return {k: res[k] for k in ("ops_per_sec", "p50_us", "p99_us", "max_us", "errors")}

    quiet = roundtrip()
    idle = []
    t0 = time.monotonic()
    try:
        # In groups, waiting for each group's replies, so the accept backlog never overflows.
        for lo in range(0, n, 500):
            group = [socket.create_connection(("127.0.0.1", srv.port))
                     for _ in range(lo, min(n, lo + 500))]
            for i, s in enumerate(group, lo):
                s.sendall(b"use idle.%d\r\nput 0 %d 60 1\r\nx\r\n" % (i, LONG_DELAY))
            for s in group:
                got = b""
                while got.count(b"\r\n") < 2:
                    chunk = s.recv(256)
                    if not chunk:
                        raise ConnectionError("idle connection closed")
                    got += chunk
                if b"INSERTED" not in got:
                    raise RuntimeError("idle connection: %r" % got)
            idle += group
        progress("    %d idle connections and tubes in %.1f s" % (n, time.monotonic() - t0))
        loaded = roundtrip()
    finally:
        for s in idle:
            s.close()
    return {"quiet": quiet, "loaded": loaded,
            "loaded_over_quiet": loaded["ops_per_sec"] / quiet["ops_per_sec"]}


SCENARIOS = {
    "delayed-expiry": delayed_expiry,
    "kick": kick,
    "flush": flush,
    "ttr-expiry": ttr_expiry,
    "pipeline-flood": pipeline_flood,
    "many-tubes": many_tubes,
}


def measure(kind, name, n, args):
    with Server(kind).start(600) as srv:
        base = None
        if name != "many-tubes":
            base = probe_result(start_probe(srv.port, args.baseline, args)[0])
        res = SCENARIOS[name](srv, n, args)
        res["baseline"] = base
        res["server_rss_mb"] = round(srv.rss() / 2**20, 1)
    return res


# ---- report ----

def ms(us):
    return "%8.2f" % (us / 1000.0)


def ratio(f, b):
    return "%7.3fx" % (f / b) if b else "      - "


def table(results):
    lines = ["%-15s %8s  %18s  %18s  %18s  %18s %8s  %17s" % (
        "storm", "size", "idle max ms b/f", "p50 ms b/f", "p99 ms b/f", "max ms b/f", "f/b",
        "storm ms b/f")]
    for name, r in results.items():
        if name == "many-tubes":
            continue
        b, f = r["beanstalkd"], r["fastbean"]
        pb, pf = b["probe"], f["probe"]
        flags = "".join("  (%s: only %d of %d jobs came due)" % (k, r[k]["ready"], r["size"])
                        for k in KINDS if r[k].get("ready", r["size"]) < r["size"])
        flags += "".join("  (%s: probe ended before the storm did)" % k for k in KINDS
                         if not r[k]["covered"] and r[k].get("ready", r["size"]) >= r["size"])
        flags += "".join("  (%s: probe errors: %s)" % (k, r[k]["probe"]["first_error"])
                         for k in KINDS if r[k]["probe"]["errors"])
        storm = " / ".join("%8.1f" % (1000 * r[k]["storm_s"]) if r[k]["storm_s"] is not None
                           else "       ?" for k in KINDS)
        lines.append("%-15s %8d  %s /%s  %s /%s  %s /%s  %s /%s %s %s%s" % (
            name, r["size"], ms(b["baseline"]["max_us"]), ms(f["baseline"]["max_us"]),
            ms(pb["p50_us"]), ms(pf["p50_us"]), ms(pb["p99_us"]), ms(pf["p99_us"]),
            ms(pb["max_us"]), ms(pf["max_us"]), ratio(pf["max_us"], pb["max_us"]), storm, flags))
    if "many-tubes" in results:
        r = results["many-tubes"]
        b, f = r["beanstalkd"], r["fastbean"]
        lines += ["", "many-tubes: roundtrip ops/s of 10 connections, quiet and beside %d idle "
                  "connections + %d tubes with a delayed job" % (r["size"], r["size"]),
                  "%-11s %10s %10s %13s %14s" % ("", "quiet", "loaded", "loaded/quiet",
                                                   "loaded p99 ms")]
        for k in KINDS:
            lines.append("%-11s %10.0f %10.0f %12.2fx %14.2f" % (
                k, r[k]["quiet"]["ops_per_sec"], r[k]["loaded"]["ops_per_sec"],
                r[k]["loaded_over_quiet"], r[k]["loaded"]["p99_us"] / 1000))
        lines.append("%-11s %10s %10s %12.2fx" % (
            "f/b", ratio(f["quiet"]["ops_per_sec"], b["quiet"]["ops_per_sec"]).strip(),
            ratio(f["loaded"]["ops_per_sec"], b["loaded"]["ops_per_sec"]).strip(),
            f["loaded_over_quiet"] / b["loaded_over_quiet"]))
    return "\n".join(lines)


def raise_nofile():
    """Soft RLIMIT_NOFILE up to the hard limit, before any server starts: they inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="sizes x this (default 1)")
    ap.add_argument("--quick", action="store_true", help="--scale 0.02")
    ap.add_argument("--only", action="append", default=[],
                    help="run the scenarios whose name contains this (repeatable)")
    ap.add_argument("--interval-us", type=int, default=1000, help="probe: gap between roundtrips")
    ap.add_argument("--baseline", type=float, default=2.0, help="seconds of probe on the idle server")
    ap.add_argument("--lead", type=float, default=1.0, help="seconds of probe before a storm")
    ap.add_argument("--tail", type=float, default=None,
                    help="seconds of probe after a storm starts; it must outlast the storm, and "
                         "beanstalkd's TTR storm grows with the square of the size (3 + 20 x scale)")
    ap.add_argument("--give-up", type=float, default=10.0,
                    help="seconds past the probe to keep waiting for a storm to finish")
    ap.add_argument("--due-window", type=float, default=0.1,
                    help="delayed-expiry: put only this part of each second (deadline spread)")
    ap.add_argument("--ttr", type=int, default=1, help="ttr-expiry: the jobs' TTR")
    ap.add_argument("--ttr-conns", type=int, default=10, help="ttr-expiry: reserving connections")
    ap.add_argument("--seconds", type=float, default=3.0, help="many-tubes: seconds per throughput run")
    ap.add_argument("--json", default=os.path.join(RESULTS, "storms.json"))
    args = ap.parse_args(argv)
    if args.quick:
        args.scale = 0.02
    if args.tail is None:
        args.tail = 3 + 20 * args.scale
    names = [s for s in SCENARIOS if not args.only or any(o in s for o in args.only)]
    if not names:
        sys.exit("no scenario matches")
    nofile = raise_nofile()
    # this process and the server each hold one descriptor per idle connection
    if "many-tubes" in names and nofile < SIZES["many-tubes"] * args.scale + 100:
        sys.exit("RLIMIT_NOFILE hard limit %d is too low for many-tubes at this scale" % nofile)
    build_loadgen()

    started = time.time()
    results = {}
    for name in names:
        n = max(1, round(SIZES[name] * args.scale))
        results[name] = {"size": n}
        for kind in KINDS:
            progress("%s %d, %s:" % (name, n, kind))
            t0 = time.monotonic()
            res = results[name][kind] = measure(kind, name, n, args)
            if "probe" in res:
                p = res["probe"]
                progress("    probe max %.1f ms, p99 %.1f ms (idle max %.1f ms); storm %s s  [%.0f s]"
                         % (p["max_us"] / 1000, p["p99_us"] / 1000, res["baseline"]["max_us"] / 1000,
                            "?" if res["storm_s"] is None else "%.2f" % res["storm_s"],
                            time.monotonic() - t0))
            else:
                progress("    %.0f ops/s quiet, %.0f loaded  [%.0f s]" % (
                    res["quiet"]["ops_per_sec"], res["loaded"]["ops_per_sec"], time.monotonic() - t0))

    print()
    print("scale %g; latencies of a probe roundtrip every %d us; b = beanstalkd, f = fastbean"
          % (args.scale, args.interval_us))
    print(table(results))
    write_results(args.json, started, scale=args.scale, args=vars(args), results=results)


if __name__ == "__main__":
    main()
