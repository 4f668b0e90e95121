"""move-job and reprioritize-job (docs/protocol-extensions.md) on real
servers: replies and bad input, the states and counts a move keeps, a
blocked reserve woken by a move, keys and dead letters' origins, the reserve
order after a new priority, --strict, kill -9 with -f 0, and beanstalkd 1.12
reading the binlog."""
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fastbean.client import NotFound, ServerError
from fastbean.engine.core import Core
from tests.support.servers import Server
from tests.support.servers import fastbean_with_binlog as fastbean

pytestmark = pytest.mark.timeout(120)

KEPT = ("id", "pri", "delay", "ttr", "reserves", "timeouts", "releases", "buries", "kicks")


def kept(stats):
    return {k: stats[k] for k in KEPT}


def attempt(c, jid):
    c.reserve_job(jid)
    c.cmd(b"release %d 0 0" % jid, b"RELEASED")


def test_a_ready_job_moves_with_its_id_priority_and_counts(fastbean_server):
    with fastbean_server.client() as c:
        c.use("a")
        jid = c.put(b"body", pri=7, ttr=30)
        attempt(c, jid)
        c.reserve_job(jid)
        c.cmd(b"bury %d 7" % jid, b"BURIED")
        c.cmd(b"kick-job %d" % jid, b"KICKED")
        before = c.stats_job(jid)
        assert c.cmd(b"move-job %d b" % jid) == b"MOVED"
        after = c.stats_job(jid)
        assert (after["tube"], after["state"]) == ("b", "ready")
        assert kept(after) == kept(before)
        assert c.peek(jid) == b"body"
        b = c.stats_tube("b")
        assert (b["current-jobs-ready"], b["current-jobs-urgent"], b["total-jobs"]) == (1, 1, 1)
        c.use("default")
        assert "a" not in c.list_tubes()            # empty and unused: gone, as after a delete
        st = c.stats()
        assert (st["current-jobs-ready"], st["total-jobs"]) == (1, 1)   # not a new job
        assert c.yaml(b"fastbean-stats")["cmd-move-job"] == 1


def test_a_delayed_job_keeps_its_time_left_and_a_buried_one_goes_last(fastbean_server):
    with fastbean_server.client() as c:
        c.use("a")
        delayed = c.put(b"d", delay=100)
        c.use("b")
        first = c.put(b"first")
        c.reserve_job(first)
        c.cmd(b"bury %d 0" % first, b"BURIED")
        c.use("a")
        buried = c.put(b"buried")
        c.reserve_job(buried)
        c.cmd(b"bury %d 0" % buried, b"BURIED")
        time.sleep(1.1)
        left = c.stats_job(delayed)["time-left"]
        c.cmd(b"move-job %d b" % delayed, b"MOVED")
        c.cmd(b"move-job %d b" % buried, b"MOVED")
        job = c.stats_job(delayed)
        assert (job["tube"], job["state"], job["delay"]) == ("b", "delayed", 100)
        assert left - 1 <= job["time-left"] <= left
        job = c.stats_job(buried)
        assert (job["tube"], job["state"], job["buries"]) == ("b", "buried", 1)
        b = c.stats_tube("b")
        assert (b["current-jobs-delayed"], b["current-jobs-buried"]) == (1, 2)
        c.use("b")
        assert c.peek_state("buried")[0] == first       # the moved one is behind it
        assert c.kick(1) == 1 and c.peek_state("buried")[0] == buried


def test_replies_and_bad_lines(fastbean_server):
    with fastbean_server.client() as c, fastbean_server.client() as worker:
        c.use("a")
        jid = c.put(b"x")
        assert c.cmd(b"move-job %d a" % jid) == b"MOVED"          # its own tube: nothing changes
        assert c.stats_tube("a")["total-jobs"] == 1
        assert c.cmd(b"move-job 999 a") == b"NOT_FOUND"
        worker.reserve_job(jid)
        assert c.cmd(b"move-job %d b" % jid) == b"NOT_FOUND"      # a worker holds it
        assert worker.cmd(b"move-job %d b" % jid) == b"NOT_FOUND"
        for line in (b"move-job", b"move-job x a", b"move-job 1", b"move-job 1 -a", b"move-job 1  a",
                     b"move-job 1 a ", b"move-job 1 " + b"a" * 201, b"move-jobs 1 a",
                     b"reprioritize-job", b"reprioritize-job 1", b"reprioritize-job 1 -1",
                     b"reprioritize-job 1 4294967296", b"reprioritize-job x 1", b"reprioritize-job 1 1 1"):
            assert c.cmd(line) == b"BAD_FORMAT", line
        assert c.stats_job(jid)["tube"] == "a"
        # a 200-byte tube name fits in a line with a 12-digit id
        name = b"n" * 200
        worker.cmd(b"release %d 0 0" % jid, b"RELEASED")
        assert c.cmd(b"move-job %d %s" % (jid, name)) == b"MOVED"
        assert c.stats_job(jid)["tube"] == name.decode()
        assert c.cmd(b"reprioritize-job 999 1") == b"NOT_FOUND"
        ext = c.yaml(b"fastbean-stats")
        assert (ext["cmd-move-job"], ext["cmd-reprioritize-job"]) == (5, 1)


def test_a_blocked_reserve_gets_a_moved_job(fastbean_server):
    with fastbean_server.client() as c, fastbean_server.client() as worker:
        worker.watch("b")
        worker.cmd(b"ignore default", b"WATCHING 1")
        worker.send(b"reserve-with-timeout 10\r\n")
        c.use("a")
        jid = c.put(b"moved")
        delayed = c.put(b"later", delay=100)
        c.cmd(b"move-job %d b" % delayed, b"MOVED")      # delayed: the reserve goes on waiting
        c.cmd(b"move-job %d b" % jid, b"MOVED")
        assert worker.line() == b"RESERVED %d 5" % jid
        assert worker.body(5) == b"moved"
        assert c.stats_job(jid)["state"] == "reserved"


def test_reprioritize_in_every_state_and_the_reserve_order(fastbean_server):
    with fastbean_server.client() as c, fastbean_server.client() as worker:
        c.use("t")
        worker.watch("t")
        worker.cmd(b"ignore default", b"WATCHING 1")
        a, b, d = c.put(b"a", pri=10), c.put(b"b", pri=20), c.put(b"c", pri=30)
        assert c.cmd(b"reprioritize-job %d 5" % d) == b"REPRIORITIZED"
        assert c.cmd(b"reprioritize-job %d 1500" % a) == b"REPRIORITIZED"
        assert c.stats_tube("t")["current-jobs-urgent"] == 2
        assert [worker.job(b"reserve-with-timeout 0")[0] for _ in range(3)] == [d, b, a]
        c.cmd(b"reprioritize-job %d 0" % a, b"REPRIORITIZED")       # reserved: another's job too
        assert c.stats_job(a)["pri"] == 0
        worker.cmd(b"release %d 99 0" % a, b"RELEASED")             # release names its own
        assert c.stats_job(a)["pri"] == 99
        delayed, buried = c.put(b"d", delay=100), c.put(b"b")
        worker.reserve_job(buried)
        worker.cmd(b"bury %d 50" % buried, b"BURIED")
        for jid in (delayed, buried):
            c.cmd(b"reprioritize-job %d 3" % jid, b"REPRIORITIZED")
            assert c.stats_job(jid)["pri"] == 3
        c.cmd(b"kick-job %d" % buried, b"KICKED")
        assert worker.job(b"reserve-with-timeout 0")[0] == buried


def test_a_keyed_job_takes_its_key_unless_the_tube_has_it(fastbean_server):
    with fastbean_server.client() as c:
        c.use("a")
        jid, _ = c.put_unique(b"x", "k", cooldown=600)
        c.move_job(jid, "b")
        assert c.put_unique(b"y", "k")[1] is None                   # a holds no key k now
        c.use("b")
        assert c.put_unique(b"y", "k") == (jid, "ready")
        c.use("c")
        other, _ = c.put_unique(b"z", "k")
        c.move_job(jid, "c")                                        # c has k: jid's is dropped
        assert c.put_unique(b"w", "k") == (other, "ready")
        c.delete(other)
        assert c.put_unique(b"w", "k")[1] is None
        c.delete(jid)                                               # no key: no cooldown
        c.use("b")
        assert c.put_unique(b"v", "k")[1] is None


def test_a_moved_key_cools_down_in_its_new_tube(tmp_path):
    s = fastbean(tmp_path, "-f", "0")
    try:
        with s.client() as c:
            c.use("a")
            jid, _ = c.put_unique(b"x", "k", cooldown=600)
            c.move_job(jid, "b" * 200)                  # its cooldown's records grow with the name
            c.delete(jid)
            c.use("b" * 200)
            assert c.cmd(b"put 0 0 60 1 idp:k\r\ny") == b"INSERTED %d DELETED" % jid
            c.use("a")
            assert c.put_unique(b"y", "k")[1] is None
    finally:
        s.stop()
    s = fastbean(tmp_path)
    try:
        with s.client() as c:
            c.use("b" * 200)
            assert c.cmd(b"put 0 0 60 1 idp:k\r\ny") == b"INSERTED %d DELETED" % jid
    finally:
        s.stop()


def test_strict_answers_unknown_command():
    s = Server("fastbean", "--strict").start()
    try:
        with s.client() as c:
            jid = c.put(b"x")
            for line in (b"move-job %d a" % jid, b"move-job", b"reprioritize-job %d 1" % jid,
                         b"reprioritize-job x"):
                assert c.cmd(line) == b"UNKNOWN_COMMAND"
            assert c.stats_job(jid)["tube"] == "default"
            with pytest.raises(ServerError, match="UNKNOWN_COMMAND"):
                c.move_job(jid, "a")
    finally:
        s.stop()


def test_client_methods(fastbean_server):
    with fastbean_server.client() as c:
        jid = c.put(b"x")
        c.move_job(jid, b"elsewhere")
        c.reprioritize_job(jid, 4294967295)
        assert (c.stats_job(jid)["tube"], c.stats_job(jid)["pri"]) == ("elsewhere", 4294967295)
        with pytest.raises(NotFound):
            c.move_job(999, "a")
        with pytest.raises(NotFound):
            c.reprioritize_job(999, 1)
        with pytest.raises(ValueError):
            c.reprioritize_job(jid, -1)


def replayed(binlog):
    """An engine that has replayed the binlog files in binlog (as a restart would)."""
    core = Core(version=b"test")
    for path in sorted(Path(binlog).glob("binlog.*"), key=lambda p: int(p.suffix[1:])):
        count, end, reason = core.replay(path.read_bytes(), int(path.suffix[1:]))
        assert reason is None, reason
    core.replay_finish()
    return core


def test_dead_letters_keep_their_origin_until_moved_or_deleted(tmp_path):
    s = fastbean(tmp_path, "-f", "0")
    with s.client() as c:
        c.use("orders")
        c.retry_limit(1, "dead")
        requeued, deleted, kept_ = (c.put(b"%d" % k) for k in range(3))
        for jid in (requeued, deleted, kept_):
            attempt(c, jid)
        assert c.yaml(b"fastbean-stats")["dead-letter-origins"] == 3
        c.move_job(requeued, "orders")                  # the console's requeue
        c.delete(deleted)
        assert c.yaml(b"fastbean-stats")["dead-letter-origins"] == 1
    os.kill(s.pid, signal.SIGKILL)
    s.wait()
    core = replayed(tmp_path / "binlog")
    assert core.job_origin(kept_) == b"orders"
    assert core.job_origin(requeued) is None and core.job_origin(deleted) is None
    assert core.job_tube(requeued) == b"orders" and core.job_tube(kept_) == b"dead"
    core.check()
    s = fastbean(tmp_path, "-f", "0")
    try:
        with s.client() as c:
            assert c.yaml(b"fastbean-stats")["dead-letter-origins"] == 1
            assert c.stats_job(kept_)["tube"] == "dead"
            c.move_job(kept_, "orders")
            assert c.yaml(b"fastbean-stats")["dead-letter-origins"] == 0
    finally:
        s.stop()
    assert replayed(tmp_path / "binlog").job_origin(kept_) is None


def test_moves_and_priorities_survive_kill_9_with_f0(tmp_path):
    s = fastbean(tmp_path, "-f", "0")
    with s.client() as c:
        c.use("a")
        ready, delayed, buried = c.put(b"r", pri=9), c.put(b"d", delay=3600), c.put(b"b")
        c.reserve_job(buried)
        c.cmd(b"bury %d 0" % buried, b"BURIED")
        keyed, _ = c.put_unique(b"k", "key")
        for jid in (ready, delayed, buried, keyed):
            c.move_job(jid, "b")
        c.reprioritize_job(ready, 4)
        c.reprioritize_job(delayed, 5)
        c.reprioritize_job(buried, 6)
        before = {jid: c.stats_job(jid) for jid in (ready, delayed, buried)}
    os.kill(s.pid, signal.SIGKILL)
    s.wait()
    s = fastbean(tmp_path, "-f", "0")
    try:
        with s.client() as c:
            for jid, was in before.items():
                now = c.stats_job(jid)
                assert (now["tube"], now["state"], now["pri"]) == (was["tube"], was["state"], was["pri"])
            assert c.stats_job(delayed)["time-left"] > 3500
            c.use("b")
            assert c.put_unique(b"again", "key") == (keyed, "ready")    # the key moved with it
            c.use("a")
            assert c.put_unique(b"again", "key")[1] is None
            assert c.stats_tube("b")["current-jobs-buried"] == 1
    finally:
        s.stop()


def test_beanstalkd_reads_moves_and_priorities(tmp_path):
    s = fastbean(tmp_path, "-f", "0")
    with s.client() as c:
        c.use("a")
        ready, delayed, buried = c.put(b"ready", pri=9), c.put(b"later", delay=3600), c.put(b"buried")
        c.reserve_job(buried)
        c.cmd(b"bury %d 0" % buried, b"BURIED")
        keyed, _ = c.put_unique(b"keyed", "k", cooldown=60, pri=0)
        reserved = c.put(b"held", pri=100)
        c.retry_limit(1, "dead")
        dead = c.put(b"dead", pri=3)
        attempt(c, dead)
        for jid in (ready, delayed, buried, keyed):
            c.move_job(jid, "b")
        c.reprioritize_job(ready, 4)
        c.reprioritize_job(delayed, 5)
        c.reprioritize_job(buried, 6)
        c.reprioritize_job(dead, 7)
        c.reserve_job(reserved)
        c.reprioritize_job(reserved, 8)
    os.kill(s.pid, signal.SIGKILL)
    s.wait()
    b = Server("beanstalkd", "-b", str(tmp_path / "binlog")).start()
    try:
        with b.client() as c:
            want = {ready: ("b", "ready", 4, b"ready"), delayed: ("b", "delayed", 5, b"later"),
                    buried: ("b", "buried", 6, b"buried"), keyed: ("b", "ready", 0, b"keyed"),
                    dead: ("dead", "ready", 7, b"dead"), reserved: ("a", "ready", 8, b"held")}
            for jid, (tube, state, pri, body) in want.items():
                job = c.stats_job(jid)
                assert (job["tube"], job["state"], job["pri"]) == (tube, state, pri), jid
                assert c.peek(jid) == body
            assert c.stats_job(delayed)["time-left"] > 3500
            st = c.stats()
            assert (st["current-jobs-ready"], st["current-jobs-delayed"], st["current-jobs-buried"]) == (
                4, 1, 1)
            c.watch("b")
            c.watch("dead")
            c.watch("a")
            assert [c.job(b"reserve-with-timeout 0")[0] for _ in range(4)] == [keyed, ready, dead, reserved]
        assert b.log.strip() == "", b.log           # no warning about any record
    finally:
        b.kill()


@pytest.fixture
def small_disk(tmp_path):
    d = tmp_path / "disk"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(d)], capture_output=True)
    if r.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail("cannot mount a small tmpfs: %s" % r.stderr.decode())
        pytest.skip("mounting a tmpfs needs root")
    yield d
    subprocess.run(["umount", "-l", str(d)])


def test_a_full_disk_refuses_a_move_and_changes_nothing(small_disk):
    s = Server("fastbean", "-b", str(small_disk), "-s", "32768", "-f", "0").start()
    try:
        with s.client() as c:
            c.use("a")
            ids = []
            while True:
                r = c.cmd(b"put 0 0 60 1000\r\n" + b"x" * 1000)
                if r == b"OUT_OF_MEMORY":
                    break
                ids.append(int(r.split()[1]))
            assert c.cmd(b"move-job %d b" % ids[0]) == b"OUT_OF_MEMORY"
            job = c.stats_job(ids[0])
            assert (job["tube"], job["state"]) == ("a", "ready")
            assert "b" not in c.list_tubes()
            for jid in ids[1:]:
                c.delete(jid)
            assert c.cmd(b"move-job %d b" % ids[0]) == b"MOVED"
        s.stop()
        s = Server("fastbean", "-b", str(small_disk), "-s", "32768").start()
        with s.client() as c:
            assert c.stats_job(ids[0])["tube"] == "b"
    finally:
        s.stop()
