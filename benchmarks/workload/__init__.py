"""The tasks benchmarks.workers runs on each system, and how they record themselves.

A task gets its put time (time.time() in the producer) as its one argument.
It appends a fixed-width line "put start finish" to a file of its own
process in $WBENCH_DIR (on /dev/shm), written with one os.write on an
O_APPEND descriptor: nothing is shared between processes, and nothing is
lost when a process ends with os._exit (as RQ's work horses do).
This module imports nothing else, so an RQ work horse, which imports its
job's function, pays no more for it than for any small module.
"""
import os
import time

LINE = len(b"%17.6f %17.6f %17.6f\n" % (0.0, 0.0, 0.0))     # bytes per record
SLEEP_S = 0.010

_fd = None
_pid = None


def record(put, start):
    global _fd, _pid
    pid = os.getpid()
    if _pid != pid:             # a forked child (a work horse) gets a file of its own
        _fd = os.open(os.path.join(os.environ["WBENCH_DIR"], "%d.rec" % pid),
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _pid = pid
    os.write(_fd, b"%17.6f %17.6f %17.6f\n" % (put, start, time.time()))


def noop(put):
    record(put, time.time())


def nap(put):
    start = time.time()
    time.sleep(SLEEP_S)
    record(put, start)


TASKS = {"noop": noop, "sleep": nap}
