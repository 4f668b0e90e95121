"""The two native helper threads: the binlog's fsync thread and the arena
prefault pool. Both are exercised for real: syncs of real files and of an fd
that cannot be synced; arenas taken from the pool by a real interpreter."""
import os
import select
import subprocess
import sys

import pytest

from fastbean._sync import SyncThread

pytestmark = pytest.mark.timeout(60)


def wait_done(t):
    r, _, _ = select.select([t.fileno()], [], [], 10)
    assert r, "the fsync thread never reported"
    return t.collect()


def test_sync_thread_reports_each_sync(tmp_path):
    t = SyncThread()
    try:
        fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
        for seq in (3, 7, 8):
            os.write(fd, b"x" * 100)
            t.request(fd, seq)
            assert wait_done(t) == (seq, 0)
        os.close(fd)
    finally:
        t.stop()


def test_sync_thread_survives_the_caller_closing_its_fd(tmp_path):
    # The request holds its own dup: rotation closes the file while a sync runs.
    t = SyncThread()
    try:
        fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"x")
        t.request(fd, 5)
        os.close(fd)
        assert wait_done(t) == (5, 0)
    finally:
        t.stop()


def test_sync_thread_reports_errors_and_goes_on(tmp_path):
    t = SyncThread()
    r, w = os.pipe()
    try:
        t.request(w, 1)                 # fdatasync on a pipe: EINVAL
        seq, err = wait_done(t)
        assert seq == 1 and err == 22
        fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
        t.request(fd, 2)
        os.close(fd)
        assert wait_done(t) == (2, 0)   # the error was reported once
    finally:
        os.close(r)
        os.close(w)
        t.stop()


def test_sync_thread_finishes_what_was_asked_before_stopping(tmp_path):
    t = SyncThread()
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"x")
    t.request(fd, 9)
    os.close(fd)
    t.stop()
    assert t.collect() == (9, 0)


def test_arena_pool_feeds_pymalloc_and_gives_memory_back():
    code = r"""
import json, time
from fastbean._core import prefault_arenas, arena_stats
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
