"""The two native helper threads: the binlog's fsync thread and the arena
prefault pool. Both are exercised for real: syncs of real files and of an fd
that cannot be synced, and with the process out of descriptors; arenas
taken from the pool by a real interpreter."""
import asyncio
import contextlib
import errno
import gc
import os
import random
import resource
import select
import subprocess
import sys
import time

import pytest

from fastbean.binlog.durability import Durability, exhausted
from fastbean.binlog.threads import SyncThread
from fastbean.config import EXHAUSTED_RETRY

pytestmark = pytest.mark.timeout(60)


def wait_done(t):
    r, _, _ = select.select([t.fileno()], [], [], 10)
    assert r, "the fsync thread never reported"
    return t.collect()


def test_sync_thread_reports_each_sync(tmp_path):
    t = SyncThread()
    try:
        fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
        t.file(tmp_path / "f")
        for seq in (3, 7, 8):
            os.write(fd, b"x" * 100)
            t.request(seq)
            assert wait_done(t) == (seq, 0)
        os.close(fd)
    finally:
        t.stop()


def test_sync_thread_survives_the_caller_closing_its_fd(tmp_path):
    # The thread opens the file itself: the caller closes its own while a
    # sync runs, and the next file() replaces the thread's mid-sync.
    t = SyncThread()
    try:
        fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"x")
        t.file(tmp_path / "f")
        t.request(5)
        os.close(fd)
        os.close(os.open(tmp_path / "g", os.O_WRONLY | os.O_CREAT, 0o600))
        t.file(tmp_path / "g")
        assert wait_done(t) == (5, 0)
    finally:
        t.stop()


def test_sync_thread_refuses_a_file_it_cannot_open(tmp_path):
    t = SyncThread()
    try:
        with pytest.raises(FileNotFoundError):
            t.file(tmp_path / "missing")
    finally:
        t.stop()


def test_sync_thread_stops_counting_at_the_first_error(tmp_path):
    # A failed sync may have lost pages of any record written before it, so
    # nothing from it on is ever reported synced, even after a good sync.
    t = SyncThread()
    r, w = os.pipe()
    try:
        fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
        t.file(tmp_path / "f")
        t.request(1)
        assert wait_done(t) == (1, 0)
        t.file("/proc/self/fd/%d" % w)
        t.request(2)                    # fdatasync on a pipe: EINVAL
        assert wait_done(t) == (1, 22)
        t.file(tmp_path / "f")
        t.request(3)
        assert not select.select([t.fileno()], [], [], 0.3)[0] or t.collect() == (1, 22)
        assert t.collect() == (1, 22)   # still failed, still at 1
        os.close(fd)
    finally:
        os.close(r)
        os.close(w)
        t.stop()


def test_sync_thread_finishes_what_was_asked_before_stopping(tmp_path):
    t = SyncThread()
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"x")
    t.file(tmp_path / "f")
    t.request(9)
    os.close(fd)
    t.stop()
    assert t.collect() == (9, 0)


@pytest.mark.parametrize("threads", [1, 2])
def test_sync_threads_lose_no_request(tmp_path, threads):
    # A request is an atomic store that wakes a thread only when one sleeps:
    # requests made in every phase of the threads' work (asleep, syncing,
    # just finished) are all synced and reported, whatever the interleaving.
    rnd = random.Random(threads)
    t = SyncThread(threads)
    try:
        fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
        t.file(tmp_path / "f")
        synced = 0
        for seq in range(1, 301):
            os.write(fd, b"x" * 50)
            t.request(seq)
            if rnd.random() < 0.3:
                while synced < seq:
                    synced, err = wait_done(t)
                    assert err == 0
                assert synced == seq        # never past what was asked
        while synced < 300:
            synced, err = wait_done(t)
            assert err == 0
        t.request(200)                      # an older number asks nothing new
        assert not select.select([t.fileno()], [], [], 0.2)[0]
        os.close(fd)
    finally:
        t.stop()


def test_refused_sync_thread_closes_nothing_it_does_not_own():
    # The thread count is checked; a refused SyncThread is still released,
    # and must not close fd 0 (its zeroed fields) on its way out: that once
    # closed the test process's stdin, and later subprocesses inherited
    # whatever socket took fd 0 next.
    try:
        saved = os.dup(0)
    except OSError:
        saved = None
    r, w = os.pipe()
    os.dup2(r, 0)                       # fd 0: a pipe this test owns
    try:
        for bad in (0, 5):
            with pytest.raises(ValueError):
                SyncThread(bad)
        gc.collect()
        os.write(w, b"x")
        assert os.read(0, 1) == b"x"    # fd 0 is still that pipe
    finally:
        if saved is None:
            os.close(0)
        else:
            os.dup2(saved, 0)
            os.close(saved)
        os.close(r)
        os.close(w)


def test_arena_pool_feeds_pymalloc_and_gives_memory_back():
    code = r"""
import json, time
from fastbean.engine.core import prefault_arenas, arena_stats
assert prefault_arenas()
warm = [bytes(90) + str(i).encode() for i in range(20000)]   # the first arenas: the pool learns their size
time.sleep(0.2)
before = arena_stats()
jobs = [bytes(90) + str(i).encode() for i in range(400000)]   # ~60 MB of small objects
mid = arena_stats()
del jobs
after = arena_stats()
print(json.dumps([before, mid, after]))
"""
    env = dict(os.environ)
    env.pop("PYTHONMALLOC", None)       # `make asan` turns pymalloc off; this test is about its arenas
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50,
                         env=env)
    assert out.returncode == 0, out.stderr
    import json
    before, mid, after = json.loads(out.stdout)
    assert before["installed"] and before["arena_size"] > 0
    assert before["pooled"] > 0                    # the thread filled the pool ahead of demand
    taken = mid["taken_warm"] - before["taken_warm"]
    assert taken > 10                              # most new arenas came prefaulted
    assert after["pooled"] <= 8                    # freed arenas past the pool were unmapped


@contextlib.contextmanager
def no_descriptors():
    """This process may open no new descriptor (EMFILE) inside the block."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest = os.dup(0)                  # the lowest free descriptor
    os.close(lowest)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_sync_threads_need_no_new_descriptor(tmp_path):
    # Out of descriptors, the threads still sync the current file, a finished
    # one (whose descriptor they take over and close), and a file named
    # before the shortage. Each used to dup() for every sync: EMFILE, taken
    # for a disk fault.
    t = SyncThread(2)
    try:
        old = os.open(tmp_path / "a", os.O_WRONLY | os.O_CREAT, 0o600)
        t.file(tmp_path / "a")
        os.write(old, b"x")
        new = os.open(tmp_path / "b", os.O_WRONLY | os.O_CREAT, 0o600)
        t.file(tmp_path / "b")
        with no_descriptors():
            with pytest.raises(OSError) as e:
                os.dup(0)
            assert e.value.errno == errno.EMFILE
            t.finish(old)
            os.write(new, b"y")
            t.request(1)
            assert wait_done(t) == (1, 0)
            for seq in range(2, 6):
                os.write(new, b"z")
                t.request(seq)
                done = wait_done(t)
                while done[0] < seq:
                    done = wait_done(t)
                assert done == (seq, 0)
        with pytest.raises(OSError):
            os.fstat(old)                   # the thread closed it once synced
        os.close(new)
    finally:
        t.stop()


def test_errors_that_say_nothing_about_the_disk_are_no_disk_fault():
    for err in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
        assert exhausted(err), errno.errorcode[err]
    for err in (errno.EIO, errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EINVAL, errno.EBADF):
        assert not exhausted(err), errno.errorcode[err]


def test_a_new_file_short_of_descriptors_waits_and_is_no_disk_fault(tmp_path):
    # -f 0: records of a file whose descriptors cannot be had are not
    # durable (their replies wait) until a retry opens it; nothing fails.
    loop = asyncio.new_event_loop()
    durable, errors = [], []
    d = Durability(loop, True, 0, durable.append, errors.append)

    def run_until(cond, seconds=10.0):
        deadline = time.monotonic() + seconds
        while not cond() and time.monotonic() < deadline:
            loop.run_until_complete(asyncio.sleep(0.02))
        return cond()

    try:
        d.start((1, 0))
        fds = [os.open(tmp_path / name, os.O_WRONLY | os.O_CREAT, 0o600) for name in ("1", "2")]
        d.file(str(tmp_path / "1"))
        os.write(fds[0], b"x")
        d.written(1, (1, 1))
        assert run_until(lambda: durable == [1])
        with no_descriptors():
            d.finish(fds[0])
            d.file(str(tmp_path / "2"))     # EMFILE: tried again later
            os.write(fds[1], b"y")
            d.written(2, (2, 1))
            assert not run_until(lambda: len(durable) > 1, 3 * EXHAUSTED_RETRY)
        assert run_until(lambda: durable == [1, 2])
        assert errors == [] and not d.failed
        os.close(fds[1])
    finally:
        d.stop()
        loop.close()
