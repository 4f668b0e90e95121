"""The compiled parser of several builds, timed in one process with their
rounds alternating, so that the machine's drift (which moves pytest-benchmark's
figures by 20% between runs here) falls on every build alike.

    python -m benchmarks.parsers ../old .          # two checkouts, each built
    python -m benchmarks.parsers --rounds 400 --runs 5 ../old ../mid .

Each argument is a checkout (or the directory of a parser*.so) whose parser
has been built (`make build`); the same one twice is an A/A run, the noise
floor. Each build is loaded under the module's own name from its own copy of
the file, so the builds share nothing but the interpreter. A round parses
each input 20 times with each build in turn, through the parser's test API
(Parser().parse, which builds a tuple per command, as in
benchmarks/test_micro.py: the same inputs). A run's figure is the median of
its rounds; every run records the CPU steal while it ran and is left out
above harness.STEAL_LIMIT, and the table says how many were. The ratios are
each build's median over the first build's, run by run: median [low to high].
"""
import argparse
import importlib.machinery
import importlib.util
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

from benchmarks.harness import STEAL_LIMIT, cpu_times, steal, write_results

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
MODULE = "fastbean.engine.parser"
REPEAT = 20                                 # parses of an input in a round's turn

BODY = b"b" * 100
PUT = b"put 0 0 60 100\r\n" + BODY + b"\r\n"
BATCH = 1000
PUTS = PUT * BATCH
SHORT = (b"reserve-with-timeout 0\r\ndelete 123\r\nstats-job 5\r\nuse tubename\r\n") * 250
# Over-long lines (230..428 bytes: dropped whole; at 446+ the second 224-byte
# window can end between CR and LF, which beanstalkd 1.12 also mis-frames).
GARBAGE = b"".join(
    bytes(random.Random(i).choices(b"abcdefghij \t", k=230 + 2 * i)) + b"\r\nstats\r\nxyzzy 1 2\r\n"
    for i in range(100))
INPUTS = {"puts": PUTS, "short commands": SHORT, "over-long lines": GARBAGE}


def find_so(where):
    """The parser extension this interpreter can load, in a checkout or in a
    directory holding it (a checkout may hold builds for other Pythons too)."""
    for folder in (os.path.join(where, "fastbean", "engine"), where):
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "parser" + suffix)
            if os.path.isfile(path):
                return path
    raise SystemExit("python -m benchmarks.parsers: no parser*.so in %s (run make build there)" % where)


def load(path, scratch):
    """The parser module of one build, apart from any other loaded: from a copy
    of its file, since the interpreter hands back the module it already loaded
    from a path (its own parser, or the same build named twice for an A/A
    run) instead of loading the file again."""
    n = len(os.listdir(scratch))
    os.mkdir(os.path.join(scratch, str(n)))
    path = shutil.copy(path, os.path.join(scratch, str(n)))
    loader = importlib.machinery.ExtensionFileLoader(MODULE, path)
    spec = importlib.util.spec_from_loader(MODULE, loader, origin=path)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def run(parsers, data, rounds):
    """Each build's median microseconds a parse of data over `rounds` alternating rounds."""
    times = [[] for _ in parsers]
    for _ in range(rounds):
        for i, parser in enumerate(parsers):
            start = time.perf_counter_ns()
            for _ in range(REPEAT):
                parser().parse(data)
            times[i].append((time.perf_counter_ns() - start) / REPEAT / 1e3)
    return [statistics.median(t) for t in times]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.parsers", description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="+", metavar="DIR", help="checkouts with a built parser; the first is "
                    "the baseline of the ratios")
    ap.add_argument("--rounds", type=int, default=200, help="alternating rounds a run (default 200)")
    ap.add_argument("--runs", type=int, default=5, help="runs, each giving one figure per build (default 5)")
    ap.add_argument("--results", default=os.path.join(RESULTS, "parsers.json"),
                    help="where the JSON goes (default benchmarks/results/parsers.json)")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.runs < 1:
        ap.error("--rounds and --runs must be positive")
    started = time.time()
    paths = [find_so(d) for d in args.builds]
    with tempfile.TemporaryDirectory(prefix="parsers-") as scratch:
        parsers = []                # once loaded, the copies may go
        for path in paths:
            try:
                parsers.append(load(path, scratch).Parser)
            except (ImportError, AttributeError) as e:
                raise SystemExit("python -m benchmarks.parsers: %s does not load as a parser: %s"
                                 % (path, e)) from None
    cases = {}
    for name, data in INPUTS.items():
        outs = [p().parse(data) for p in parsers]
        differ = [d for d, out in zip(args.builds, outs) if out != outs[0]]
        if differ:
            # a change of the test API's tuples (a put's tag, say) is worth
            # knowing, but the commands parsed are what is timed
            print("note: %s parse %s differently from %s" % (", ".join(differ), name, args.builds[0]))
        runs = []
        for _ in range(args.runs):
            before = cpu_times()
            us = run(parsers, data, args.rounds)
            runs.append({"us": us, "steal": steal(before, cpu_times())})
        cases[name] = runs
        print("ran %s" % name, file=sys.stderr, flush=True)

    print("\nParser().parse, %d runs of %d alternating rounds; microseconds a parse, median [low to high] of "
          "the runs, and each build over %s run by run" % (args.runs, args.rounds, args.builds[0]))
    for name, runs in cases.items():
        good = [r for r in runs if r["steal"] <= STEAL_LIMIT]
        left = len(runs) - len(good)
        print("  %s (%d bytes)%s" % (name, len(INPUTS[name]), "; %d left out for steal" % left if left else ""))
        if not good:
            print("    every run left out for steal")
            continue
        for i, d in enumerate(args.builds):
            us = [r["us"][i] for r in good]
            ratios = [r["us"][i] / r["us"][0] for r in good]
            print("    %-30s %9.2f us [%.2f to %.2f]   %.3f [%.3f to %.3f]" % (
                d, statistics.median(us), min(us), max(us),
                statistics.median(ratios), min(ratios), max(ratios)))
    write_results(args.results, started, rounds=args.rounds, runs=args.runs, steal_limit=STEAL_LIMIT,
                  builds=[{"dir": d, "so": p} for d, p in zip(args.builds, paths)], cases=cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
