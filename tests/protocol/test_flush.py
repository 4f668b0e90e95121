"""flush-tube and flush-buried (docs/protocol-extensions.md) on real servers:
replies and bad input, other clients served while a big flush runs, the
binlog after a kill -9 with -f 0, no reply before its deletes are durable,
and a binlog that beanstalkd 1.12 reads afterwards."""
import os
import signal
import socket
import time

import pytest

from fastbean.engine.core import Core
from tests.support.servers import EngineClient, Server, put_many, round_trips_until_readable
from tests.support.servers import fastbean_with_binlog as fastbean
from tests.support.servers import job_exists as exists

pytestmark = pytest.mark.timeout(120)


def fill(c, tube, ready=3, delayed=2, buried=2):
    """Jobs of every state but reserved in tube; returns {state: [ids]}."""
    c.use(tube)
    c.watch(tube)
    ids = {"ready": [c.put(b"r%d" % k) for k in range(ready)],
           "delayed": [c.put(b"d%d" % k, delay=1000) for k in range(delayed)],
           "buried": []}
    for k in range(buried):
        jid = c.put(b"b%d" % k, pri=4000000000)
        c.reserve_job(jid)
        c.cmd(b"bury %d 0" % jid, b"BURIED")
        ids["buried"].append(jid)
    return ids


def no_reply(c, wait=0.5):
    """True when nothing comes back on c within `wait` seconds."""
    before = c.sock.gettimeout()
    c.sock.settimeout(wait)
    try:
        c.sock.recv(1, socket.MSG_PEEK)
        return False
    except socket.timeout:
        return True
    finally:
        c.sock.settimeout(before)


# -- replies ---------------------------------------------------------------------------

def test_flush_tube_deletes_every_state_of_one_tube(fastbean_server):
    with fastbean_server.client() as c, fastbean_server.client() as worker:
        gone = fill(c, "gone")
        kept = fill(c, "kept")
        worker.watch("gone")
        held = worker.job(b"reserve-job %d" % gone["ready"][0])[0]
        assert c.cmd(b"flush-tube gone") == b"FLUSHED 7"
        assert not any(exists(c, j) for ids in gone.values() for j in ids)
        assert all(exists(c, j) for ids in kept.values() for j in ids)
        # the worker's reservation went with it, as a delete by another client would
        assert worker.cmd(b"delete %d" % held) == b"NOT_FOUND"
        st = c.stats_tube("gone")
        assert [st["current-jobs-" + s] for s in ("ready", "delayed", "buried", "reserved")] == [0] * 4
        assert st["cmd-delete"] == 0            # stats-tube counts delete commands only
        assert c.stats()["cmd-delete"] == 1        # the worker's, which found nothing
        assert c.cmd(b"flush-tube gone") == b"FLUSHED 0"


def test_a_blocked_worker_whose_job_is_flushed_gets_no_deadline_soon(fastbean_server):
    # its DEADLINE_SOON timer was for the flushed job: the reserve times out instead
    with fastbean_server.client() as c, fastbean_server.client(10) as worker:
        c.use("w")
        worker.watch("w")
        held = c.put(b"x", ttr=2)
        worker.reserve_job(held)
        worker.send(b"reserve-with-timeout 3\r\n")
        c.cmd(b"flush-tube w", b"FLUSHED 1")
        assert worker.line() == b"TIMED_OUT"


def test_flush_buried_leaves_the_other_states(fastbean_server):
    with fastbean_server.client() as c:
        ids = fill(c, "t", buried=3)
        c.watch("t")
        assert c.cmd(b"flush-buried t") == b"FLUSHED 3"
        assert not any(exists(c, j) for j in ids["buried"])
        assert all(exists(c, j) for j in ids["ready"] + ids["delayed"])
        assert c.cmd(b"flush-buried t") == b"FLUSHED 0"
        ext = c.yaml(b"fastbean-stats")
        assert (ext["cmd-flush-tube"], ext["cmd-flush-buried"], ext["jobs-flushed"]) == (0, 2, 3)


def test_a_tube_that_does_not_exist_flushes_nothing(fastbean_server):
    # tuber's answer: nothing there, nothing deleted; and no tube is made
    with fastbean_server.client() as c:
        assert c.cmd(b"flush-tube nosuch") == b"FLUSHED 0"
        assert c.cmd(b"flush-buried nosuch") == b"FLUSHED 0"
        assert "nosuch" not in c.list_tubes()


def test_a_flushed_tube_nobody_uses_goes_away(fastbean_server):
    with fastbean_server.client() as c, fastbean_server.client() as admin:
        c.use("brief")
        c.put(b"x")
        c.use("default")
        assert admin.cmd(b"flush-tube brief") == b"FLUSHED 1"
        assert "brief" not in admin.list_tubes()


@pytest.mark.parametrize("line", [
    b"flush-tube", b"flush-tube ", b"flush-tube  default", b"flush-tube -x",
    b"flush-tube " + b"a" * 201, b"flush-tube a b", b"flush-tube a*", b"flush-tubes default",
    b"flush-buried", b"flush-buried -", b"flush-buried default ", b"flush-buriedx",
])
def test_bad_lines_are_bad_format_and_delete_nothing(fastbean_server, line):
    with fastbean_server.client() as c:
        j = c.put(b"x")
        assert c.cmd(line) == b"BAD_FORMAT"
        assert exists(c, j)
        assert c.cmd(b"flush-tube " + b"a" * 200) == b"FLUSHED 0"   # the longest name is fine


def test_pipelined_commands_after_a_flush_wait_for_it(fastbean_server):
    with fastbean_server.client() as c:
        c.use("p")
        c.send(b"".join(b"put 0 0 60 1\r\nx\r\n" for _ in range(10000)))
        for _ in range(10000):
            assert c.line().startswith(b"INSERTED ")
        c.send(b"flush-tube p\r\nput 0 0 60 1\r\ny\r\nflush-tube p\r\n")
        assert c.line() == b"FLUSHED 10000"
        assert c.line().startswith(b"INSERTED ")
        assert c.line() == b"FLUSHED 1"


def test_the_python_client_flushes_and_knows_a_server_without_it():
    from fastbean.client import ServerError
    with Server("fastbean") as s:
        s.start()
        with s.client() as c:
            fill(c, "t", ready=2, delayed=1, buried=2)
            assert c.flush_buried("t") == 2
            assert c.flush_tube(b"t") == 3
            assert c.flush_tube("nosuch") == 0
    with Server("fastbean", "--strict") as s:
        s.start()
        with s.client() as c:
            with pytest.raises(ServerError) as e:
                c.flush_tube("t")
            assert e.value.reply == b"UNKNOWN_COMMAND"


# -- a big flush stalls nobody ------------------------------------------------------------

def test_other_clients_are_answered_while_a_big_flush_runs(fastbean_server):
    n = 200000
    with fastbean_server.client(60) as c, fastbean_server.client() as probe:
        c.use("big")
        put_many(c, n)
        c.send(b"flush-tube big\r\n")
        answered = round_trips_until_readable(probe, c)
        assert c.line() == b"FLUSHED %d" % n
        assert answered >= 2, answered
        assert c.stats()["current-jobs-ready"] == 0


# -- durability -------------------------------------------------------------------------

def test_kill_9_after_flushed_with_f0_keeps_the_flush_and_the_rest(tmp_path):
    s = fastbean(tmp_path, "-f", "0", "-s", "65536")
    with s.client() as c:
        kept = fill(c, "kept", ready=300, delayed=20, buried=20)
        gone = fill(c, "gone", ready=3000, delayed=200, buried=200)
        c.use("kept")
        c.cmd(b"flush-buried kept", b"FLUSHED 20")
        assert c.cmd(b"flush-tube gone") == b"FLUSHED 3400"
    os.kill(s.pid, signal.SIGKILL)
    s.wait()
    s = fastbean(tmp_path)
    try:
        with s.client() as c:
            assert not any(exists(c, j) for ids in gone.values() for j in ids)
            assert not any(exists(c, j) for j in kept["buried"])
            assert all(exists(c, j) for j in kept["ready"] + kept["delayed"])
            st = c.stats()
            assert (st["current-jobs-ready"], st["current-jobs-delayed"],
                    st["current-jobs-buried"]) == (300, 20, 0)
    finally:
        s.stop()


def test_kill_9_in_the_middle_of_a_flush_loses_nothing_else(tmp_path):
    # whatever part of the flush was on disk stays done; every other job,
    # and every job of the tube not yet deleted, comes back whole
    s = fastbean(tmp_path, "-f", "0")
    with s.client(60) as c:
        kept = fill(c, "kept", ready=50, delayed=5, buried=5)
        c.use("gone")
        c.send(b"".join(b"put 0 0 60 5\r\ng%04d\r\n" % (k % 10000) for k in range(100000)))
        gone = [int(c.line().split()[1]) for _ in range(100000)]
        c.send(b"flush-tube gone\r\n")
        time.sleep(0.01)
    os.kill(s.pid, signal.SIGKILL)
    s.wait()
    s = fastbean(tmp_path)
    try:
        with s.client() as c:
            assert all(exists(c, j) for ids in kept.values() for j in ids)
            st = c.stats()
            left = st["current-jobs-ready"] - 50
            assert 0 <= left <= len(gone) and st["current-jobs-buried"] == 5
            if left:
                c.use("gone")
                rows = []
                jid = c.peek_state("ready")[0]
                assert jid in set(gone)
                for jid in gone[-3:]:
                    if exists(c, jid):
                        rows.append(c.peek(jid))
                assert all(len(body) == 5 and body.startswith(b"g") for body in rows)
    finally:
        s.stop()


def test_f0_flushed_waits_for_the_deletes_to_be_durable(tmp_path, gated_fsync):
    gate = gated_fsync()
    gate.unlink()                       # open while the jobs go in
    s = fastbean(tmp_path, "-f", "0")
    try:
        with s.client() as c:
            ids = fill(c, "t")
            gate.write_text("")
            c.send(b"flush-tube t\r\n")
            assert no_reply(c)
            gate.unlink()
            assert c.line() == b"FLUSHED 7"
            assert not any(exists(c, j) for v in ids.values() for j in v)
    finally:
        s.stop()


def test_f0_a_big_flush_holds_up_no_reply_that_shows_none_of_it(tmp_path, gated_fsync):
    # Issue 35, defect 5: with -f 0 a reply that showed or confirmed nothing
    # of the flush still waited for every record the flush kept adding.
    # Here the disk holds back every fsync from the flush on: replies about
    # another tube are answered all along (before, none would ever come),
    # and one about the flushed tube waits, with FLUSHED, for the disk.
    n = 20000                                   # FLUSH_BATCH is 4096: five loop turns
    gate = gated_fsync()
    gate.unlink()
    s = fastbean(tmp_path, "-f", "0")
    try:
        with s.client(60) as c, s.client() as probe, s.client() as shows:
            probe.use("other")
            probe.put(b"x")
            c.use("big")
            put_many(c, n)
            gate.write_text("")                 # the disk stops answering
            c.send(b"flush-tube big\r\n")
            for _ in range(20):
                assert probe.stats_tube("other")["current-jobs-ready"] == 1
                assert probe.job(b"peek-ready")[1] == b"x"
            shows.send(b"stats-tube big\r\n")
            assert no_reply(c) and no_reply(shows)
            gate.unlink()
            assert c.line() == b"FLUSHED %d" % n
            assert shows.line().startswith(b"OK ")
    finally:
        gate.unlink(missing_ok=True)
        s.stop()


def test_beanstalkd_reads_the_binlog_after_a_flush(tmp_path):
    s = fastbean(tmp_path)
    with s.client() as c:
        gone = fill(c, "gone", ready=50, delayed=5, buried=5)
        kept = fill(c, "kept", ready=7, delayed=3, buried=2)
        c.cmd(b"flush-tube gone", b"FLUSHED 60")
        c.cmd(b"flush-buried kept", b"FLUSHED 2")
        last = c.put(b"last")
    s.stop()
    b = Server("beanstalkd", "-b", str(tmp_path / "binlog")).start()
    try:
        with b.client() as c:
            assert not any(exists(c, j) for ids in gone.values() for j in ids)
            assert not any(exists(c, j) for j in kept["buried"])
            for j in kept["ready"] + kept["delayed"] + [last]:
                assert exists(c, j), j
            st = c.stats()
            assert (st["current-jobs-ready"], st["current-jobs-delayed"],
                    st["current-jobs-buried"]) == (8, 3, 0)
            assert c.put(b"next") == last + 1
    finally:
        b.kill()


def test_a_flush_finishes_after_its_client_hangs_up(fastbean_server):
    with fastbean_server.client() as c:
        c.use("half")
        c.send(b"put 0 0 60 1\r\nx\r\n" * 50000)
        for _ in range(50000):
            c.line()
    k = socket.create_connection(fastbean_server.address)
    k.sendall(b"flush-tube half\r\n")
    k.close()
    with fastbean_server.client() as c:
        # a command read before the hang-up runs to its end, as in beanstalkd
        deadline = time.monotonic() + 20
        while "half" in c.list_tubes():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert c.stats()["current-jobs-ready"] == 0
        assert c.yaml(b"fastbean-stats")["jobs-flushed"] == 50000
        assert c.put(b"after") == 50001


def test_a_connection_lost_mid_flush_lets_go_of_the_tube():
    # in-process, so the loss falls between two slices of the flush
    core = Core(version=b"test")
    c = EngineClient(core)
    c.call(b"use lost\r\n")
    for _ in range(10000):
        c.conn.feed(b"put 0 0 60 1\r\nx\r\n")
        core.end_turn()
    c.take()
    c.conn.feed(b"flush-tube lost\r\n")        # one slice now, the rest on later turns
    core.end_turn()
    assert c.take() == b""
    c.conn.gone()
    assert core.check()
    assert 0 < core.current_jobs < 10000
    left = core.current_jobs
    other = EngineClient(core)
    assert other.call(b"flush-tube lost\r\n") == b"FLUSHED %d\r\n" % left
    assert other.call(b"list-tubes\r\n") == b"OK 14\r\n---\n- default\n\r\n"
    assert core.check() and core.current_jobs == 0
