"""What every benchmark needs beyond the servers themselves (tests/support/servers.py
starts those, the same way for tests and benchmarks): the compiled load
generator and the other C tools, a few facts about the machine, and where
results are written."""
import datetime
import json
import os
import shutil
import subprocess
import sys
import time

from tests.support.servers import BEANSTALKD, client

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(HERE, "build")


def build_tool(name):
    """Compile benchmarks/NAME.c into build/ (once, or again when the source is newer);
    return the program's path."""
    src, exe = os.path.join(HERE, name + ".c"), os.path.join(BUILD, name)
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        os.makedirs(BUILD, exist_ok=True)
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            sys.exit("benchmarks need a C compiler for %s (apt-get install gcc)" % name)
        subprocess.run([cc, "-O2", "-Wall", "-pthread", "-o", exe, src], check=True)
    return exe


def build_loadgen():
    return build_tool("loadgen")


def loadgen(port, workload, conns=10, depth=1, body=100, seconds=2.0, total=None, tube=None,
            delay=None, ttr=None, pri=None, interval_us=None, warmup=None, redis=None, background=False):
    """Run the load generator against 127.0.0.1:port; return its JSON result as a dict
    (or, with background=True, the Popen whose stdout will hold it). redis: "list" or
    "stream" to drive a Redis server with that queue pattern instead of beanstalk."""
    cmd = [build_loadgen(), "-p", str(port), "-w", workload, "-c", str(conns), "-d", str(depth),
           "-b", str(body), "-t", str(seconds)]
    for flag, value in (("-n", total), ("-T", tube), ("-D", delay), ("-R", ttr), ("-P", pri),
                        ("-i", interval_us), ("-W", warmup), ("-r", redis)):
        if value is not None:
            cmd += [flag, str(value)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    if background:
        return proc
    return finish(proc)


def finish(proc):
    """The result of a loadgen started with background=True."""
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError("loadgen failed (%d)" % proc.returncode)
    return json.loads(out)


def stats(port, line=b"stats"):
    """stats (or stats-tube NAME) as a dict."""
    with client(port, 60.0) as c:
        return c.yaml(line)


# A run during which the hypervisor took more than this share of the CPU measured
# the neighbours as much as the server.
STEAL_LIMIT = 0.10


def cpu_times():
    """The machine's CPU time so far, /proc/stat's cpu line (in clock ticks)."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def steal(before, after):
    """The share of CPU time stolen between two cpu_times()."""
    d = [b - a for a, b in zip(before, after)]
    return d[7] / max(1, sum(d))


def busy_seconds(before, after):
    """CPU seconds that all CPUs spent working between two cpu_times(): neither idle,
    nor waiting on I/O, nor stolen (guest time is part of user time already)."""
    d = [b - a for a, b in zip(before, after)]
    return (sum(d[:8]) - d[3] - d[4] - d[7]) / os.sysconf("SC_CLK_TCK")


def machine():
    """A few facts about where the numbers came from."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": model, "python": sys.version.split()[0],
            "beanstalkd": subprocess.run([BEANSTALKD, "-v"], capture_output=True,
                                         text=True).stdout.strip()}


def write_results(path, started, **fields):
    """Save a run's results as JSON: when it started (a time.time()), how long it took,
    the machine, then `fields`; say where."""
    doc = {"started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
           "wall_s": round(time.time() - started, 1), "machine": machine(), **fields}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print("\nwrote %s" % path)
