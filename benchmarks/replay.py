"""Binlog replay time, cross-replays, and acknowledged jobs lost to a process kill.

    python -m benchmarks.replay                    # replay of 1,000,000 jobs of 100 bytes
    python -m benchmarks.replay --jobs 50000
    python -m benchmarks.replay --loss             # and the loss measurement
    python -m benchmarks.replay --loss-only

Replay: each server (C beanstalkd, fastbean) starts with -F on a fresh binlog
directory and gets N jobs of BODY bytes: by default 80% ready, 10% delayed by an
hour, 10% buried. It is stopped with SIGTERM (fastbean exits cleanly, beanstalkd
dies at once; its binlog is written as it goes). A fresh server of the same kind
then starts on the directory, and the time runs from its process start until
`stats` shows every job back in its state (the time of the first accepted
connection is shown as well: beanstalkd listens before it replays). Then the
other kind replays the same directory (cross-replay). For scale, "empty start"
is the time to the first `stats` on an empty directory (for fastbean mostly the
Python interpreter's start).

Loss (--loss): for each server and fsync policy (-f 50, beanstalkd's default,
and -f 0), producer connections put pipelined jobs as fast as they can and
keep the id of every INSERTED; the server is killed with SIGKILL mid-stream,
restarted on the same directory, and every acknowledged id is looked up with
`peek`. This is a process kill: written data survives in the page cache, so 0
lost is expected under both policies. Exposure to a power loss (what -f 50
trades for speed) cannot be measured here.

Table on the terminal, figures in benchmarks/results/replay.json.
"""
import argparse
import datetime
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time

from benchmarks.harness import build_loadgen, loadgen, machine, stats
from tests.support.servers import KINDS, Server

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
MB = 1 << 20
STATES = ("ready", "delayed", "buried", "reserved")


def binlog_server(kind, binlog_dir, *args):
    """A server on a binlog directory the caller owns, started and timed from now
    (wait_ready() or wait_replayed() waits for it)."""
    return Server(kind, *args, binlog=binlog_dir).spawn()


class Conn:
    """A blocking client connection with a read buffer, for pipelined commands."""

    def __init__(self, port, timeout=60.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = bytearray()
        self.pos = 0

    def _fill(self):
        del self.buf[:self.pos]         # compact only when more bytes are needed
        self.pos = 0
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("closed")
        self.buf += chunk

    def line(self):
        while True:
            i = self.buf.find(b"\r\n", self.pos)
            if i >= 0:
                line = bytes(self.buf[self.pos:i])
                self.pos = i + 2
                return line
            self._fill()

    def skip_body(self, n):
        while len(self.buf) - self.pos < n + 2:
            self._fill()
        self.pos += n + 2

    def send(self, data):
        self.sock.sendall(data)

    def close(self):
        self.sock.close()


def counts(st):
    return {s: int(st["current-jobs-" + s]) for s in STATES}


def wait_replayed(server, expect, settle=3.0, timeout=600.0):
    """Seconds from process start to the first accepted connection and to `stats` showing
    `expect`, and the counts seen last. If the counts answer but differ, they get `settle`
    seconds to change before we give up (a failed replay)."""
    connected = answered = None
    last = None
    while True:
        now = time.monotonic()
        if now - server.started > timeout:
            raise RuntimeError("%s did not replay within %.0f s" % (server.kind, timeout))
        if server.proc.poll() is not None:
            return {"connect_s": None, "ready_s": None, "counts": last,
                    "exit": server.proc.returncode}
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=1):
                pass
        except OSError:
            time.sleep(0.002)
            continue
        connected = connected or time.monotonic() - server.started
        try:
            seen = counts(stats(server.port))
        except (OSError, KeyError):
            time.sleep(0.002)
            continue
        if seen == expect:
            return {"connect_s": connected, "ready_s": time.monotonic() - server.started,
                    "counts": seen, "exit": None}
        if seen != last:
            last, answered = seen, time.monotonic()
        elif time.monotonic() - answered > settle:
            return {"connect_s": connected, "ready_s": None, "counts": seen, "exit": None}
        time.sleep(0.01)


def bury_all(port, tube, batch=500):
    """Reserve and bury every job of `tube`, pipelined a batch at a time."""
    c = Conn(port)
    c.send(b"watch %s\r\nignore default\r\n" % tube.encode())
    c.line(), c.line()
    n = 0
    while True:
        c.send(b"reserve-with-timeout 0\r\n" * batch)
        ids = []
        for _ in range(batch):
            reply = c.line().split()
            if reply[0] == b"RESERVED":
                ids.append(reply[1])
                c.skip_body(int(reply[2]))
        if ids:
            c.send(b"".join(b"bury %s 0\r\n" % i for i in ids))
            for _ in ids:
                assert c.line() == b"BURIED"
            n += len(ids)
        if len(ids) < batch:
            c.close()
            return n


def fill(port, jobs, body, share):
    """N jobs: a `share` delayed by an hour, a `share` buried, the rest ready. Returns the counts."""
    delayed = buried = int(jobs * share)
    ready = jobs - delayed - buried
    for total, tube, delay in ((ready, "bench", None), (delayed, "bench", 3600),
                               (buried, "bury", None)):
        if total:
            res = loadgen(port, "put", conns=10, depth=16, body=body, seconds=0, total=total,
                          tube=tube, delay=delay)
            if res["errors"] or res["transactions"] != total:
                raise RuntimeError("fill: %r" % res)
    if buried:
        bury_all(port, "bury")
    return {"ready": ready, "delayed": delayed, "buried": buried, "reserved": 0}


def dir_usage(path):
    names = [n for n in os.listdir(path) if n.startswith("binlog.")]
    return {"files": len(names),
            "bytes": sum(os.path.getsize(os.path.join(path, n)) for n in names)}


def replay_once(kind, path, expect):
    """Start `kind` on `path`, time its replay, read its RSS, stop it with SIGTERM."""
    server = binlog_server(kind, path, "-F")
    try:
        r = wait_replayed(server, expect)
        r["rss"] = server.rss() if r["exit"] is None else None
    finally:
        t0 = time.monotonic()
        server.stop()                   # SIGTERM, then SIGKILL after 30 s
    r["stop_s"], r["stop_exit"] = time.monotonic() - t0, server.proc.returncode
    r["ok"] = r["ready_s"] is not None
    return r


def empty_start(kind):
    path = tempfile.mkdtemp(prefix="fastbean-replay-")
    try:
        return replay_once(kind, path, {s: 0 for s in STATES})["ready_s"]
    finally:
        shutil.rmtree(path, ignore_errors=True)


def replay_bench(jobs, body, share):
    out = {}
    for kind in KINDS:
        other = KINDS[1 - KINDS.index(kind)]
        path = tempfile.mkdtemp(prefix="fastbean-replay-")
        try:
            server = binlog_server(kind, path, "-F")
            try:
                server.wait_ready(600)
                t0 = time.monotonic()
                expect = fill(server.port, jobs, body, share)
                fill_s = time.monotonic() - t0
            finally:
                server.stop()
            r = {"expect": expect, "fill_s": fill_s, "stop_exit": server.proc.returncode,
                 "binlog": dir_usage(path), "empty_start_s": empty_start(kind)}
            r["replay"] = replay_once(kind, path, expect)
            r["binlog_after_replay"] = dir_usage(path)
            r["cross_replay"] = dict(replay_once(other, path, expect), by=other)
            out[kind] = r
            print("%-10s fill %.1f s, replay %s, cross-replay by %s %s" % (
                kind, fill_s, fmt_s(r["replay"]["ready_s"]), other,
                fmt_s(r["cross_replay"]["ready_s"])), file=sys.stderr, flush=True)
        finally:
            shutil.rmtree(path, ignore_errors=True)
    return out


def fmt_s(x):
    return "FAILED" if x is None else "%.2f s" % x


def print_replay(res, jobs, body, share):
    print("\nreplay of %d jobs of %d B (%.0f%% ready, %.0f%% delayed, %.0f%% buried), "
          "written with -F" % (jobs, body, 100 * (1 - 2 * share), 100 * share, 100 * share))
    print("%-10s %6s %10s %10s %8s %12s %12s %8s %10s  %s" % (
        "written by", "files", "binlog MB", "connect s", "ready s", "empty start", "ready-empty",
        "RSS MB", "stopped", "cross-replay (by the other)"))
    for kind in KINDS:
        r = res[kind]
        rp, cr = r["replay"], r["cross_replay"]
        cross = "%s: %s, %s" % (cr["by"], fmt_s(cr["ready_s"]), "all jobs" if cr["ok"] else
                                "recovered %s (exit %s)" % (cr["counts"], cr["exit"]))
        print("%-10s %6d %10.1f %10s %8s %12.2f %12s %8s %10s  %s" % (
            kind, r["binlog"]["files"], r["binlog"]["bytes"] / MB,
            "%.3f" % rp["connect_s"] if rp["connect_s"] is not None else "-",
            "%.2f" % rp["ready_s"] if rp["ok"] else "FAILED", r["empty_start_s"],
            "%.2f" % (rp["ready_s"] - r["empty_start_s"]) if rp["ok"] else "-",
            "%.1f" % (rp["rss"] / MB) if rp["rss"] else "-",
            "exit %d" % r["stop_exit"] if r["stop_exit"] >= 0 else "signal %d" % -r["stop_exit"],
            cross))
    b, f = res["beanstalkd"]["replay"], res["fastbean"]["replay"]
    if b["ok"] and f["ok"]:
        print("fastbean / beanstalkd replay time: %.2fx" % (f["ready_s"] / b["ready_s"]))
    for kind in KINDS:
        for r in (res[kind]["replay"], res[kind]["cross_replay"]):
            if r["stop_s"] > 5:         # SIGTERM did not end the process promptly
                print("WARNING: %s (on %s's binlog) took %.1f s to stop (exit %s)" % (
                    r.get("by", kind), kind, r["stop_s"], r["stop_exit"]))


# --- loss under a process kill ---------------------------------------------------------------

def producer(port, depth, body, acked, errors):
    """Put pipelined jobs until the connection dies; append every acknowledged id to `acked`."""
    put = b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body)
    try:
        c = Conn(port, timeout=10)
        while True:
            c.send(put * depth)
            for _ in range(depth):
                reply = c.line()
                if reply.startswith(b"INSERTED "):
                    acked.append(int(reply[9:]))
                else:
                    errors.append(reply)
    except OSError:
        pass                            # the kill


def lookup(port, ids, batch=1000):
    """How many of `ids` the server has (peek, pipelined)."""
    c = Conn(port)
    found = 0
    for i in range(0, len(ids), batch):
        chunk = ids[i:i + batch]
        c.send(b"".join(b"peek %d\r\n" % j for j in chunk))
        for _ in chunk:
            reply = c.line().split()
            if reply[0] == b"FOUND":
                found += 1
                c.skip_body(int(reply[2]))
    c.close()
    return found


def loss_once(kind, policy, conns, depth, seconds, body):
    path = tempfile.mkdtemp(prefix="fastbean-loss-")
    try:
        server = binlog_server(kind, path, *policy)
        acked, errors = [], []
        try:
            server.wait_ready(600)
            threads = [threading.Thread(target=producer, args=(server.port, depth, body,
                                                               acked, errors))
                       for _ in range(conns)]
            for t in threads:
                t.start()
            time.sleep(seconds)
        finally:
            server.kill()
        for t in threads:
            t.join()
        server = binlog_server(kind, path, *policy)
        try:
            server.wait_ready(600)
            recovered = sum(counts(stats(server.port)).values())   # answered once replayed
            restart_s = time.monotonic() - server.started
            found = lookup(server.port, acked)
        finally:
            server.stop()
        return {"acked": len(acked), "lost": len(acked) - found, "recovered": recovered,
                "unacked_recovered": recovered - found, "put_errors": len(errors),
                "puts_per_s": len(acked) / seconds, "restart_s": restart_s}
    finally:
        shutil.rmtree(path, ignore_errors=True)


def loss_bench(conns, depth, seconds, body, rounds):
    out = []
    for policy in (["-f", "50"], ["-f", "0"]):
        for kind in KINDS:
            for _ in range(rounds):
                r = dict(loss_once(kind, policy, conns, depth, seconds, body), server=kind,
                         policy=" ".join(policy))
                out.append(r)
                print("%-10s %-6s acked %d, lost %d" % (kind, r["policy"], r["acked"], r["lost"]),
                      file=sys.stderr, flush=True)
    return out


def print_loss(res, conns, depth, seconds):
    print("\nloss: %d producers x %d pipelined puts, SIGKILL after %.1f s, restart, peek every "
          "acknowledged id" % (conns, depth, seconds))
    print("%-10s %-6s %10s %6s %10s %16s %9s %10s" % (
        "server", "policy", "acked", "lost", "recovered", "unacked kept", "puts/s", "restart s"))
    for r in res:
        print("%-10s %-6s %10d %6d %10d %16d %9.0f %10.2f%s" % (
            r["server"], r["policy"], r["acked"], r["lost"], r["recovered"],
            r["unacked_recovered"], r["puts_per_s"], r["restart_s"],
            "  put errors: %d" % r["put_errors"] if r["put_errors"] else ""))
    print("(a process kill: data written before the kill survives in the page cache; what a power "
          "loss would cost under -f 50 is not measured here)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--body", type=int, default=100)
    ap.add_argument("--share", type=float, default=0.1,
                    help="fraction of the jobs delayed, and again buried (0: all ready)")
    ap.add_argument("--loss", action="store_true", help="also measure loss under SIGKILL")
    ap.add_argument("--loss-only", action="store_true")
    ap.add_argument("--producers", type=int, default=8, help="loss: producer connections")
    ap.add_argument("--depth", type=int, default=16, help="loss: puts in flight per connection")
    ap.add_argument("--loss-seconds", type=float, default=1.0, help="loss: produce this long")
    ap.add_argument("--rounds", type=int, default=1, help="loss: runs per server and policy")
    ap.add_argument("--json", default=os.path.join(RESULTS, "replay.json"))
    args = ap.parse_args(argv)
    build_loadgen()
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)

    started = time.time()
    doc = {"started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
           "jobs": args.jobs, "body": args.body, "share": args.share, "machine": machine()}
    if not args.loss_only:
        doc["replay"] = replay_bench(args.jobs, args.body, args.share)
    if args.loss or args.loss_only:
        doc["loss"] = loss_bench(args.producers, args.depth, args.loss_seconds,
                                 b"x" * args.body, args.rounds)
        doc["loss_params"] = {"producers": args.producers, "depth": args.depth,
                              "seconds": args.loss_seconds, "rounds": args.rounds}
    if "replay" in doc:
        print_replay(doc["replay"], args.jobs, args.body, args.share)
    if "loss" in doc:
        print_loss(doc["loss"], args.producers, args.depth, args.loss_seconds)
    doc["seconds"] = time.time() - started
    with open(args.json, "w") as fh:
        json.dump(doc, fh, indent=1)
    print("\nwrote %s (%.0f s)" % (args.json, doc["seconds"]))


if __name__ == "__main__":
    main()
