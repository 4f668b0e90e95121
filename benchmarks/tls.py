"""What TLS costs: fastbean's own TLS listener against its plain port, beside
beanstalkd behind stunnel (what its users do today, beanstalkd#197).

The load generator speaks plain TCP, so every TLS path starts at a
client-side stunnel, as an existing client library would reach a TLS port:

  plain        loadgen -> fastbean (plain port)
  tls          loadgen -> stunnel client -> fastbean --tls-listen
  stunnel      loadgen -> stunnel client -> stunnel server -> beanstalkd
  plain-b      loadgen -> beanstalkd

The client stunnel is the same in both TLS paths, so tls / stunnel compares
the servers' ends; tls / plain is what a user of a client library through
stunnel pays against no TLS at all, the client tunnel included. Fresh servers
and tunnels for every run, the paths alternating, medians of --reps rounds,
with the lowest and highest ratio of the rounds.

    python -m benchmarks.tls [--reps 3] [--seconds 5]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.harness import cpu_times, loadgen, steal, write_results
from tests.support.servers import HOST, Server, free_port, wait_listening

STUNNEL = shutil.which("stunnel4") or shutil.which("stunnel") or "/usr/bin/stunnel4"
# (name, workload, connections, depth): the three cases
CASES = (("put c50 d1", "put", 50, 1), ("cycle c10 d1", "roundtrip", 10, 1), ("put c50 d16", "put", 50, 16))
PATHS = ("plain", "tls", "stunnel", "plain-b")


class Tunnel:
    """stunnel4 in the foreground: a client end (plain in, TLS out, the server
    verified against ca) or a server end (TLS in with cert and key, plain out)."""

    def __init__(self, directory, connect_port, ca=None, cert_key=None):
        self.port = free_port()
        conf = os.path.join(directory, "stunnel-%d.conf" % self.port)
        lines = ["foreground = yes", "pid =", "[bench]", "accept = %s:%d" % (HOST, self.port),
                 "connect = %s:%d" % (HOST, connect_port), "sslVersionMin = TLSv1.2"]
        if ca is not None:
            lines += ["client = yes", "CAfile = %s" % ca, "verifyChain = yes", "checkHost = localhost"]
        else:
            lines += ["cert = %s" % cert_key[0], "key = %s" % cert_key[1]]
        with open(conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.proc = subprocess.Popen([STUNNEL, conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_listening(self.port, self.proc)

    def cpu(self):
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


def measure(path, case, pki, directory, seconds):
    """One fresh server (and tunnels), one run; the loadgen result plus CPU shares."""
    _, workload, conns, depth = case
    tunnels = []
    if path in ("plain", "tls"):
        tls_port = free_port()
        flags = ["--tls-listen", "%s:%d" % (HOST, tls_port), "--tls-cert", pki.server[0],
                 "--tls-key", pki.server[1]] if path == "tls" else []
        server = Server("fastbean", *flags).start()
    else:
        server = Server("beanstalkd").start()
    try:
        port = server.port
        if path == "tls":
            tunnels.append(Tunnel(directory, tls_port, ca=pki.ca.cert))
        elif path == "stunnel":
            back = Tunnel(directory, server.port, cert_key=pki.server)
            tunnels += [back, Tunnel(directory, back.port, ca=pki.ca.cert)]
        if tunnels:
            port = tunnels[-1].port
        cpu0 = [server.cpu()] + [t.cpu() for t in tunnels]
        machine0, t0 = cpu_times(), time.monotonic()
        res = loadgen(port, workload, conns=conns, depth=depth, seconds=seconds, warmup=0.5)
        wall = time.monotonic() - t0
        res["steal"] = steal(machine0, cpu_times())
        cpu1 = [server.cpu()] + [t.cpu() for t in tunnels]
        res["server_cpu"] = (cpu1[0] - cpu0[0]) / wall
        res["tunnel_cpu"] = sum(b - a for a, b in zip(cpu0[1:], cpu1[1:])) / wall
        return res
    finally:
        for t in tunnels:
            t.stop()
        server.stop()


def spread(runs, med, a, b):
    """a's median over b's, and the lowest and highest ratio of the rounds' pairs."""
    ratios = [x["ops_per_sec"] / y["ops_per_sec"] for x, y in zip(runs[a], runs[b])]
    return "%.2f (%.2f-%.2f)" % (med[a] / med[b], min(ratios), max(ratios))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="rounds of every path and case (default 3)")
    ap.add_argument("--seconds", type=float, default=5.0, help="length of each run (default 5)")
    ap.add_argument("--json", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "results", "tls.json"))
    args = ap.parse_args(argv)
    if not os.path.exists(STUNNEL):
        sys.exit("benchmarks.tls needs stunnel (apt-get install stunnel4)")
    from tests.support.certs import Pki
    started = time.time()
    directory = tempfile.mkdtemp(prefix="fastbean-tls-bench-")
    try:
        pki = Pki(directory)
        results = {}
        for case in CASES:
            runs = {p: [] for p in PATHS}
            for rep in range(args.reps):
                order = PATHS if rep % 2 == 0 else PATHS[::-1]
                for path in order:
                    res = measure(path, case, pki, directory, args.seconds)
                    runs[path].append(res)
                    print("%-13s %-8s %9.0f ops/s  p99 %6.0f us  server cpu %.2f  tunnels %.2f%s" % (
                        case[0], path, res["ops_per_sec"], res["p99_us"], res["server_cpu"], res["tunnel_cpu"],
                        "  STEAL %.0f%%" % (100 * res["steal"]) if res["steal"] > 0.10 else ""),
                        file=sys.stderr, flush=True)
            results[case[0]] = runs
        print()
        print("%-13s %10s %10s %10s %10s   %-20s %-20s %-20s" % (
            "case", "plain", "tls", "stunnel", "plain-b", "tls/plain", "tls/stunnel", "stunnel/plain-b"))
        for name, runs in results.items():
            med = {p: statistics.median(r["ops_per_sec"] for r in runs[p]) for p in PATHS}
            print("%-13s %10.0f %10.0f %10.0f %10.0f   %-20s %-20s %-20s" % (
                name, med["plain"], med["tls"], med["stunnel"], med["plain-b"], spread(runs, med, "tls", "plain"),
                spread(runs, med, "tls", "stunnel"), spread(runs, med, "stunnel", "plain-b")))
        write_results(args.json, started, reps=args.reps, seconds=args.seconds, results=results)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
