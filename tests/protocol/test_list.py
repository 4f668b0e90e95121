"""list-tube (docs/protocol-extensions.md) on a real server: each state of
the used tube in the order its jobs leave it, paging by cursor, the fields of a row, bad input,
and other clients served while a page of a big tube is gathered."""
import pytest

from tests.support.servers import put_many, round_trips_until_readable

pytestmark = pytest.mark.timeout(120)


def page(c, state, cursor=b"0", count=1000):
    """One page of the used tube: ([(id, pri, age, time-left, bytes)], next cursor)."""
    head = c.cmd(b"list-tube %s %s %d" % (state, cursor, count))
    word, n, nxt = head.split()
    assert word == b"LISTED", head
    return [tuple(int(v) for v in c.line().split()) for _ in range(int(n))], nxt


def every_page(c, state, count):
    rows, cursor = [], b"0"
    while True:
        more, cursor = page(c, state, cursor, count)
        rows += more
        if cursor == b"0":
            return rows


def test_each_state_in_the_order_it_is_left(fastbean_server):
    with fastbean_server.client() as c, fastbean_server.client() as worker:
        c.use("t")
        ready = [c.put(b"r" * k, pri=p) for k, p in enumerate([5, 1, 5, 0, 4294967295, 1])]
        delayed = [c.put(b"d", delay=d) for d in (300, 100, 200, 100)]
        buried = []
        for k in range(4):
            jid = c.put(b"b%d" % k, pri=9)
            worker.reserve_job(jid)
            buried.append(jid)
        for jid in reversed(buried):            # bury order is kick order
            worker.cmd(b"bury %d %d" % (jid, 7), b"BURIED")
        held = [c.put(b"h", ttr=t) for t in (500, 50, 100)]
        for jid in held:
            worker.reserve_job(jid)

        rows = every_page(c, b"ready", 4)
        assert [r[0] for r in rows] == [ready[3], ready[1], ready[5], ready[0], ready[2], ready[4]]
        assert [(r[1], r[4]) for r in rows] == [(0, 3), (1, 1), (1, 5), (5, 0), (5, 2),
                                                (4294967295, 4)]
        rows = every_page(c, b"delayed", 3)
        assert [r[0] for r in rows] == [delayed[1], delayed[3], delayed[2], delayed[0]]
        assert 90 <= rows[0][3] <= 100 and rows[0][2] >= 0            # time-left, age
        assert [(r[0], r[1], r[3], r[4]) for r in every_page(c, b"buried", 1)] == [
            (jid, 7, 0, 2) for jid in reversed(buried)]
        rows = every_page(c, b"reserved", 2)
        assert [r[0] for r in rows] == [held[1], held[2], held[0]]
        assert 40 <= rows[0][3] <= 50


def test_pages_cover_every_job_once(fastbean_server):
    with fastbean_server.client() as c:
        c.use("many")
        c.send(b"".join(b"put %d 0 60 1\r\nx\r\n" % (k % 13) for k in range(5000)))
        ids = [int(c.line().split()[1]) for _ in range(5000)]
        for count in (1000, 7, 999):
            rows = every_page(c, b"ready", count)
            assert sorted(r[0] for r in rows) == ids
            assert rows == sorted(rows, key=lambda r: (r[1], r[0]))


def test_jobs_that_leave_between_pages_are_skipped(fastbean_server):
    with fastbean_server.client() as c:
        c.use("moving")
        ids = [c.put(b"x", pri=0) for _ in range(6)]
        first, cursor = page(c, b"ready", count=2)
        assert [r[0] for r in first] == ids[:2] and cursor == b"0.%d" % ids[1]
        c.delete(ids[1])                        # the cursor's own job may go
        c.delete(ids[2])
        rest, cursor = page(c, b"ready", cursor, 10)
        assert [r[0] for r in rest] == ids[3:] and cursor == b"0"


def test_a_buried_cursor_must_still_be_buried(fastbean_server):
    with fastbean_server.client() as c:
        c.use("b")
        c.watch("b")
        ids = []
        for _ in range(3):
            jid = c.put(b"x")
            c.reserve_job(jid)
            c.cmd(b"bury %d 0" % jid, b"BURIED")
            ids.append(jid)
        rows, cursor = page(c, b"buried", count=1)
        assert cursor == b"0.%d" % ids[0]
        c.cmd(b"kick-job %d" % ids[0], b"KICKED")
        assert c.cmd(b"list-tube buried %s 1" % cursor) == b"NOT_FOUND"
        assert [r[0] for r in every_page(c, b"buried", 1)] == ids[1:]


def test_an_empty_tube_lists_nothing_and_the_used_tube_is_listed(fastbean_server):
    with fastbean_server.client() as c, fastbean_server.client() as other:
        other.use("elsewhere")
        other.put(b"x")
        for state in (b"ready", b"delayed", b"buried", b"reserved"):
            assert c.cmd(b"list-tube %s 0 10" % state) == b"LISTED 0 0"
        assert c.yaml(b"fastbean-stats")["cmd-list-tube"] == 4
        assert other.cmd(b"list-tube ready 0 10") == b"LISTED 1 0"


@pytest.mark.parametrize("line", [
    b"list-tube ", b"list-tube ready", b"list-tube ready 0", b"list-tube t ready 0 1",
    b"list-tube ready 0 0", b"list-tube ready 0 1001", b"list-tube ready 0 4294967296",
    b"list-tube ready 0 99999999999999999999", b"list-tube urgent 0 1",
    b"list-tube READY 0 1", b"list-tube ready x 1", b"list-tube ready 1 1",
    b"list-tube ready 1. 1", b"list-tube ready .1 1", b"list-tube ready 1.0 1",
    b"list-tube ready -1.2 1", b"list-tube ready 1.2.3 1", b"list-tube ready 0 1 x",
    b"list-tube ready 0 1 ", b"list-tube  ready 0 1", b"list-tube ready  0 1",
    b"list-tube ready 0  1", b"list-tube ready 1. 2 1", b"list-tube ready 0 +1",
    b"list-tube ready 18446744073709551616.1 1", b"list-tube ready 1.18446744073709551616 1",
])
def test_bad_lines_are_bad_format(fastbean_server, line):
    with fastbean_server.client() as c:
        assert c.cmd(line) == b"BAD_FORMAT"
        assert c.cmd(b"list-tube reserved 18446744073709551615.18446744073709551615 1000") == \
            b"LISTED 0 0"


def test_standard_list_commands_are_untouched(fastbean_server):
    with fastbean_server.client() as c:
        assert c.cmd(b"list-tube-used") == b"USING default"
        assert c.cmd(b"list-tubex") == b"UNKNOWN_COMMAND"
        assert c.cmd(b"list-tube") == b"UNKNOWN_COMMAND"       # as beanstalkd: no space, not ours
        assert c.cmd(b"list-tubes x") == b"BAD_FORMAT"


def test_other_clients_are_answered_while_a_big_page_is_gathered(fastbean_server):
    n = 200000
    with fastbean_server.client(60) as c, fastbean_server.client() as probe:
        c.use("big")
        put_many(c, n)
        c.send(b"list-tube ready 0 1000\r\n")
        answered = round_trips_until_readable(probe, c)
        assert c.line() == b"LISTED 1000 0.1000"
        for k in range(1, 1001):
            id_, pri, _age, left, size = c.line().split()
            assert (int(id_), pri, left, size) == (k, b"0", b"0", b"1")
        assert answered >= 2, answered


def test_the_python_client_pages_and_knows_a_server_without_it():
    from fastbean.client import ServerError
    from tests.support.servers import Server
    with Server("fastbean") as s:
        s.start()
        with s.client() as c:
            c.use("p")
            ids = [c.put(b"abc", pri=p) for p in (3, 1, 2)]
            rows, cursor = c.list_tube("ready", count=2)
            assert [(r[0], r[1], r[4]) for r in rows] == [(ids[1], 1, 3), (ids[2], 2, 3)]
            rows, cursor = c.list_tube("ready", cursor)
            assert [(r[0], r[1], r[3], r[4]) for r in rows] == [(ids[0], 3, 0, 3)] and cursor == "0"
    with Server("fastbean", "--strict") as s:
        s.start()
        with s.client() as c:
            with pytest.raises(ServerError) as e:
                c.list_tube("ready")
            assert e.value.reply == b"UNKNOWN_COMMAND"


def test_a_connection_lost_mid_page_lets_go_of_the_tube():
    # in-process, so the loss falls between two slices of the page
    from fastbean.engine.core import Core
    from tests.support.servers import EngineClient
    core = Core(version=b"test")
    c = EngineClient(core)
    c.call(b"use gone-mid-page\r\n")
    for _ in range(50000):
        c.conn.feed(b"put 0 0 60 1\r\nx\r\n")
        core.end_turn()
    c.take()
    c.conn.feed(b"list-tube ready 0 3\r\n")     # one slice now, the rest on later turns
    core.end_turn()
    assert c.take() == b""
    c.conn.gone()
    assert core.check()
    other = EngineClient(core)
    lines = other.call(b"use gone-mid-page\r\nlist-tube ready 0 3\r\n").split(b"\r\n")
    assert lines[:2] == [b"USING gone-mid-page", b"LISTED 3 0.3"]
    assert [line.split()[0] for line in lines[2:5]] == [b"1", b"2", b"3"]
    assert other.call(b"flush-tube gone-mid-page\r\nuse default\r\nlist-tubes\r\n") == (
        b"FLUSHED 50000\r\nUSING default\r\nOK 14\r\n---\n- default\n\r\n")
    assert core.check()
