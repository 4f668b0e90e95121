"""Retry limits (docs/protocol-extensions.md) on real servers: a tube's
limit buries a job, or moves it to a dead-letter tube, once its releases
and timeouts reach it; the command and its bad input, the server's
default, --strict, and the limits and counts across kill -9 with -f 0."""
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.support.servers import Server
from tests.support.servers import fastbean_with_binlog as fastbean

pytestmark = pytest.mark.timeout(120)


def attempt(c, jid, delay=0):
    c.reserve_job(jid)
    c.cmd(b"release %d 0 %d" % (jid, delay), b"RELEASED")


def test_releases_up_to_the_limit_bury_the_job(fastbean_server):
    with fastbean_server.client() as c:
        c.use("t")
        assert c.retry_limit() == (0, None)
        assert c.retry_limit(3) == (3, None)
        jid = c.put(b"x")
        other = c.put(b"y")
        for _ in range(2):
            attempt(c, jid)
            assert c.stats_job(jid)["state"] == "ready"
        attempt(c, jid)                                 # the third: RELEASED, and buried
        job = c.stats_job(jid)
        assert (job["state"], job["releases"], job["buries"]) == ("buried", 3, 1)
        assert c.stats_job(other)["state"] == "ready"
        c.cmd(b"kick-job %d" % jid, b"KICKED")          # a kicked job has one more go
        attempt(c, jid)
        assert c.stats_job(jid)["state"] == "buried"
        ext = c.yaml(b"fastbean-stats")
        assert (ext["jobs-retry-buried"], ext["jobs-dead-lettered"]) == (2, 0)


def test_a_release_with_a_delay_at_the_limit_buries_too(fastbean_server):
    with fastbean_server.client() as c:
        c.use("t")
        c.retry_limit(1)
        jid = c.put(b"x")
        attempt(c, jid, delay=100)
        assert c.stats_job(jid)["state"] == "buried"


def test_timeouts_count_as_attempts(fastbean_server):
    with fastbean_server.client() as c:
        c.use("t")
        c.watch("t")
        c.retry_limit(2)
        jid = c.put(b"x", ttr=1)
        c.reserve_job(jid)
        time.sleep(1.3)
        assert c.stats_job(jid)["state"] == "ready"
        c.reserve_job(jid)
        time.sleep(1.3)
        job = c.stats_job(jid)
        assert (job["state"], job["timeouts"]) == ("buried", 2)


def test_a_dead_letter_tube_gets_the_job_ready_with_its_id_and_counts(fastbean_server):
    with fastbean_server.client() as c, fastbean_server.client() as dlq:
        c.use("t")
        assert c.retry_limit(2, "dead") == (2, "dead")
        jid = c.put(b"payload", pri=7)
        attempt(c, jid)
        attempt(c, jid)
        job = c.stats_job(jid)
        assert (job["tube"], job["state"], job["releases"], job["pri"]) == ("dead", "ready", 2, 0)
        assert c.stats_tube("t")["current-jobs-ready"] == 0
        dlq.watch("dead")
        dlq.cmd(b"ignore default", b"WATCHING 1")
        assert dlq.job(b"reserve-with-timeout 0") == (jid, b"payload")
        assert c.yaml(b"fastbean-stats")["jobs-dead-lettered"] == 1


def test_a_keyed_job_leaves_its_key_behind_when_dead_lettered(fastbean_server):
    with fastbean_server.client() as c:
        c.use("t")
        c.retry_limit(1, "dead")
        jid, _ = c.put_unique(b"x", "k", cooldown=3600)
        attempt(c, jid)
        assert c.stats_job(jid)["tube"] == "dead"
        again, state = c.put_unique(b"x", "k")
        assert state is None and again != jid


@pytest.mark.parametrize("fastbean_server", [("--retry-limit", "2", "--dead-letter-tube", "dlq")],
                         indirect=True)
def test_the_default_limit_and_a_tube_of_its_own(fastbean_server):
    with fastbean_server.client() as c:
        c.use("a")
        assert c.retry_limit() == (2, "dlq")
        a = c.put(b"a")
        attempt(c, a)
        attempt(c, a)
        assert c.stats_job(a)["tube"] == "dlq"
        c.use("b")
        assert c.retry_limit(0) == (0, None)            # no limit here
        b = c.put(b"b")
        for _ in range(5):
            attempt(c, b)
        assert c.stats_job(b)["state"] == "ready"
        assert c.retry_limit(default=True) == (2, "dlq")
        attempt(c, b)
        assert c.stats_job(b)["tube"] == "dlq"


@pytest.mark.parametrize("line", [
    b"retry-limit x", b"retry-limit -1", b"retry-limit 5 -bad", b"retry-limit 4294967296",
    b"retry-limit  5", b"retry-limit 5 ", b"retry-limitx", b"retry-limit 5 a b",
    b"retry-limit defaults", b"retry-limit 5 " + b"t" * 201])
def test_bad_lines_are_bad_format_and_change_nothing(fastbean_server, line):
    with fastbean_server.client() as c:
        assert c.cmd(line) == b"BAD_FORMAT"
        assert c.retry_limit() == (0, None)


def test_strict_answers_unknown_command():
    s = Server("fastbean", "--strict").start()
    try:
        with s.client() as c:
            assert c.cmd(b"retry-limit 3") == b"UNKNOWN_COMMAND"
            assert c.cmd(b"retry-limit") == b"UNKNOWN_COMMAND"
    finally:
        s.stop()


@pytest.mark.parametrize("args, message", [
    (["--retry-limit", "x"], "invalid --retry-limit: x"),
    (["--retry-limit", "4294967296"], "--retry-limit: at most 4294967295"),
    (["--dead-letter-tube", "dlq"], "--dead-letter-tube needs --retry-limit"),
    (["--retry-limit", "2", "--dead-letter-tube", "-x"], "--dead-letter-tube: not a tube name"),
    (["--retry-limit", "2", "--strict"], "--retry-limit is a protocol extension"),
])
def test_bad_flags_are_one_line(args, message):
    p = subprocess.run([sys.executable, "-m", "fastbean", *args], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode != 0
    assert message in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_limits_and_counts_survive_kill_9_with_f0(tmp_path):
    s = fastbean(tmp_path, "-f", "0")
    with s.client() as c:
        c.use("t")
        c.retry_limit(3, "dead")
        c.use("u")
        c.retry_limit(5)
        c.use("t")
        jid = c.put(b"x")
        attempt(c, jid)
        attempt(c, jid)                 # releases without a delay are logged under a limit
    os.kill(s.pid, signal.SIGKILL)
    s.wait()
    s = fastbean(tmp_path, "-f", "0")
    try:
        with s.client() as c:
            c.use("t")
            assert c.retry_limit() == (3, "dead")
            c.use("u")
            assert c.retry_limit() == (5, None)
            assert c.stats_job(jid)["releases"] == 2
            attempt(c, jid)
            assert c.stats_job(jid)["tube"] == "dead"
    finally:
        s.stop()
    s = fastbean(tmp_path)                     # and the move itself, after a restart
    try:
        with s.client() as c:
            job = c.stats_job(jid)
            assert (job["tube"], job["state"], job["releases"]) == ("dead", "ready", 3)
    finally:
        s.stop()


def test_beanstalkd_reads_a_binlog_with_limits_and_moves(tmp_path):
    s = fastbean(tmp_path)
    with s.client() as c:
        c.use("t")
        c.retry_limit(1, "dead")
        moved = c.put(b"moved")
        attempt(c, moved)
        c.use("b")
        c.retry_limit(1)
        buried = c.put(b"buried")
        attempt(c, buried)
        c.retry_limit(default=True)
    s.stop()
    b = Server("beanstalkd", "-b", str(tmp_path / "binlog")).start()
    try:
        with b.client() as c:
            job = c.stats_job(moved)
            assert (job["tube"], job["state"]) == ("dead", "ready")
            assert c.peek(moved) == b"moved"
            assert c.stats_job(buried)["state"] == "buried"
            assert sorted(c.list_tubes()) == ["b", "dead", "default"]
    finally:
        b.kill()


def test_beanstalkd_reads_a_binlog_that_used_every_extension(tmp_path):
    # each extension that writes records, in one binlog, then beanstalkd 1.12
    # started on it: the jobs fastbean had, where fastbean had them
    s = fastbean(tmp_path, "-f", "0")
    with s.client() as c:
        c.use("a")
        c.watch("a")
        plain = [c.put(b"p%d" % k, pri=0) for k in range(6)]
        keyed, _ = c.put_unique(b"keyed", "k", cooldown=600, pri=50)
        c.put_unique(b"again", "k", pri=10)                         # ratchet
        cooled, _ = c.put_unique(b"cooled", "c", cooldown=600)
        assert c.delete_batch([plain[0], cooled]) == (2, 0)
        assert c.delete_each([plain[1], 999]) == [999]
        c.retry_limit(1, "dead")
        attempt(c, plain[2])                                         # moved
        c.use("b")
        c.retry_limit(1)
        buried = c.put(b"buried")
        attempt(c, buried)                                           # buried
        c.use("gone")
        [c.put(b"g") for _ in range(5)]
        c.cmd(b"flush-tube gone", b"FLUSHED 5")
        assert [j for j, _ in c.reserve_batch(2)] == [plain[3], plain[4]]
        c.use("a")
        assert [row[0] for row in c.list_tube("ready")[0]] == [plain[5], keyed]
    os.kill(s.pid, signal.SIGKILL)
    s.wait()
    b = Server("beanstalkd", "-b", str(tmp_path / "binlog")).start()
    try:
        with b.client() as c:
            want = {keyed: ("a", 10), plain[3]: ("a", 0), plain[4]: ("a", 0), plain[5]: ("a", 0),
                    plain[2]: ("dead", 0), buried: ("b", 0)}
            for jid, (tube, pri) in want.items():
                job = c.stats_job(jid)
                assert (job["tube"], job["pri"]) == (tube, pri), jid
            for jid in (plain[0], plain[1], cooled):
                assert c.cmd(b"stats-job %d" % jid) == b"NOT_FOUND"
            st = c.stats()
            assert (st["current-jobs-ready"], st["current-jobs-buried"]) == (5, 1)
            assert "gone" not in c.list_tubes()
    finally:
        b.kill()
