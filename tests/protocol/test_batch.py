"""reserve-batch and delete-batch (tuber's syntax, docs/protocol-extensions.md)
on a real server: what is ready in reserve order, waiting with a timeout,
DEADLINE_SOON, a waiter that goes away, deletes by id and their binlog, bad
input."""
import os
import signal
import time

import pytest

pytestmark = pytest.mark.timeout(60)


def batch(c, line):
    """Send a reserve-batch line; [(id, body)] of its reply."""
    head = c.cmd(line)
    word, n = head.split()
    assert word == b"RESERVED_BATCH", head
    return [_block(c) for _ in range(int(n))]


def _block(c):
    word, jid, size = c.line().split()
    assert word == b"RESERVED"
    return int(jid), c.body(int(size))


def test_what_is_ready_in_reserve_order(fastbean_server):
    with fastbean_server.client() as c, fastbean_server.client() as worker:
        c.use("a")
        a = [c.put(b"a%d" % k, pri=p) for k, p in enumerate([5, 1, 3])]
        c.use("b")
        b = [c.put(b"b%d" % k, pri=p) for k, p in enumerate([2, 1])]
        c.use("paused")
        c.put(b"p", pri=0)
        c.cmd(b"pause-tube paused 60", b"PAUSED")
        for tube in ("a", "b", "paused"):
            worker.watch(tube)
        assert batch(worker, b"reserve-batch 4") == [
            (a[1], b"a1"), (b[1], b"b1"), (b[0], b"b0"), (a[2], b"a2")]
        assert batch(worker, b"reserve-batch 1000") == [(a[0], b"a0")]   # the paused tube waits
        assert batch(worker, b"reserve-batch 3") == []
        assert batch(worker, b"reserve-batch 3 0") == []
        assert c.stats_job(a[1])["reserves"] == 1 and c.stats_job(a[1])["state"] == "reserved"
        worker.cmd(b"delete %d" % a[1], b"DELETED")
        st = c.stats()
        assert (st["cmd-reserve"], st["current-jobs-reserved"]) == (0, 4)
        ext = c.yaml(b"fastbean-stats")
        assert (ext["cmd-reserve-batch"], ext["jobs-batch-reserved"]) == (4, 5)


def test_with_a_timeout_it_waits_for_the_first_job(fastbean_server):
    with fastbean_server.client() as c, fastbean_server.client(10) as worker:
        worker.send(b"reserve-batch 10 5\r\n")
        time.sleep(0.2)
        assert c.stats()["current-waiting"] == 1
        jid = c.put(b"first")
        assert worker.line() == b"RESERVED_BATCH 1"
        assert _block(worker) == (jid, b"first")
        worker.send(b"reserve-batch 10 1\r\n")
        t0 = time.monotonic()
        assert worker.line() == b"RESERVED_BATCH 0"           # never TIMED_OUT
        assert time.monotonic() - t0 >= 0.9


def test_deadline_soon_while_waiting_and_at_once(fastbean_server):
    with fastbean_server.client() as c, fastbean_server.client(10) as worker:
        held = c.put(b"h", ttr=2)
        worker.reserve_job(held)
        worker.send(b"reserve-batch 5 10\r\n")
        assert worker.line() == b"DEADLINE_SOON"           # a second before the TTR ends
        assert worker.cmd(b"reserve-batch 5 10") == b"DEADLINE_SOON"    # already in the margin
        assert worker.cmd(b"reserve-batch 5") == b"RESERVED_BATCH 0"   # no wait, no margin
        worker.cmd(b"delete %d" % held, b"DELETED")


def test_a_waiter_that_goes_away_takes_nothing(fastbean_server):
    with fastbean_server.client() as c:
        gone = fastbean_server.client()
        gone.send(b"reserve-batch 5 30\r\n")
        time.sleep(0.2)
        gone.close()
        deadline = time.monotonic() + 5
        while c.stats()["current-waiting"]:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        jid = c.put(b"x")
        assert c.stats_job(jid)["state"] == "ready"


@pytest.mark.parametrize("line", [
    b"reserve-batch", b"reserve-batch ", b"reserve-batch 0", b"reserve-batch 1001",
    b"reserve-batch 4294967296", b"reserve-batch x", b"reserve-batch -1", b"reserve-batch +1",
    b"reserve-batch 1 ", b"reserve-batch  1", b"reserve-batch 1  1", b"reserve-batch 1 -1",
    b"reserve-batch 1 4294967296", b"reserve-batch 1 1 1", b"reserve-batchx 1",
    b"reserve-batch 1 1.5",
])
def test_bad_lines_are_bad_format(fastbean_server, line):
    with fastbean_server.client() as c:
        c.put(b"kept")
        assert c.cmd(line) == b"BAD_FORMAT"
        assert c.stats()["current-jobs-ready"] == 1


def test_the_python_client_reserves_a_batch():
    from fastbean.client import ServerError
    from tests.support.servers import Server
    with Server("fastbean") as s:
        s.start()
        with s.client() as c:
            ids = [c.put(b"j%d" % k) for k in range(3)]
            assert c.reserve_batch(2) == [(ids[0], b"j0"), (ids[1], b"j1")]
            assert c.reserve_batch(5, timeout=1) == [(ids[2], b"j2")]
            assert c.reserve_batch(5) == []
    with Server("fastbean", "--strict") as s:
        s.start()
        with s.client() as c:
            with pytest.raises(ServerError) as e:
                c.reserve_batch(1)
            assert e.value.reply == b"BAD_FORMAT"       # as beanstalkd reads "reserve-..."


def test_delete_batch_deletes_as_delete_would(fastbean_server):
    with fastbean_server.client() as c, fastbean_server.client() as worker:
        ids = [c.put(b"x%d" % k) for k in range(5)]
        held = worker.reserve_job(ids[4])[0]
        c.watch("default")
        mine = c.reserve_job(ids[3])[0]
        assert c.cmd(b"delete-batch %d %d %d %d %d %d" % (
            ids[0], ids[1], ids[1], mine, held, 999999)) == b"DELETED_BATCH 3 3"
        assert [c.yaml(b"stats-job %d" % j)["state"] if j in (ids[2], held) else
                c.cmd(b"stats-job %d" % j) for j in ids] == [
            b"NOT_FOUND", b"NOT_FOUND", "ready", b"NOT_FOUND", "reserved"]
        assert worker.cmd(b"delete-batch %d" % held) == b"DELETED_BATCH 1 0"
        st, tube = c.stats(), c.stats_tube("default")
        assert (st["cmd-delete"], tube["cmd-delete"]) == (0, 0)     # delete commands only
        ext = c.yaml(b"fastbean-stats")
        assert (ext["cmd-delete-batch"], ext["jobs-batch-deleted"]) == (2, 4)


def test_a_batch_reserved_and_deleted_stays_deleted_after_kill_9(tmp_path):
    from tests.support.servers import Server
    d = tmp_path / "binlog"
    d.mkdir()
    s = Server("fastbean", "-b", str(d), "-f", "0").start()
    with s.client() as c:
        ids = [c.put(b"j%d" % k) for k in range(30)]
        c.watch("default")
        got = [jid for jid, _ in c.reserve_batch(20)]
        assert got == ids[:20]
        assert c.delete_batch(got[:15]) == (15, 0)
    os.kill(s.pid, signal.SIGKILL)
    s.wait()
    b = Server("beanstalkd", "-b", str(d)).start()       # beanstalkd reads the deletes too
    try:
        with b.client() as c:
            st = c.stats()
            assert (st["current-jobs-ready"], st["current-jobs-reserved"]) == (15, 0)
            assert c.cmd(b"peek %d" % ids[14]) == b"NOT_FOUND"
            assert c.peek(ids[15]) == b"j15"
    finally:
        b.kill()


@pytest.mark.parametrize("line", [
    b"delete-batch", b"delete-batch ", b"delete-batch  1", b"delete-batch 1 ", b"delete-batch 1  2",
    b"delete-batch x", b"delete-batch 1 x", b"delete-batch -1", b"delete-batch +1",
    b"delete-batch 18446744073709551616", b"delete-batchx 1", b"delete-batch 1,2",
    b"delete-each", b"delete-each 1 ", b"delete-each x", b"delete-eachx 1",
    b"delete-batch " + b" ".join([b"1"] * 1001), b"delete-each " + b" ".join([b"1"] * 1001),
])
def test_bad_delete_batch_lines_are_bad_format(fastbean_server, line):
    with fastbean_server.client() as c:
        c.put(b"kept")
        assert c.cmd(line) == b"BAD_FORMAT"
        assert c.stats()["current-jobs-ready"] == 1


def test_the_python_client_deletes_a_batch():
    from fastbean.client import ServerError
    from tests.support.servers import Server
    with Server("fastbean") as s:
        s.start()
        with s.client() as c:
            ids = [c.put(b"j") for _ in range(3)]
            assert c.delete_batch(ids + [77]) == (3, 1)
    with Server("fastbean", "--strict") as s:
        s.start()
        with s.client() as c:
            with pytest.raises(ServerError) as e:
                c.delete_batch([1])
            assert e.value.reply == b"UNKNOWN_COMMAND"


def test_delete_each_names_the_ids_it_did_not_delete(fastbean_server):
    with fastbean_server.client() as c, fastbean_server.client() as worker:
        ids = [c.put(b"x%d" % k) for k in range(4)]
        held = worker.reserve_job(ids[3])[0]
        assert c.cmd(b"delete-each %d 99999 %d %d %d" % (ids[0], ids[1], ids[1], held)) == \
            b"DELETED_EACH 2 3 99999 %d %d" % (ids[1], held)
        assert c.delete_each([ids[2], 12345]) == [12345]
        assert c.yaml(b"fastbean-stats")["jobs-batch-deleted"] == 3


@pytest.mark.parametrize("command", [b"delete-batch", b"delete-each"])
def test_a_thousand_ids_in_one_line_cut_anywhere(fastbean_server, command):
    # tuber's limit: lines far over beanstalkd's 224 bytes, whatever the reads
    with fastbean_server.client() as c:
        c.send(b"put 0 0 60 1\r\nx\r\n" * 1500)
        ids = [int(c.line().split()[1]) for _ in range(1500)]
        line = command + b" " + b" ".join(b"%d" % i for i in ids[:1000]) + b"\r\n"
        for cut in (5, 223, 224, 225, 1500):           # then the rest in two reads
            c.send(line[:cut])
            time.sleep(0.05)
            c.send(line[cut:len(line) // 2])
            time.sleep(0.05)
            c.send(line[len(line) // 2:] + b"stats-job %d\r\n" % ids[-1])
            reply = c.line()
            first = 1000 if cut == 5 else 0        # the first line deletes them all
            assert reply.split()[1:3] == [b"%d" % first, b"%d" % (1000 - first)], (cut, reply[:40])
            head = c.line()                         # and the next command is read as one
            assert head.startswith(b"OK "), head
            assert b"state: ready" in c.body(int(head.split()[1]))


def test_a_batch_line_over_the_limit_is_one_bad_format(fastbean_server):
    with fastbean_server.client() as c:
        kept = c.put(b"kept")
        c.send(b"delete-batch " + b"%d " % kept * 20000 + b"\r\nstats-job %d\r\n" % kept)
        assert c.line() == b"BAD_FORMAT"
        head = c.line()
        assert head.startswith(b"OK ") and b"state: ready" in c.body(int(head.split()[1]))


def test_strict_frames_a_long_batch_line_as_beanstalkd(tmp_path):
    from tests.support.servers import Server
    line = b"delete-batch " + b" ".join([b"1"] * 200) + b"\r\nstats\r\n"
    heads = []
    for name, args in (("beanstalkd", ()), ("fastbean", ("--strict",))):
        s = Server(name, *args).start()
        try:
            with s.client() as c:
                c.send(line)
                heads.append((c.line(), c.line()[:3]))
        finally:
            s.kill()
    assert heads[0] == heads[1] == (b"BAD_FORMAT", b"OK ")
