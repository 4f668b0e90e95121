"""The two native helper threads: the binlog's fsync thread and the arena
prefault pool. Both are exercised for real: syncs of real files and of an fd
that cannot be synced; arenas taken from the pool by a real interpreter."""
import gc
import os
import random
import select
import subprocess
import sys

import pytest

from fastbean.binlog.threads import SyncThread

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
