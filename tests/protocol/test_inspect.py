"""What the console reads of the engine (engine/inspect.pxi), in-process: the
same numbers stats-job, stats-tube, stats and list-tube give a client, and
reads that leave everything a client sees as it was."""
import re

import pytest

from fastbean.engine.core import Core
from tests.support.servers import EngineClient


def yaml_numbers(text):
    return {k.decode(): int(v) for k, v in re.findall(rb"^([a-z-]+): (-?\d+)$", text, re.M)}


@pytest.fixture
def engine():
    core = Core(version=b"test")
    return core, EngineClient(core)


def drain(listing_or_scan, budget=7):
    out = []
    while True:
        if hasattr(listing_or_scan, "rows"):
            if listing_or_scan.step(budget):
                return listing_or_scan.rows
        else:
            out += listing_or_scan.step(budget)
            if listing_or_scan.done:
                return out


def test_a_job_reads_as_stats_job_shows_it(engine):
    core, c = engine
    assert c.call(b"use t\r\nput 7 0 30 5\r\nhello\r\nwatch t\r\nreserve\r\n").startswith(
        b"USING t\r\nINSERTED 1\r\nWATCHING 2\r\nRESERVED 1 5\r\n")
    info = core.job_info(1)
    stats = yaml_numbers(c.call(b"stats-job 1\r\n").split(b"\r\n", 1)[1])
    assert {k: info[k] for k in stats} == stats
    assert (info["tube"], info["state"], info["size"]) == ("t", "reserved", 5)
    assert info["holder"] is c.conn
    assert core.job_body(1) == b"hello" and core.job_body(1, 2) == b"he"
    assert core.job_info(2) is None and core.job_body(2) is None
    c.call(b"release 1 0 0\r\n")
    assert core.job_info(1)["holder"] is None


def test_counters_and_tubes_match_stats(engine):
    core, c = engine
    c.call(b"use a\r\nput 0 0 1 1\r\nx\r\nput 0 5 1 1\r\ny\r\npause-tube a 9\r\n")
    stats = yaml_numbers(c.call(b"stats\r\n").split(b"\r\n", 1)[1])
    counters = core.counters()
    skip = {"pid", "rusage-utime", "rusage-stime", "uptime"}
    assert {k: counters[k] for k in stats if k not in skip} == {
        k: v for k, v in stats.items() if k not in skip}
    tube = yaml_numbers(c.call(b"stats-tube a\r\n").split(b"\r\n", 1)[1])
    info = core.tube_info(b"a")
    assert {k: info[k] for k in tube} == tube
    assert core.tube_names() == [b"default", b"a"]
    assert core.tube_info(b"nope") is None
    # reading moved no counter a client sees
    assert yaml_numbers(c.call(b"stats\r\n").split(b"\r\n", 1)[1])["cmd-stats"] == 2


def test_listing_pages_as_list_tube_does(engine):
    core, c = engine
    c.call(b"use l\r\n")
    for i in range(60):
        c.call(b"put %d 0 60 3\r\nj%02d\r\n" % (i % 7, i))
    for state in ("ready",):
        after, seen = None, []
        cursor = b"0"
        while True:
            listing = core.listing(b"l", state, after, 11)
            rows = drain(listing)
            assert listing.total == 60
            reply = c.call(b"list-tube %s %s 11\r\n" % (state.encode(), cursor)).split(b"\r\n")
            cursor = reply[0].split()[2]
            assert [r[0] for r in rows] == [int(line.split()[0]) for line in reply[1:-1]]
            seen += [r[0] for r in rows]
            after = listing.after
            if after is None:
                assert cursor == b"0"
                break
        assert sorted(seen) == list(range(1, 61))
    row = drain(core.listing(b"l", "ready", None, 1))[0]
    assert row[1] == 0 and row[9] == 3 and row[10] == b"j00" and row[11] is None


def test_listing_reserved_shows_the_holder_and_buried_goes_in_kick_order(engine):
    core, c = engine
    other = EngineClient(core)
    c.call(b"use r\r\n" + b"put 0 0 60 1\r\nx\r\n" * 5)
    other.call(b"watch r\r\nreserve\r\nreserve\r\n")
    rows = drain(core.listing(b"r", "reserved"))
    assert [r[0] for r in rows] == [1, 2] and all(r[11] is other.conn for r in rows)
    other.call(b"bury 2 0\r\nbury 1 0\r\n")
    assert [r[0] for r in drain(core.listing(b"r", "buried"))] == [2, 1]
    first = core.listing(b"r", "buried", None, 1)
    assert [r[0] for r in drain(first)] == [2] and first.after == (0, 2)
    assert [r[0] for r in drain(core.listing(b"r", "buried", first.after, 1))] == [1]
    assert drain(core.listing(b"gone", "ready")) == []
    with pytest.raises(ValueError):
        core.listing(b"r", "sleeping")


def test_scan_filters_by_tube_state_and_body(engine):
    core, c = engine
    c.call(b"use s\r\nput 0 0 60 5\r\nalpha\r\nput 0 0 60 4\r\nbeta\r\n"
           b"use u\r\nput 0 0 60 8\r\nalphabet\r\nput 0 9 60 3\r\nalp\r\n")
    assert sorted(drain(core.scan(needle=b"alp"))) == [1, 3, 4]
    assert sorted(drain(core.scan(tube=b"s", needle=b"alp"))) == [1]
    assert sorted(drain(core.scan(states=["delayed"]))) == [4]
    assert sorted(drain(core.scan(needle=b"bet"))) == [2, 3]
    assert sorted(drain(core.scan(bodies=True, tube=b"u"))) == [(3, b"alphabet"), (4, b"alp")]
    assert drain(core.scan(tube=b"none")) == []
    scan = core.scan()
    drain(scan)
    assert (scan.scanned, scan.total) == (4, 4)


def test_a_scan_over_many_jobs_while_the_table_grows(engine):
    core, c = engine
    c.call(b"use big\r\n")
    for i in range(20000):
        c.conn.feed(b"put 0 0 60 6\r\nn%05d\r\n" % i)
    core.end_turn()
    c.take()
    scan = core.scan(needle=b"n1234")
    found = set()
    while not scan.done:
        found.update(scan.step(500))
        for _ in range(50):          # the table grows while the scan runs
            c.conn.feed(b"put 0 0 60 1\r\nz\r\n")
        core.end_turn()
    assert found == set(range(12341, 12351))
    assert core.check()


def test_a_connection_reads_what_it_uses_watches_holds_and_waits_for(engine):
    core, c = engine
    w = EngineClient(core)
    c.call(b"use q\r\nput 0 0 60 1\r\nx\r\n")
    w.call(b"watch q\r\nreserve\r\n")
    w.send(b"reserve-with-timeout 30\r\n")
    info = w.conn.info()
    assert info["use"] == b"default" and info["watch"] == [b"default", b"q"]
    assert [i for i, _ in info["reserved"]] == [1] and 55 < info["reserved"][0][1] <= 60
    assert info["waiting"] and 25 < info["wait_left"] <= 30
    assert info["worker"] and not info["producer"]
    assert c.conn.info()["producer"] and not c.conn.info()["waiting"]
