"""Schedules: recurring jobs the server puts itself (docs/protocol-extensions.md,
"Schedules"), on real servers: replies, bad lines, --strict, firing by real
time and by the test clock, daylight saving in two zones, restarts and
misfires, kill -9 at random points of many firings (audited against the
binlog: each occurrence one job, none twice, none lost), file reclamation,
and beanstalkd 1.12 reading a binlog that holds schedules."""
import os
import random
import signal
import struct
import time
from datetime import datetime, timezone

import pytest

from fastbean.client import ServerError
from tests.support.servers import Server
from tests.support.servers import fastbean_with_binlog as fastbean

pytestmark = pytest.mark.timeout(300)

NS = 10**9
EXT_ID = 2**64 - 1
EXT_FIRE = 10
JOBREC = struct.Struct("<QI4xqqi4xqqIIIIIB3x")


def ns(iso):
    return int(datetime.fromisoformat(iso).timestamp()) * NS


def tube_jobs(c, tube):
    st = c.stats_tube(tube)
    return st["current-jobs-ready"] + st["current-jobs-reserved"] + st["current-jobs-delayed"] \
        + st["current-jobs-buried"]


def by_name(c):
    return {s["name"]: s for s in c.list_schedules()}


def fired_in_binlog(path):
    """(schedule, occurrence ns, job id) of every EXT_FIRE record whose job's
    full record follows it, in every binlog file of the directory, in order."""
    out = []
    seqs = sorted(int(f.split(".")[1]) for f in os.listdir(path) if f.startswith("binlog."))
    for seq in seqs:
        with open(os.path.join(path, "binlog.%d" % seq), "rb") as f:
            data = f.read()
        pos, pending = 4, None
        while pos + 4 + JOBREC.size <= len(data):
            namelen = struct.unpack_from("<i", data, pos)[0]
            if namelen < 0 or namelen > 200 or pos + 4 + namelen + JOBREC.size > len(data):
                break
            name = data[pos + 4:pos + 4 + namelen]
            rec = JOBREC.unpack_from(data, pos + 4 + namelen)
            jid, kind, delay, _ttr, body_size, _created, deadline = rec[:7]
            state = rec[-1]
            if jid == 0:
                break
            size = 4 + namelen + JOBREC.size
            if jid == EXT_ID:
                if kind == EXT_FIRE:
                    pending = (name.decode(), deadline, delay)
            else:
                if namelen and state != 0:
                    if pos + size + body_size > len(data):
                        break
                    size += body_size
                    if pending is not None and pending[2] == jid:
                        out.append(pending)
                pending = None
            pos += size
    return out


# -- replies ----------------------------------------------------------------------------

def test_define_replace_list_fire_pause_resume_remove(fastbean_server):
    with fastbean_server.client() as c:
        c.use("reports")
        assert c.cmd(b"schedule nightly 5 120 skip 5 0 3 * * * Europe/Amsterdam\r\nhello") == b"SCHEDULED"
        # the same definition again changes nothing
        assert c.cmd(b"schedule nightly 5 120 skip 5 0 3 * * * Europe/Amsterdam\r\nhello") == b"REPLACED"
        assert c.cmd(b"schedule nightly 5 120 fire 5 0 4 * * * Europe/Amsterdam\r\nhello") == b"REPLACED"
        assert c.schedule("often", b"x" * 1000, "every 3600", pri=1, ttr=9) is True
        s = by_name(c)
        assert s["nightly"]["spec"] == "0 4 * * * Europe/Amsterdam"
        assert s["nightly"]["zone"] == "Europe/Amsterdam" and s["nightly"]["tube"] == "reports"
        assert (s["nightly"]["pri"], s["nightly"]["ttr"], s["nightly"]["misfire"]) == (5, 120, "fire")
        assert s["nightly"]["fires"] == 0 and s["nightly"]["last"] == 0 and not s["nightly"]["paused"]
        nxt = datetime.fromtimestamp(s["nightly"]["next"], timezone.utc)
        assert nxt.minute == 0 and nxt.hour in (2, 3) and nxt.timestamp() > time.time()
        assert s["often"]["zone"] == "-" and s["often"]["body-bytes"] == 1000
        assert s["often"]["next"] - time.time() == pytest.approx(3600, abs=3)
        jid = c.fire_schedule("often")
        assert c.stats_job(jid)["tube"] == "reports" and c.stats_job(jid)["pri"] == 1
        assert c.stats_job(jid)["ttr"] == 9 and c.peek(jid) == b"x" * 1000
        assert by_name(c)["often"]["runs"] == 1 and by_name(c)["often"]["fires"] == 0
        c.pause_schedule("often")
        c.pause_schedule("often")
        s = by_name(c)["often"]
        assert s["paused"] and s["next"] == 0
        c.resume_schedule("often")
        assert not by_name(c)["often"]["paused"]
        c.unschedule("often")
        assert list(by_name(c)) == ["nightly"]
        for line in (b"unschedule often", b"fire-schedule often", b"pause-schedule often",
                     b"resume-schedule often"):
            assert c.cmd(line) == b"NOT_FOUND"
        ext = c.yaml(b"fastbean-stats")
        assert ext["schedules"] == 1 and ext["schedule-runs"] == 1
        c.unschedule("nightly")
        assert c.list_schedules() == []
        assert c.cmd(b"list-schedules") == b"OK 7" and c.body(7) == b"--- []\n"


BAD_LINES = [
    b"schedule",
    b"schedulex",
    b"schedule n 0 60 fire",
    b"schedule n 0 60 fire x every 1",
    b"schedule  n 0 60 fire 1 every 1",
]
BAD_WITH_BODY = [
    b"schedule -n 0 60 fire 1 every 1",
    b"schedule n! 0 60 fire 1 every 1",
    b"schedule " + b"n" * 190 + b"/ 0 0 fire 1 1",
    b"schedule n 0 60 later 1 every 1",
    b"schedule n x 60 fire 1 every 1",
    b"schedule n 0 4294967296 fire 1 every 1",
    b"schedule n 0 60 fire 1",
    b"schedule n 0 60 fire 1 ",
    b"schedule n 0 60 fire 1 every 0",
    b"schedule n 0 60 fire 1 every 1 UTC",
    b"schedule n 0 60 fire 1 61 * * * *",
    b"schedule n 0 60 fire 1 * * 31 2 *",
    b"schedule n 0 60 fire 1 * * * * * Mars/Olympus",
    b"schedule n 0 60 fire 1 * * * * *  Europe/Amsterdam",
]


def test_bad_lines_are_bad_format_and_nothing_is_logged(tmp_path):
    s = fastbean(tmp_path)
    try:
        with s.client() as c:
            before = c.stats()["binlog-records-written"]
            for line in BAD_LINES:
                # no size could be read: no body follows, as for a bad put
                assert c.cmd(line) == b"BAD_FORMAT", line
            for line in BAD_WITH_BODY:
                # the body is swallowed: the next command is answered as one
                assert c.cmd(line + b"\r\nx") == b"BAD_FORMAT", line
            assert c.cmd(b"schedule n 0 60 fire 70000 every 1\r\n" + b"x" * 70000) == b"JOB_TOO_BIG"
            for verb in (b"unschedule", b"fire-schedule", b"pause-schedule", b"resume-schedule"):
                for rest in (b"", b" ", b" -x", b" a b", b"x a"):
                    assert c.cmd(verb + rest) == b"BAD_FORMAT", verb + rest
            assert c.cmd(b"list-schedules x") == b"BAD_FORMAT"
            assert c.list_schedules() == []
            assert c.stats()["binlog-records-written"] == before
            assert c.cmd(b"stats-tube default").startswith(b"OK")
    finally:
        s.stop()


def test_strict_answers_as_beanstalkd_and_reads_the_body_as_a_command():
    for kind, args in (("beanstalkd", ()), ("fastbean", ("--strict",))):
        s = Server(kind, *args).start()
        try:
            with s.client() as c:
                assert c.cmd(b"schedule n 0 60 fire 10 every 1\r\nlist-tubes") == b"UNKNOWN_COMMAND"
                assert c.cmd(b"") == b"OK 14"      # the body line, list-tubes, answered
                c.body(14)
                for line in (b"unschedule n", b"list-schedules", b"fire-schedule n", b"pause-schedule n",
                             b"resume-schedule n", b"schedule", b"list-schedules x"):
                    assert c.cmd(line) == b"UNKNOWN_COMMAND", (kind, line)
        finally:
            s.stop()


# -- firing -----------------------------------------------------------------------------

@pytest.mark.timeout(150)
def test_every_second_fires_once_a_second_in_real_time(fastbean_server):
    # the minute, on the wall clock: within one tick
    with fastbean_server.client() as c:
        c.use("t")
        c.schedule("tick", b"tick", "every 1")
        t0 = time.time()
        time.sleep(60.3)
        n = tube_jobs(c, "t")
        elapsed = time.time() - t0
        assert abs(n - int(elapsed)) <= 1, (n, elapsed)
        s = by_name(c)["tick"]
        assert s["fires"] in (n, n + 1) and s["next"] == s["last"] + 1    # one may fire in between


def test_the_test_clock_fires_each_occurrence_of_a_minute():
    s = Server("fastbean", "--testing").start()
    try:
        with s.client() as c:
            c.use("t")
            c.watch("t")
            c.schedule("tick", b"tick", "every 1")
            c.schedule("minutely", b"m", "* * * * *")
            clock = s.clock
            t0 = time.time()
            clock.advance(60)
            n = tube_jobs(c, "t")
            # 60 of every 1 (one more if a real second passed), 1 of the minutely
            assert 61 <= n <= 61 + int(time.time() - t0) + 1
            assert by_name(c)["minutely"]["fires"] == 1
            ids = [c.job(b"reserve-with-timeout 0")[0] for _ in range(n)]
            assert ids == sorted(ids)
            last = by_name(c)["tick"]["last"]
            assert last - time.time() == pytest.approx(60, abs=2)
    finally:
        s.stop()


def _occurrence_utc(c, name):
    return datetime.fromtimestamp(by_name(c)[name]["last"], timezone.utc).strftime("%Y-%m-%dT%H:%M")


def test_daylight_saving_in_two_zones_by_the_test_clock():
    # The clock only moves forward: to the next transitions after today.
    s = Server("fastbean", "--testing").start()
    try:
        with s.client() as c:
            c.use("dst")
            # New York springs forward 2027-03-14 02:00 -> 03:00: 02:00..02:45 fire once, at 03:00
            c.schedule("ny-gap", b"x", "*/15 2 14 3 * America/New_York")
            # Sydney falls back 2027-04-04 03:00 -> 02:00: 02:30 comes twice, fires once
            c.schedule("syd-fold", b"x", "30 2 4 4 * Australia/Sydney")
            # Amsterdam falls back 2027-10-31: 02:00, 02:20, 02:40 once each
            c.schedule("ams-fold", b"x", "*/20 2 31 10 * Europe/Amsterdam")
            # and springs forward 2027-03-28: 02:30 fires at 03:00 CEST
            c.schedule("ams-gap", b"x", "30 2 28 3 * Europe/Amsterdam")
            target = ns("2027-11-01T12:00:00+00:00")
            step = 7 * 86400
            while time.time() * NS + s.clock.offset * NS < target:
                s.clock.advance(step)
            got = by_name(c)
            assert got["ny-gap"]["fires"] == 1 and _occurrence_utc(c, "ny-gap") == "2027-03-14T07:00"
            assert got["syd-fold"]["fires"] == 1 and _occurrence_utc(c, "syd-fold") == "2027-04-03T15:30"
            assert got["ams-fold"]["fires"] == 3 and _occurrence_utc(c, "ams-fold") == "2027-10-31T00:40"
            assert got["ams-gap"]["fires"] == 1 and _occurrence_utc(c, "ams-gap") == "2027-03-28T01:00"
            assert tube_jobs(c, "dst") == 6
    finally:
        s.stop()


# -- restarts, misfires, the binlog -------------------------------------------------------

def test_definitions_survive_a_restart_and_misfires_follow_the_policy(tmp_path):
    s = fastbean(tmp_path, "-f", "0")
    try:
        with s.client() as c:
            c.use("f")
            c.schedule("fire", b"F", "every 1")
            c.use("s")
            c.schedule("skip", b"S", "every 1", misfire="skip")
            c.use("p")
            c.schedule("paused", b"P", "every 1")
            c.pause_schedule("paused")
            c.schedule("gone", b"G", "every 3600")
            c.unschedule("gone")
            time.sleep(1.5)
            before = by_name(c)
        s.stop()
        time.sleep(3.5)             # occurrences fall while nothing serves
        t_start = time.time()
        s.start()
        t_ready = time.time()
        with s.client() as c:
            after = by_name(c)
            assert set(after) == {"fire", "skip", "paused"}
            assert after["paused"]["paused"] and after["paused"]["fires"] == 0
            assert tube_jobs(c, "f") == after["fire"]["fires"]
            assert c.yaml(b"fastbean-stats")["schedule-misfires"] >= 4
            time.sleep(1.5)
        s.stop()
        fired = fired_in_binlog(str(tmp_path / "binlog"))
        for name in ("fire", "skip"):
            occ = [t / NS for n, t, _ in fired if n == name]
            assert len(set(occ)) == len(occ)
            last_before = before[name]["last"]
            first_after = min(t for t in occ if t > last_before + 0.5)
            if name == "fire":
                # the missed ones fired once, as the latest of them, when service came back
                # (the first timer run, which finds them, may come just after start() returns)
                assert last_before + 3 <= first_after <= t_ready + 1
            else:
                # none of them fired
                assert first_after > t_start
    finally:
        s.stop()


def test_kill_9_at_random_points_of_100_firings_makes_each_occurrence_once(tmp_path):
    """The audit: every job in the tube is an occurrence fired (its EXT_FIRE
    is in the binlog right before it), no occurrence twice, and a gap in the
    occurrences only where the server was down (fired once after it)."""
    rng = random.Random(int(os.environ.get("FASTBEAN_SEED", "38")))
    d = tmp_path / "binlog"
    s = fastbean(tmp_path, "-f", "0", binlog=d)
    kills = 0
    try:
        with s.client() as c:
            c.use("t")
            c.schedule("tick", b"tick", "every 1")
        while True:
            time.sleep(rng.uniform(0.3, 3.0))
            os.kill(s.pid, signal.SIGKILL)
            s.wait()
            kills += 1
            s.start()
            with s.client() as c:
                if by_name(c)["tick"]["fires"] >= 100:
                    break
        time.sleep(1.0)
        with s.client() as c:
            c.pause_schedule("tick")    # no occurrence after this audit's reads, before the stop
            fires = by_name(c)["tick"]["fires"]
            jobs = tube_jobs(c, "t")
            top = fires + 10 * kills + 100
            ids = [i for i in range(1, top) if _exists(c, i)]
        s.stop()
        fired = fired_in_binlog(str(d))
        occ = [t for _, t, _ in fired]
        assert len(set(occ)) == len(occ), "an occurrence fired twice"
        assert occ == sorted(occ)
        assert sorted(ids) == sorted(j for _, _, j in fired), "a job that is no occurrence, or one lost"
        assert jobs == fires == len(fired)
        gaps = sum(1 for a, b in zip(occ, occ[1:]) if b - a > NS)
        assert all((b - a) % NS == 0 for a, b in zip(occ, occ[1:]))
        assert gaps <= kills, "occurrences missed while serving"
        print("kill -9 audit: %d kills, %d occurrences fired, %d jobs, %d gaps (outages), "
              "0 doubles, 0 lost" % (kills, len(fired), jobs, gaps))
    finally:
        s.stop()


def _records_end(path):
    # where the records of a binlog file end (its zero-filled tail begins)
    with open(path, "rb") as f:
        data = f.read()
    pos = 4
    while pos + 4 + JOBREC.size <= len(data):
        namelen = struct.unpack_from("<i", data, pos)[0]
        rec = JOBREC.unpack_from(data, pos + 4 + namelen)
        if rec[0] == 0:
            break
        size = 4 + namelen + JOBREC.size
        if rec[0] != EXT_ID and namelen and rec[-1] != 0:
            size += rec[4]
        pos += size
    return pos


def test_a_torn_occurrence_is_fired_again_never_twice(tmp_path):
    # A crash after an occurrence's EXT_FIRE record was written but before
    # its job's record was whole: replay does not count the occurrence, and
    # the restarted server fires it (once), as the misfire policy says.
    d = tmp_path / "binlog"
    s = fastbean(tmp_path, "-f", "0", binlog=d)
    try:
        with s.client() as c:
            c.use("t")
            c.schedule("tick", b"tick", "every 4")
            while by_name(c)["tick"]["fires"] < 1:
                time.sleep(0.05)
            before = by_name(c)["tick"]
        os.kill(s.pid, signal.SIGKILL)
        s.wait()
        path = d / ("binlog.%d" % max(int(f.split(".")[1]) for f in os.listdir(d) if f.startswith("binlog.")))
        end = _records_end(path)
        torn_id = 10**6
        occ = (before["last"] + 4) * NS          # the next one, "written" as the crash came
        name = b"tick"
        fire = struct.pack("<i", len(name)) + name + JOBREC.pack(
            EXT_ID, EXT_FIRE, torn_id, NS, 2, time.time_ns(), occ, 1, before["fires"] + 1, 0, 0, 0, 0)
        fire = fire[:-3] + b"fb\x01"
        job = struct.pack("<i", 1) + b"t" + JOBREC.pack(
            torn_id, 0, 0, 60 * NS, 6, time.time_ns(), 0, 0, 0, 0, 0, 0, 1)[:40]     # torn in the middle
        with open(path, "r+b") as f:
            f.seek(end)
            f.write(fire + job)
        s.start()
        with s.client() as c:
            assert not _exists(c, torn_id)
            assert by_name(c)["tick"]["fires"] == before["fires"]
            deadline = time.time() + 10
            while by_name(c)["tick"]["last"] * NS < occ and time.time() < deadline:
                time.sleep(0.05)
            after = by_name(c)["tick"]
            assert after["fires"] == before["fires"] + 1 and after["last"] * NS == occ
        s.stop()
        assert "not replayed" in s.log or "dropped" in s.log, s.log
        fired = fired_in_binlog(str(d))
        occs = [t for _, t, _ in fired]
        assert len(set(occs)) == len(occs)
        assert occ in occs                      # fired again after the restart, once
        assert torn_id not in [j for _, _, j in fired]
    finally:
        s.stop()


def test_schedules_outlive_the_files_that_held_them(tmp_path):
    s = fastbean(tmp_path, "-s", "10000")
    try:
        with s.client() as c:
            c.use("t")
            c.schedule("kept", b"k" * 700, "every 1")
            time.sleep(1.3)
            c.pause_schedule("kept")
            fires = by_name(c)["kept"]["fires"]
            while True:
                j = c.job(b"peek-ready")
                if j is None:
                    break
                c.delete(j[0])
            c.use("churn")
            for _ in range(300):
                c.delete(c.put(b"y" * 200))
            # the file that held the definition is no longer needed
            assert c.stats()["binlog-oldest-index"] > 1
        s.stop()
        s.start()
        with s.client() as c:
            k = by_name(c)["kept"]
            assert k["paused"] and k["fires"] == fires and k["body-bytes"] == 700
            c.resume_schedule("kept")
            time.sleep(1.3)
            assert by_name(c)["kept"]["fires"] > fires
            c.use("t")
            assert c.peek_state("ready")[1] == b"k" * 700
    finally:
        s.stop()


def test_beanstalkd_reads_a_binlog_with_schedules_and_sees_only_the_jobs(tmp_path):
    s = fastbean(tmp_path)
    with s.client() as c:
        c.use("t")
        c.schedule("big", b"B" * 999, "every 1")
        c.schedule("other", b"o", "0 0 1 1 * Asia/Tokyo")
        c.schedule("gone", b"g", "every 5")
        c.unschedule("gone")
        manual = c.fire_schedule("other")
        time.sleep(2.3)
        c.pause_schedule("big")
        n = tube_jobs(c, "t")
    s.stop()
    b = Server("beanstalkd", "-b", str(tmp_path / "binlog")).start()
    try:
        with b.client() as c:
            assert c.stats()["current-jobs-ready"] == n >= 3
            assert c.list_tubes() == ["default", "t"]
            assert c.peek(manual) == b"o"
            c.use("t")
            bodies = [c.peek(i) for i in range(1, manual + 10) if _exists(c, i)]
            assert sorted(bodies) == sorted([b"o"] + [b"B" * 999] * (n - 1))
            assert c.cmd(b"list-schedules") == b"UNKNOWN_COMMAND"
            assert c.put(b"next") > manual
        assert "error" not in b.log.lower() and "warn" not in b.log.lower(), b.log
    finally:
        b.kill()


def _exists(c, jid):
    try:
        c.stats_job(jid)
        return True
    except ServerError:
        return False


# -- surroundings -------------------------------------------------------------------------

def test_fastbean_ctl_schedule(fastbean_server):
    from tests.operations.test_ctl import ctl, ok
    port = fastbean_server.port
    assert "added" in ok(ctl(port, "schedule", "add", "nightly", "0 3 * * * Europe/Amsterdam", "build",
                             "-t", "reports", "--pri", "5", "--misfire", "skip"))
    assert "replaced" in ok(ctl(port, "schedule", "add", "nightly", "0 4 * * *", "-", stdin=b"from stdin"))
    listing = ok(ctl(port, "schedule", "list"))
    assert "nightly" in listing and "0 4 * * *" in listing and "enabled" in listing
    assert '"id": ' in ok(ctl(port, "--json", "schedule", "run", "nightly"))
    ok(ctl(port, "schedule", "pause", "nightly"))
    assert "paused" in ok(ctl(port, "schedule", "list"))
    ok(ctl(port, "schedule", "resume", "nightly"))
    ok(ctl(port, "schedule", "remove", "nightly"))
    assert ctl(port, "schedule", "remove", "nightly").returncode == 1
    assert ctl(port, "schedule", "add", "bad", "every x", "b").returncode == 4
    with fastbean_server.client() as c:
        # the replacement left -t out: its tube is default
        assert c.peek_state("ready")[1] == b"from stdin" and c.list_schedules() == []


def test_metrics_and_log_events_of_firings():
    from tests.operations.test_metrics import get, samples, start
    s = start("--testing", "--log-format", "json")
    try:
        with s.client() as c:
            # every 100 s of the test clock, which also runs with real time:
            # a real second passing during the test fires nothing more
            c.schedule("tick", b"t", "every 100")
            c.schedule("manual", b"m", "every 3600")
            c.fire_schedule("manual")
            s.clock.advance(500)
            status, _, body = get(s.mport, "/metrics")
            values, types = samples(body)
            assert values['fastbean_schedule_fires_total{schedule="tick"}'] == 5
            assert values['fastbean_schedule_runs_total{schedule="manual"}'] == 1
            assert types["fastbean_schedule_lag_seconds"] == "histogram"
            assert values["fastbean_schedule_lag_seconds_count"] == 5
            assert values['fastbean_schedule_paused{schedule="tick"}'] == 0
        events = [line for line in s.log.splitlines() if '"event": "schedule-fired"' in line]
        assert len(events) == 6 and '"schedule": "tick"' in events[-1]
    finally:
        s.stop()
