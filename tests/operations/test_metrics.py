"""The HTTP endpoint (--metrics): what a real Prometheus scrapes, what promtool
accepts, the numbers behind it, /healthz and /readyz, and clients that send
bad, huge or slow requests."""
import http.client
import os
import shutil
import signal
import socket
import struct
import subprocess
import time

import pytest

from tests.support.prometheus import Prometheus
from tests.support.servers import Server, client, fastbean_cmd, free_port, wait_listening

pytestmark = pytest.mark.timeout(180)

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def start(*args):
    mport = free_port()
    s = Server("fastbean", "--metrics", "127.0.0.1:%d" % mport, *args).start()
    s.mport = mport
    wait_listening(mport, s.proc, lambda: s.log)
    return s


def get(port, path, method="GET"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def samples(text):
    """Exposition text -> {'name{labels}': value} and {name: type}."""
    values, types = {}, {}
    for line in text.decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            values[key] = float(value)
    return values, types


def scrape(s):
    status, headers, body = get(s.mport, "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return body


def raw(port, data, timeout=5.0):
    """Send raw bytes, return everything the server answers until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        out = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
        return out


def rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024


def probe(port, rounds=50):
    """A beanstalk client's put/delete round trips; a stalled queue fails it
    (the client gives up after 5 s)."""
    with client(port) as c:
        for _ in range(rounds):
            jid = c.put(b"probe")
            c.cmd(b"delete %d" % jid, b"DELETED")


# -- Prometheus -----------------------------------------------------------------------

def test_a_real_prometheus_scrapes_the_stats_and_a_histogram(tmp_path):
    s = start()
    try:
        with s.client() as c:
            c.use("emails")
            for i in range(7):
                c.put(b"job %d" % i)
        with Prometheus(tmp_path, s.mport) as prom:
            prom.until("current_jobs_ready", lambda r: r[0]["value"][1] == "7")
            prom.until('tube_current_jobs_ready{tube="emails"}', lambda r: r[0]["value"][1] == "7")
            buckets = prom.until('fastbean_reply_latency_seconds_bucket{family="put"}',
                                 lambda r: len(r) == 21)
            assert {b["metric"]["le"] for b in buckets} >= {"+Inf", "0.001"}
            assert [b["value"][1] for b in buckets if b["metric"]["le"] == "+Inf"] == ["7"]
            prom.until('fastbean_reply_latency_seconds_count{family="put"}',
                       lambda r: r[0]["value"][1] == "7")
            prom.until('histogram_quantile(0.5, fastbean_reply_latency_seconds_bucket{family="put"})',
                       lambda r: 0 < float(r[0]["value"][1]) < 10)
    finally:
        s.stop()


def test_promtool_accepts_the_exposition(tmp_path):
    # Everything in it: a binlog with fsyncs, paused tubes, more tubes than
    # --metrics-tubes (so the summed series too), every histogram family.
    d = tmp_path / "binlog"
    d.mkdir()
    s = start("-b", str(d), "-f", "0", "--metrics-tubes", "2", "--max-memory", "1M")
    try:
        with s.client() as c:
            for name in ("a", "b-1", "c_2", "d.3", "e(4)", "f$5"):
                c.use(name)
                jid = c.put(b"x")
            c.watch("f$5")
            assert c.job(b"reserve") is not None
            c.cmd(b"release %d 0 0" % jid, b"RELEASED")
            c.cmd(b"pause-tube a 100", b"PAUSED")
            c.cmd(b"peek 1")
            c.cmd(b"list-tubes-watched")
            c.cmd(b"watch x")
            c.cmd(b"bogus")
        body = scrape(s)
        p = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True)
        assert p.returncode == 0, p.stdout + p.stderr
        values, types = samples(body)
        for name in ("fastbean_binlog_fsync_seconds", "fastbean_binlog_group_commit_records"):
            assert types[name] == "histogram" and values[name + "_count"] >= 1
        assert types["fastbean_reply_latency_seconds"] == "histogram"
        for family in ("put", "reserve", "job", "peek", "tube", "stats", "other"):
            assert values['fastbean_reply_latency_seconds_count{family="%s"}' % family] >= 1
        assert types["fastbean_puts_refused_memory_total"] == "counter"
        assert types["cmd_put"] == "gauge" and types["tube_current_jobs_ready"] == "gauge"
        assert values['tube_pause{tube="a"}'] == 100
    finally:
        s.stop()


# -- the numbers ----------------------------------------------------------------------

def test_every_stats_key_is_published_as_the_beanstalkd_exporter_names_it():
    s = start()
    try:
        with s.client() as c:
            c.put(b"a")
            c.put(b"b", delay=100)
            c.cmd(b"use other")
            c.put(b"c")
            stats = c.stats()
            values, types = samples(scrape(s))
            tube = c.yaml(b"stats-tube other")
        skipped = {"pid", "version", "id", "hostname", "os", "platform"}
        for key, value in stats.items():
            if key in skipped:
                assert key.replace("-", "_") not in types
                continue
            name = key.replace("-", "_")
            assert types[name] == "gauge", key
            if key == "draining":
                assert values[name] == 0
            elif key.startswith(("current-", "cmd-", "total-jobs", "max-job", "binlog-")):
                # cmd-stats counts the stats command above, not the scrape
                assert values[name] == float(value), key
        for key, value in tube.items():
            if key != "name":
                assert values['tube_%s{tube="other"}' % key.replace("-", "_")] == value, key
        assert values['fastbean_build_info{version="%s",python="%s",loop="uvloop"}' % (
            stats["version"].strip('"'), __import__("platform").python_version())] == 1
    finally:
        s.stop()


def test_extension_counters_are_published_and_stats_is_unchanged():
    s = start()
    try:
        with s.client() as c:
            keys = set(c.stats())
            c.cmd(b"use f")
            for _ in range(3):
                c.put(b"x")
            c.cmd(b"flush-tube f", b"FLUSHED 3")
            c.cmd(b"flush-buried f", b"FLUSHED 0")
            c.cmd(b"flush-buried f", b"FLUSHED 0")
            c.cmd(b"list-tube ready 0 5", b"LISTED 0 0")
            c.use("default")
            c.put(b"r")
            c.cmd(b"reserve-batch 5", b"RESERVED_BATCH 1")
            assert c.line().startswith(b"RESERVED ") and c.body(1) == b"r"
            c.cmd(b"delete-batch 4 5", b"DELETED_BATCH 1 1")
            assert set(c.stats()) == keys
            values, types = samples(scrape(s))
        assert values["fastbean_cmd_flush_tube_total"] == 1
        assert values["fastbean_cmd_flush_buried_total"] == 2
        assert values["fastbean_jobs_flushed_total"] == 3
        assert types["fastbean_jobs_flushed_total"] == "counter"
        assert values["fastbean_cmd_list_tube_total"] == 1
        assert values["fastbean_cmd_reserve_batch_total"] == 1
        assert values["fastbean_jobs_batch_reserved_total"] == 1
        assert values["fastbean_cmd_delete_batch_total"] == 1
        assert values["fastbean_jobs_batch_deleted_total"] == 1
        assert "cmd_flush_tube" not in types
    finally:
        s.stop()


def test_per_tube_series_are_capped_and_the_rest_summed():
    s = start("--metrics-tubes", "3")
    try:
        with s.client() as c:
            # tube tK holds K jobs; the three fullest get their own series
            for k in range(1, 11):
                c.use("t%d" % k)
                for _ in range(k):
                    c.put(b"j")
        values, _ = samples(scrape(s))
        own = {k.split('"')[1] for k in values if k.startswith("tube_current_jobs_ready{")}
        assert own == {"t8", "t9", "t10", "*other*"}
        # default and t1..t7 summed: 28 jobs in 8 tubes
        assert values['tube_current_jobs_ready{tube="*other*"}'] == sum(range(1, 8))
        assert values['tube_total_jobs{tube="*other*"}'] == sum(range(1, 8))
        assert 'tube_pause{tube="*other*"}' not in values
        assert values["fastbean_tubes_folded"] == 8
    finally:
        s.stop()


def test_reply_latency_counts_each_family_and_not_a_reserve_s_wait():
    s = start()
    try:
        before, _ = samples(scrape(s))      # start() asked stats once: it is ready
        with s.client() as c, s.client() as w:
            ids = [c.put(b"x") for _ in range(5)]
            c.send(b"".join(b"delete %d\r\n" % j for j in ids[:4]))   # one read, one write
            assert [c.line() for _ in range(4)] == [b"DELETED"] * 4
            assert w.job(b"reserve-with-timeout 5")[0] == ids[4]
            w.send(b"reserve\r\n")               # blocks until the put below
            time.sleep(0.3)
            jid = c.put(b"y")
            assert w.line() == b"RESERVED %d 1" % jid
            assert c.yaml(b"stats-tube default")["name"] == "default"
        values, _ = samples(scrape(s))
        def count(fam):
            key = 'fastbean_reply_latency_seconds_count{family="%s"}' % fam
            return values[key] - before.get(key, 0)
        assert count("put") == 6 and count("delete") == 4 and count("stats") == 1
        assert count("reserve") == 1          # the blocked reserve's wait is not latency
    finally:
        s.stop()


# -- health and readiness -------------------------------------------------------------

def test_healthz_and_readyz_follow_drain_and_shutdown():
    s = start()
    try:
        assert get(s.mport, "/healthz")[::2] == (200, b"ok\n")
        assert get(s.mport, "/readyz")[::2] == (200, b"ready\n")
        status, _, body = get(s.mport, "/readyz", "HEAD")
        assert status == 200 and body == b""
        os.kill(s.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while get(s.mport, "/readyz")[0] != 503:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert get(s.mport, "/readyz")[2] == b"drained: no job reserved\n"
        assert get(s.mport, "/healthz")[0] == 200
        assert samples(scrape(s))[0]["fastbean_ready"] == 0
    finally:
        assert s.stop() == 0


def test_a_drain_says_when_it_is_complete_and_sigusr2_ends_it():
    s = start()
    try:
        with client(s.port) as c:
            c.put(b"held")
            job = c.reserve_job(1)[0]
            os.kill(s.pid, signal.SIGUSR1)
            wait_for(lambda: get(s.mport, "/readyz")[2] == b"draining: 1 job reserved\n")
            assert c.cmd(b"put 0 0 60 1\r\nx", b"DRAINING") == b"DRAINING"
            assert b"drained: false" in ext_stats(c)
            c.delete(job)
            wait_for(lambda: get(s.mport, "/readyz")[2] == b"drained: no job reserved\n")
            wait_for(lambda: "drain complete: no job is reserved" in s.log)
            assert b"drained: true" in ext_stats(c)
            assert c.stats()["draining"] is True        # stats' own key, as beanstalkd's
            os.kill(s.pid, signal.SIGUSR2)
            wait_for(lambda: get(s.mport, "/readyz")[2] == b"ready\n")
            assert "drain mode ended" in s.log
            assert c.put(b"again") > 0 and c.stats()["draining"] is False
            assert b"drained: false" in ext_stats(c)
    finally:
        assert s.stop() == 0


def test_sigusr2_ends_a_strict_server_as_it_ends_beanstalkd():
    for kind in ("fastbean", "beanstalkd"):
        s = Server(kind, *(["--strict"] if kind == "fastbean" else [])).start()
        os.kill(s.pid, signal.SIGUSR2)
        assert s.proc.wait(10) == -signal.SIGUSR2, kind


def ext_stats(c):
    text = c.cmd(b"fastbean-stats")
    return c.body(int(text.split()[1]))


def wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.02)


GATED_FSYNC = r"""
/* LD_PRELOAD shim: fsync (not fdatasync) waits while the file named by
 * FASTBEAN_TEST_FSYNC_GATE exists: the binlog's repair after a failure. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>
int fsync(int fd)
{
    const char *gate = getenv("FASTBEAN_TEST_FSYNC_GATE");
    while (gate && access(gate, F_OK) == 0)
        usleep(1000);
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real(fd);
}
"""


def test_readyz_is_503_while_the_binlog_fails(tmp_path, failing_fsync, monkeypatch):
    # A failed fsync stops the server serving from memory until it has rebuilt
    # its queue from the disk: /readyz says so meanwhile (the rebuild's own
    # fsync is held back here), and the counters keep the failure.
    gate = tmp_path / "gate"
    gate.write_text("")
    src, shim = tmp_path / "gate.c", tmp_path / "gate.so"
    src.write_text(GATED_FSYNC)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(shim), str(src), "-ldl"], check=True)
    monkeypatch.setenv("LD_PRELOAD", os.environ["LD_PRELOAD"] + " " + str(shim))
    monkeypatch.setenv("FASTBEAN_TEST_FSYNC_GATE", str(gate))
    monkeypatch.setenv("FASTBEAN_TEST_EIO_ONCE", "1")
    d = tmp_path / "binlog"
    d.mkdir()
    s = start("-b", str(d), "-f", "0")
    try:
        assert get(s.mport, "/readyz")[::2] == (200, b"ready\n")
        failing_fsync.write_text("")
        with s.client() as c:
            c.send(b"put 0 0 60 1\r\nx\r\n")
            assert c.sock.recv(100) == b""            # not acknowledged
        assert get(s.mport, "/readyz")[::2] == (503, b"rebuilding from the binlog after a disk failure\n")
        values, _ = samples(scrape(s))
        assert values["fastbean_binlog_failing"] == 1 and values["fastbean_binlog_errors_total"] == 1
        assert values["fastbean_binlog_failstops_total"] == 1
        gate.unlink()
        deadline = time.monotonic() + 30
        while get(s.mport, "/readyz")[0] != 200:
            assert time.monotonic() < deadline, s.log
            time.sleep(0.05)
        with s.client() as c:
            c.put(b"y")
        values, _ = samples(scrape(s))
        assert values["fastbean_binlog_failing"] == 0 and values["fastbean_binlog_failstops_total"] == 1
    finally:
        s.stop()


def write_binlog(directory, jobs, file_bytes=10 << 20):
    """beanstalkd version-7 binlog files holding `jobs` ready jobs in tube default."""
    now = time.time_ns()
    name = b"default"
    rec = struct.Struct("<i7sQI4xqqi4xqqIIIIIB3s")
    size = rec.size + 3
    per_file = file_bytes // size
    jid, seq = 1, 1
    while jid <= jobs:
        n = min(per_file, jobs - jid + 1)
        buf = bytearray(4 + n * size)
        struct.pack_into("<i", buf, 0, 7)
        off = 4
        for i in range(jid, jid + n):
            rec.pack_into(buf, off, 7, name, i, 0, 0, 10**9, 3, now, 0, 0, 0, 0, 0, 0, 1, b"fb\x01")
            buf[off + rec.size:off + size] = b"x\r\n"
            off += size
        with open(os.path.join(directory, "binlog.%d" % seq), "wb") as f:
            f.write(buf)
        jid += n
        seq += 1


def test_readyz_503_during_a_long_replay_and_ready_notified_after_listeners_accept(tmp_path):
    # A million jobs to replay. /readyz answers 503 meanwhile (the endpoint
    # is up first), systemd hears READY=1 only once the jobs are in and the
    # beanstalk port is served: the first command after it sees every job.
    jobs = 1_000_000
    d = tmp_path / "binlog"
    d.mkdir()
    write_binlog(str(d), jobs)
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify")
    notify.bind(path)
    notify.settimeout(0.005)
    mport = free_port()
    env = dict(os.environ, NOTIFY_SOCKET=path)
    server = Server("fastbean", "-b", str(d), "--metrics", str(mport), env=env).spawn()
    try:
        seen, ready_msg, statuses = set(), None, []
        deadline = time.monotonic() + 120
        while ready_msg is None:
            assert time.monotonic() < deadline and server.running, server.log
            try:
                msg = notify.recv(4096).decode()
                statuses.append(msg)
                if "READY=1" in msg:
                    ready_msg = msg
                continue
            except socket.timeout:
                pass
            try:
                status, _, body = get(mport, "/readyz")
            except OSError:
                continue
            seen.add((status, body))
            if status == 200:
                # the server sent READY=1 before it could answer this: it is queued already
                notify.setblocking(False)
                while ready_msg is None:
                    msg = notify.recv(4096).decode()
                    statuses.append(msg)
                    ready_msg = msg if "READY=1" in msg else None
        # READY=1 was sent once it was ready: replayed, listeners served
        assert get(mport, "/readyz")[::2] == (200, b"ready\n")
        assert (503, b"replaying the binlog\n") in seen
        with server.client() as c:
            assert c.stats()["current-jobs-ready"] == jobs
        assert "STATUS=%d jobs, 0 connections" % jobs in ready_msg
        assert any("EXTEND_TIMEOUT_USEC=" in m for m in statuses)
    finally:
        assert server.stop(60) == 0
        notify.close()


# -- bad and slow HTTP clients --------------------------------------------------------

@pytest.mark.parametrize("request_bytes,status", [
    (b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", b"404"),
    (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", b"405"),
    (b"DELETE /readyz HTTP/1.1\r\nConnection: close\r\n\r\n", b"405"),
    (b"GARBAGE\r\n\r\n", b"400"),
    (b"get /metrics HTTP/1.1\r\n\r\n", b"400"),
    (b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", b"400"),
    (b"GET /metrics HTTP/1.1\r\nContent-Length: -1\r\n\r\n", b"400"),
    (b"GET /metrics HTTP/2.0\r\n\r\n", b"505"),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(200) + b"\r\n\r\n", b"400"),
    (b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n", b"431"),
])
def test_bad_requests_get_their_status_and_a_close(request_bytes, status):
    s = start()
    try:
        reply = raw(s.mport, request_bytes)
        assert reply.startswith(b"HTTP/1.1 " + status), reply[:200]
        if status == b"405":
            assert b"\r\nAllow: GET, HEAD\r\n" in reply
        with s.client() as c:
            assert c.cmd(b"list-tube-used") == b"USING default"
        assert get(s.mport, "/healthz")[0] == 200
    finally:
        s.stop()


def test_keep_alive_and_pipelined_requests():
    s = start()
    try:
        two = raw(s.mport, b"GET /healthz HTTP/1.1\r\n\r\nGET /readyz?x=1 HTTP/1.1\r\n"
                           b"Connection: close\r\n\r\n")
        assert two.count(b"HTTP/1.1 200 OK") == 2 and two.endswith(b"ready\n")
        one = raw(s.mport, b"HEAD /metrics HTTP/1.0\r\n\r\n")       # 1.0: closes after one
        assert one.startswith(b"HTTP/1.1 200 OK") and one.endswith(b"\r\n\r\n")
    finally:
        s.stop()


def test_huge_and_endless_requests_do_not_grow_memory_or_stall_the_queue():
    s = start()
    try:
        before = rss(s.pid)
        socks = []
        for _ in range(20):
            # 4 MB with no end of line: answered 431 after 8 KiB and closed
            sock = socket.create_connection(("127.0.0.1", s.mport))
            socks.append(sock)
            try:
                sock.sendall(b"GET /" + b"a" * (4 << 20))
            except OSError:
                pass
            assert sock.recv(100).startswith(b"HTTP/1.1 431")
        assert rss(s.pid) - before < 16 << 20
        # a client that pipelines scrapes and never reads: reading stops
        hog = socket.create_connection(("127.0.0.1", s.mport))
        hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        hog.setblocking(False)
        sent = 0
        end = time.monotonic() + 2
        while time.monotonic() < end:
            try:
                sent += hog.send(b"GET /metrics HTTP/1.1\r\n\r\n" * 100)
            except BlockingIOError:
                time.sleep(0.01)
        probe(s.port)
        assert rss(s.pid) - before < 32 << 20
        assert get(s.mport, "/healthz")[0] == 200
        hog.close()
        for sock in socks:
            sock.close()
    finally:
        s.stop()


def test_slow_clients_are_timed_out_and_capped_without_stalling_the_queue():
    s = start()
    try:
        # More slowloris connections than the endpoint takes, each sending a
        # byte of its request now and then.
        slow = [socket.create_connection(("127.0.0.1", s.mport)) for _ in range(80)]
        t0 = time.monotonic()
        for sock in slow:
            sock.sendall(b"G")
        while time.monotonic() - t0 < 4:
            for sock in slow:
                try:
                    sock.sendall(b"E")
                except OSError:
                    pass
            probe(s.port, 20)
        # the 64 it took are answered 408 once their 10 s are up, the rest 503 at once
        answers = []
        for sock in slow:
            sock.settimeout(15)
            answers.append(sock.recv(100)[:12])
            sock.close()
        assert answers.count(b"HTTP/1.1 503") == 80 - 64
        assert answers.count(b"HTTP/1.1 408") == 64, answers
        assert get(s.mport, "/healthz")[0] == 200
    finally:
        s.stop()


def test_metrics_address_forms():
    port = free_port()
    s = Server("fastbean", "--metrics", ":%d" % port).start()      # every interface
    try:
        wait_listening(port, s.proc)
        assert get(port, "/healthz")[0] == 200
        # a port in use (this server's beanstalk port): --metrics cannot bind it
        p = subprocess.run(fastbean_cmd() + ["-l", "127.0.0.1", "-p", str(free_port()),
                                             "--metrics", str(s.port)],
                           capture_output=True, timeout=30)
        assert p.returncode == 111 and b"--metrics: bind" in p.stderr, p.stderr
    finally:
        s.stop()
    for bad in ("nope", "127.0.0.1:", "1.2.3.4:99999", "[::1]9000", "0"):
        p = subprocess.run(fastbean_cmd() + ["--metrics", bad],
                           capture_output=True, timeout=30)
        assert p.returncode == 5 and b"invalid --metrics address" in p.stderr, (bad, p.stderr)


def test_label_values_and_help_are_escaped():
    # tube names cannot hold these characters, but a version string could
    from fastbean.server.metrics import _help, _label
    assert _label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    assert _help('a"b\\c\nd') == 'a"b\\\\c\\nd'
