"""Unique jobs: a put tagged idp:KEY (tuber's syntax and replies;
docs/protocol-extensions.md) on real servers: replies against a model,
the priority ratchet, cooldowns, bad tags, --strict, and the keys across
kill -9 with -f 0, across binlog compaction, and in a binlog that
beanstalkd 1.12 reads."""
import os
import signal
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.servers import Server
from tests.support.servers import fastbean_with_binlog as fastbean
from tests.support.servers import job_exists as exists

pytestmark = pytest.mark.timeout(180)


def put_raw(c, tag, body=b"x", pri=0, delay=0):
    return c.cmd(b"put %d %d 60 %d %s\r\n%s" % (pri, delay, len(body), tag, body))


def test_a_job_without_a_key_costs_what_it_did():
    # the key's flag lives in padding: the struct of every job is as big as
    # before the extensions (144 bytes on x86-64, as in the tree before them)
    import struct

    from fastbean.engine.core import JOB_STRUCT_BYTES
    assert JOB_STRUCT_BYTES == (144 if struct.calcsize("P") == 8 else JOB_STRUCT_BYTES)


# -- replies -----------------------------------------------------------------------------

def test_a_key_answers_with_its_live_job_and_its_state(fastbean_server):
    with fastbean_server.client() as c:
        c.use("t")
        c.watch("t")
        jid, state = c.put_unique(b"one", "k1")
        assert state is None
        assert c.put_unique(b"two", "k1") == (jid, "ready")
        assert c.peek(jid) == b"one"                    # the first body stays
        c.use("other")                                   # a key belongs to its tube
        other, state = c.put_unique(b"three", "k1")
        assert other != jid and state is None
        c.use("t")
        c.reserve_job(jid)
        assert c.put_unique(b"x", "k1") == (jid, "reserved")
        c.cmd(b"bury %d 5" % jid, b"BURIED")
        assert c.put_unique(b"x", "k1") == (jid, "buried")
        later, _ = c.put_unique(b"y", "k2", delay=100)
        assert c.put_unique(b"y", "k2") == (later, "delayed")
        assert c.stats_tube("t")["total-jobs"] == 2
        ext = c.yaml(b"fastbean-stats")
        assert ext["put-key-hits"] == 4 and ext["current-keys"] == 3


def test_a_more_urgent_put_gives_the_job_its_priority_never_a_less_urgent_one(fastbean_server):
    with fastbean_server.client() as c:
        c.use("t")
        first = c.put(b"first", pri=60)
        jid, _ = c.put_unique(b"x", "k", pri=100)
        assert put_raw(c, b"idp:k", pri=50) == b"INSERTED %d READY 50" % jid
        assert c.stats_job(jid)["pri"] == 50
        assert c.peek_state("ready")[0] == jid          # ahead of `first` now
        assert put_raw(c, b"idp:k", pri=200) == b"INSERTED %d READY" % jid
        assert c.stats_job(jid)["pri"] == 50
        c.reserve_job(jid)
        assert put_raw(c, b"idp:k", pri=7) == b"INSERTED %d RESERVED 7" % jid
        assert c.stats_job(jid)["pri"] == 7
        assert first


def test_a_key_goes_with_its_job_or_cools_down_for_the_seconds_asked(fastbean_server):
    with fastbean_server.client() as c:
        c.use("t")
        a, _ = c.put_unique(b"a", "plain")
        c.delete(a)
        again, state = c.put_unique(b"a", "plain")
        assert state is None and again != a
        b, _ = c.put_unique(b"b", "cool", cooldown=2)
        c.delete(b)
        assert put_raw(c, b"idp:cool:2") == b"INSERTED %d DELETED" % b
        assert put_raw(c, b"idp:cool") == b"INSERTED %d DELETED" % b   # the key, whatever the tag says
        assert c.yaml(b"fastbean-stats")["current-keys-cooling"] == 1
        time.sleep(2.2)
        fresh, state = c.put_unique(b"b", "cool", cooldown=2)
        assert state is None and fresh not in (a, b)


@pytest.mark.parametrize("tag", [
    b"idp:", b"idp:k:", b"idp:k:x", b"idp:" + b"k" * 201, b"grp:x", b"idp:k extra",
    b"idp:k:4294967296", b" idp:k", b"IDP:k", b"idp:k\x7f", b"idp:\xffk"])
def test_a_bad_tag_is_bad_format_as_in_beanstalkd(fastbean_server, tag):
    # no body is read after it: the body line is a command of its own
    with fastbean_server.client() as c:
        c.send(b"put 0 0 60 5 %s\r\nhello\r\n" % tag)
        assert c.line() == b"BAD_FORMAT"
        assert c.line() == b"UNKNOWN_COMMAND"
        assert c.stats()["current-jobs-ready"] == 0


def test_strict_answers_a_tagged_put_as_beanstalkd_does(tmp_path):
    lines = b"put 0 0 60 5 idp:k\r\nhello\r\nput 0 0 60 5 idp:k:9\r\nhello\r\n"
    replies = []
    for name, args in (("beanstalkd", ()), ("fastbean", ("--strict",))):
        s = Server(name, *args).start()
        try:
            with s.client() as c:
                c.send(lines)
                replies.append([c.line() for _ in range(4)])
        finally:
            s.kill()
    assert replies[0] == replies[1] == [b"BAD_FORMAT", b"UNKNOWN_COMMAND"] * 2


# -- against a model ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def testing_server():
    s = Server("fastbean", "--testing").start()
    yield s
    s.stop()


OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), st.sampled_from(["t1", "t2"]), st.sampled_from("abc"),
              st.sampled_from([0, 3600]), st.integers(0, 3)),
    st.tuples(st.just("delete"), st.integers(0, 30)),
    st.tuples(st.just("bury"), st.integers(0, 30)),
    st.tuples(st.just("flush"), st.sampled_from(["t1", "t2"])),
), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=OPS)
def test_keys_follow_a_model(testing_server, ops):
    # the model: per (tube, key) the live job, or the job deleted with a
    # cooldown (3600 s: never over within an example)
    with testing_server.client() as c:
        c.cmd(b"fastbean-reset", b"RESET")          # which closes this connection
    with testing_server.client() as c:
        live, cooling, pri, state, made = {}, {}, {}, {}, []
        for op in ops:
            if op[0] == "put":
                _, tube, key, cool, p = op
                c.use(tube)
                tag = b"idp:%s" % key.encode() + (b":%d" % cool if cool else b"")
                reply = put_raw(c, tag, pri=p).split()
                k = (tube, key)
                if k in live:
                    jid = live[k]
                    want = [b"INSERTED", b"%d" % jid, state[jid].upper().encode()]
                    if p < pri[jid]:
                        pri[jid] = p
                        want.append(b"%d" % p)
                    assert reply == want
                elif k in cooling:
                    assert reply == [b"INSERTED", b"%d" % cooling[k], b"DELETED"]
                else:
                    assert len(reply) == 2
                    jid = int(reply[1])
                    live[k], pri[jid], state[jid] = jid, p, "ready"
                    made.append((jid, k, cool))
            elif op[0] in ("delete", "bury"):
                if not made:
                    continue
                jid, k, cool = made[op[1] % len(made)]
                if op[0] == "bury":
                    if live.get(k) == jid and state[jid] == "ready":
                        c.reserve_job(jid)
                        c.cmd(b"bury %d %d" % (jid, pri[jid]), b"BURIED")
                        state[jid] = "buried"
                    continue
                if live.get(k) == jid:
                    c.delete(jid)
                    del live[k]
                    if cool:
                        cooling[k] = jid
                else:
                    assert c.cmd(b"delete %d" % jid) == b"NOT_FOUND"
            else:
                tube = op[1]
                gone = [k for k in live if k[0] == tube]
                assert c.cmd(b"flush-tube " + tube.encode()) == b"FLUSHED %d" % len(gone)
                for k in gone:
                    jid = live.pop(k)
                    if dict((m[0], m[2]) for m in made)[jid]:
                        cooling[k] = jid
        ext = c.yaml(b"fastbean-stats")
        assert ext["current-keys"] == len(live)
        assert ext["current-keys-cooling"] == len(cooling)


# -- durability --------------------------------------------------------------------------

def test_keys_and_cooldowns_survive_kill_9_with_f0(tmp_path):
    s = fastbean(tmp_path, "-f", "0")
    with s.client() as c:
        c.use("t")
        live, _ = c.put_unique(b"live", "live")
        plain, _ = c.put_unique(b"plain", "plain")
        cool, _ = c.put_unique(b"cool", "cool", cooldown=3600)
        c.delete(plain)
        c.delete(cool)
        c.reserve_job(live)
        c.cmd(b"bury %d 9" % live, b"BURIED")
    os.kill(s.pid, signal.SIGKILL)
    s.wait()
    s = fastbean(tmp_path, "-f", "0")
    try:
        with s.client() as c:
            c.use("t")
            assert c.put_unique(b"x", "live") == (live, "buried")
            assert put_raw(c, b"idp:cool") == b"INSERTED %d DELETED" % cool
            again, state = c.put_unique(b"x", "plain")
            assert state is None and again > cool
    finally:
        s.stop()


def test_keys_and_cooldowns_outlive_the_files_that_first_held_them(tmp_path):
    # small files and much churn: the files of the keyed put, the delete and
    # the retry limit go, and their state was written forward first
    s = fastbean(tmp_path, "-s", "65536")
    with s.client() as c:
        c.use("t")
        kept, _ = c.put_unique(b"kept", "kept")
        gone, _ = c.put_unique(b"gone", "gone", cooldown=3600)
        c.delete(gone)
        c.cmd(b"retry-limit 3 dead", b"RETRY_LIMIT 3 dead")
        c.use("churn")
        body = b"z" * 1000
        for _ in range(20):
            ids = [c.put(body) for _ in range(200)]
            for jid in ids:
                c.delete(jid)
        time.sleep(1.5)                     # the binlog's upkeep runs on the timer
        files = sorted(os.listdir(tmp_path / "binlog"))
    assert "binlog.1" not in files, files
    s.stop()
    s = fastbean(tmp_path)
    try:
        with s.client() as c:
            c.use("t")
            assert c.put_unique(b"x", "kept") == (kept, "ready")
            assert put_raw(c, b"idp:gone") == b"INSERTED %d DELETED" % gone
            assert c.retry_limit() == (3, "dead")
    finally:
        s.stop()


def test_beanstalkd_reads_a_binlog_with_keys(tmp_path):
    s = fastbean(tmp_path)
    with s.client() as c:
        c.use("t")
        live, _ = c.put_unique(b"live", "live", cooldown=60, pri=5)
        gone, _ = c.put_unique(b"gone", "gone", cooldown=60)
        c.delete(gone)
        plain = c.put(b"plain")
        c.put_unique(b"again", "live", pri=1)           # a ratchet: a short record
    s.stop()
    b = Server("beanstalkd", "-b", str(tmp_path / "binlog")).start()
    try:
        with b.client() as c:
            assert c.peek(live) == b"live" and c.stats_job(live)["pri"] == 1
            assert c.peek(plain) == b"plain"
            assert not exists(c, gone)
            assert c.stats()["current-jobs-ready"] == 2
            assert c.list_tubes() == ["default", "t"]
            assert c.put(b"next") > plain
    finally:
        b.kill()
