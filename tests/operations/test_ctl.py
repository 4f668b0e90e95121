"""fastbean-ctl, the admin tool, run as a process against real fastbean and beanstalkd servers
(TCP and UNIX sockets), against broken peers, and in a real terminal (tmux) for top and clear."""
import base64
import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support import ROOT as SUPPORT_ROOT
from tests.support.servers import Server, client, free_port

pytestmark = pytest.mark.timeout(120)

ROOT = Path(SUPPORT_ROOT)
CTL = [sys.executable, "-m", "fastbean.ctl"]


@pytest.fixture(params=["fastbean", "beanstalkd"])
def server(request):
    s = Server(request.param).start()
    yield s
    s.stop()


def ctl(port, *args, stdin=b""):
    return subprocess.run(CTL + ["-p", str(port), *map(str, args)], input=stdin,
                          capture_output=True, timeout=60, cwd=ROOT)


def ok(result):
    assert result.returncode == 0, result
    assert result.stderr == b"", result
    return result.stdout.decode()


def one_line_error(result, status, *words):
    """A failure: the status asked for, nothing on stdout, one line on stderr."""
    assert result.returncode == status, result
    assert result.stdout == b"", result
    err = result.stderr.decode()
    assert err.count("\n") == 1 and err.startswith("fastbean-ctl: "), err
    for word in words:
        assert word in err, (word, err)
    return err


def column_ends(line):
    return [m.end() for m in re.finditer(r"\S+", line)]


def table_rows(text):
    """An aligned table -> {first cell: {header: cell}}; asserts the columns line up."""
    lines = text.rstrip("\n").split("\n")
    header = lines[0].split()
    ends = column_ends(lines[0])
    rows = {}
    for line in lines[1:]:
        cells = line.split()
        assert len(cells) == len(header), line
        # the first column is flush left, the others flush right under their headers
        assert column_ends(line)[1:] == ends[1:], (lines[0], line)
        rows[cells[0]] = dict(zip(header, cells))
    return rows


def tube_stats(port, tube):
    with client(port) as c:
        return c.yaml(b"stats-tube " + tube.encode())


def reserve_from(c, tube):
    c.watch(tube)
    c.cmd(b"ignore default")
    reply = c.cmd(b"reserve-with-timeout 0")
    assert reply.startswith(b"RESERVED "), reply
    jid = int(reply.split()[1])
    c.body(int(reply.split()[2]))
    return jid


def fill(port, tube, ready=0, delayed=0, buried=0):
    """Jobs in a tube; returns their ids by state."""
    ids = {"ready": [], "delayed": [], "buried": []}
    with client(port) as c:
        c.use(tube)
        for n in range(ready):
            ids["ready"].append(c.put(b"ready %d" % n, pri=2000))
        for n in range(delayed):
            ids["delayed"].append(c.put(b"delayed %d" % n, pri=2000, delay=1000))
        for n in range(buried):
            jid = c.put(b"buried %d" % n, pri=1 << 31)
            c.watch(tube)
            reply = c.job(b"reserve-job %d" % jid)
            assert reply[0] == jid
            c.cmd(b"bury %d 0" % jid, b"BURIED")
            ids["buried"].append(jid)
    return ids


# -- stats and tubes

def test_stats_table_and_json(server):
    with server.client() as c:
        c.put(b"a")
        c.put(b"b")
        expected = c.stats()
    out = ok(ctl(server.port, "stats"))
    lines = out.rstrip("\n").split("\n")
    starts = {len(line) - len(line.split(None, 1)[1]) for line in lines if len(line.split()) > 1}
    assert len(starts) == 1, "values do not line up: %r" % lines
    table = dict(line.split(None, 1) for line in lines)
    assert list(table) == list(expected)
    assert table["current-jobs-ready"] == "2" and table["cmd-put"] == "2"
    assert table["version"] == str(expected["version"]).strip('"')
    data = json.loads(ok(ctl(server.port, "stats", "--json")))
    assert list(data) == list(expected)
    assert data["current-jobs-ready"] == 2 and data["cmd-put"] == 2
    assert data["draining"] is False and isinstance(data["version"], str)
    assert isinstance(data["id"], str) and isinstance(data["rusage-utime"], float)
    # the options may also come first
    assert json.loads(ok(subprocess.run(CTL + ["--json", "-p", str(server.port), "stats"],
                                        capture_output=True, cwd=ROOT)))["cmd-put"] == 2


def test_tubes_table_and_json(server):
    fill(server.port, "alpha", ready=2, delayed=1, buried=1)
    with server.client() as c, server.client() as holder:
        c.use("alpha")
        c.put(b"urgent", pri=0)
        c.put(b"not urgent", pri=5000)
        c.use("beta")
        c.put(b"x")
        c.cmd(b"pause-tube beta 100", b"PAUSED")
        reserve_from(holder, "alpha")        # the urgent one, reserved by another client
        rows = table_rows(ok(ctl(server.port, "tubes")))
        assert set(rows) == {"default", "alpha", "beta"}
        alpha = rows["alpha"]
        assert (alpha["READY"], alpha["URGENT"], alpha["RESERVED"], alpha["DELAYED"],
                alpha["BURIED"], alpha["TOTAL"]) == ("3", "0", "1", "1", "1", "6")
        assert alpha["WATCHING"] == "1" and alpha["PAUSE-LEFT"] == "-"
        assert rows["beta"]["USING"] == "1" and 0 < int(rows["beta"]["PAUSE-LEFT"]) <= 100

        data = json.loads(ok(ctl(server.port, "tubes", "--json", "alpha", "beta")))
        assert [t["name"] for t in data] == ["alpha", "beta"]
        assert data[0]["current-jobs-buried"] == 1 and data[0]["total-jobs"] == 6
        assert data[1]["pause"] == 100

    result = ctl(server.port, "tubes", "alpha", "nope")
    assert result.returncode == 1
    assert set(table_rows(result.stdout.decode())) == {"alpha"}
    assert result.stderr.decode() == "fastbean-ctl: tube 'nope' not found\n"


# -- peek, kick, pause, put, delete

def test_peek_each_state(server):
    ids = fill(server.port, "t", ready=1, delayed=1)
    with server.client() as c:
        c.use("t")
        binary = b"\x00\xff\r\nbin"
        buried = c.put(binary, pri=3)
        c.watch("t")
        c.job(b"reserve-job %d" % buried)
        c.cmd(b"bury %d 3" % buried, b"BURIED")

    out = ok(ctl(server.port, "peek", "t", "ready"))
    head, body = out.split("\n\n", 1)
    fields = dict(line.split(None, 1) for line in head.split("\n"))
    assert fields["id"] == str(ids["ready"][0]) and fields["state"] == "ready"
    assert fields["tube"] == "t" and fields["body"] == "7 bytes"
    assert body == "ready 0\n"

    data = json.loads(ok(ctl(server.port, "peek", "t", "delayed", "--json")))
    assert (data["id"], data["state"], data["delay"], data["body"]) == (
        ids["delayed"][0], "delayed", 1000, "delayed 0")
    data = json.loads(ok(ctl(server.port, "--json", "peek", "t", "buried")))
    assert (data["id"], data["state"], data["pri"], data["body"]) == (buried, "buried", 3, None)
    assert base64.b64decode(data["body_base64"]) == binary
    assert ctl(server.port, "peek", "t", "buried", "--raw").stdout == binary
    text = ok(ctl(server.port, "peek", "t", "buried"))
    assert text.endswith("\n\n\\x00\\xff\\x0d\nbin\n")      # control bytes shown escaped

    with server.client() as c:              # peeking changed nothing
        assert c.stats_job(ids["ready"][0])["state"] == "ready"
        assert c.stats_job(buried)["reserves"] == 1
        c.cmd(b"delete %d" % ids["ready"][0], b"DELETED")
    one_line_error(ctl(server.port, "peek", "t", "ready"), 1, "no ready job in tube 't'")
    one_line_error(ctl(server.port, "peek", "nope", "buried"), 1, "tube 'nope' not found")


def test_kick(server):
    fill(server.port, "t", buried=3, delayed=1)
    assert ok(ctl(server.port, "kick", "t", "2")) == "kicked 2 jobs in tube 't'\n"
    stats = tube_stats(server.port, "t")
    assert (stats["current-jobs-buried"], stats["current-jobs-ready"]) == (1, 2)
    assert json.loads(ok(ctl(server.port, "kick", "t", "5", "--json"))) == {
        "tube": "t", "kicked": 1}
    # no buried job left: kick moves delayed ones
    assert ok(ctl(server.port, "kick", "t", "5")) == "kicked 1 job in tube 't'\n"
    stats = tube_stats(server.port, "t")
    assert (stats["current-jobs-buried"], stats["current-jobs-delayed"],
            stats["current-jobs-ready"]) == (0, 0, 4)
    one_line_error(ctl(server.port, "kick", "nope", "1"), 1, "tube 'nope' not found")


def test_pause(server):
    fill(server.port, "t", ready=1)
    assert ok(ctl(server.port, "pause", "t", "100")) == "paused tube 't' for 100 seconds\n"
    stats = tube_stats(server.port, "t")
    assert stats["pause"] == 100 and 0 < stats["pause-time-left"] <= 100
    assert json.loads(ok(ctl(server.port, "pause", "t", "0", "--json"))) == {
        "tube": "t", "seconds": 0}
    assert tube_stats(server.port, "t")["pause"] == 0
    one_line_error(ctl(server.port, "pause", "nope", "5"), 1, "tube 'nope' not found")


def test_put(server):
    out = ok(ctl(server.port, "put", "-t", "jobs", "--pri", "5", "--delay", "30", "--ttr", "7",
                 "hello"))
    jid = int(re.fullmatch(r"inserted job (\d+) into tube 'jobs'\n", out).group(1))
    body = b"line 1\r\nline 2\x00\xff"
    data = json.loads(ok(ctl(server.port, "put", "--json", stdin=body)))
    assert data["tube"] == "default"
    piped = json.loads(ok(ctl(server.port, "put", "-", "--json", "--tube", "jobs",
                              stdin=b"")))["id"]
    with server.client() as c:
        job = c.stats_job(jid)
        assert (job["tube"], job["pri"], job["delay"], job["ttr"], job["state"]) == (
            "jobs", 5, 30, 7, "delayed")
        assert c.peek(jid) == b"hello"
        job = c.stats_job(data["id"])
        assert (job["tube"], job["pri"], job["ttr"], job["state"]) == (
            "default", 1024, 60, "ready")
        assert c.peek(data["id"]) == body
        assert c.peek(piped) == b""
        before = c.stats()["current-jobs-ready"]
    one_line_error(ctl(server.port, "put", stdin=b"x" * 70000), 4, "JOB_TOO_BIG")
    with server.client() as c:
        assert c.stats()["current-jobs-ready"] == before


def test_delete(server):
    ids = fill(server.port, "t", ready=2, buried=1)
    a, b = ids["ready"]
    assert ok(ctl(server.port, "delete", a)) == "deleted job %d\n" % a
    result = ctl(server.port, "delete", b, ids["buried"][0], 999999, "--json")
    assert result.returncode == 1
    assert json.loads(result.stdout) == {"deleted": [b, ids["buried"][0]],
                                         "not_found": [999999]}
    assert result.stderr.decode() == \
        "fastbean-ctl: job 999999 not found (or reserved by another client)\n"
    with server.client() as c, server.client() as holder:
        stats = c.stats()
        assert stats["current-jobs-ready"] == stats["current-jobs-buried"] == 0
        c.use("t")
        held = c.put(b"held")
        reserve_from(holder, "t")
        one_line_error(ctl(server.port, "delete", held), 1, "job %d not found" % held)
        assert c.stats_job(held)["state"] == "reserved"


def test_delete_many_ids_and_repeats(server):
    # fastbean: delete-each, 1000 ids a command; beanstalkd: one delete each
    with server.client() as c:
        c.use("t")
        c.send(b"put 0 0 60 1\r\nx\r\n" * 1200)
        ids = [int(c.line().split()[1]) for _ in range(1200)]
    result = ctl(server.port, "--json", "delete", ids[0], ids[0], 999999, *ids[1:])
    assert result.returncode == 1
    assert json.loads(result.stdout) == {"deleted": ids, "not_found": [ids[0], 999999]}
    with server.client() as c:
        assert c.stats()["current-jobs-ready"] == 0


# -- clear

def test_clear_asks_and_reports_what_is_left(server):
    fill(server.port, "t", ready=5, delayed=2, buried=3)
    fill(server.port, "keep", ready=2)
    with server.client() as holder:
        with server.client() as c:
            c.use("t")
            c.put(b"to be held", pri=0)
        held = reserve_from(holder, "t")
        before = tube_stats(server.port, "t")

        for answer in (b"n\n", b"", b"maybe\n"):
            result = ctl(server.port, "clear", "t", stdin=answer)
            assert result.returncode == 6 and result.stdout == b"", result
            err = result.stderr.decode()
            assert "1 job reserved by other clients cannot be deleted" in err
            assert "Delete 10 jobs (5 ready, 2 delayed, 3 buried) from tube 't' on " \
                   "127.0.0.1:%d? [y/N] " % server.port in err
            assert "nothing deleted" in err
            assert tube_stats(server.port, "t") == before

        result = ctl(server.port, "clear", "t", stdin=b"y\n")
        assert result.returncode == 6, result
        assert result.stdout.decode() == ("deleted 10 jobs from tube 't'\n"
                                          "left 1 job: 1 reserved by other clients\n")
        stats = tube_stats(server.port, "t")
        assert (stats["current-jobs-ready"], stats["current-jobs-delayed"],
                stats["current-jobs-buried"], stats["current-jobs-reserved"]) == (0, 0, 0, 1)
        assert tube_stats(server.port, "keep")["current-jobs-ready"] == 2
        holder.cmd(b"release %d 0 0" % held, b"RELEASED")

    fill(server.port, "t", ready=500, buried=20)
    result = ctl(server.port, "clear", "t", "--yes", "--json")
    assert result.returncode == 0 and result.stderr == b"", result
    assert json.loads(result.stdout) == {
        "tube": "t", "deleted": 521, "missed": 0,
        "left": {"ready": 0, "delayed": 0, "buried": 0, "reserved": 0}}
    with server.client() as c:
        assert c.cmd(b"stats-tube t") == b"NOT_FOUND"      # empty and unused: gone
        assert c.stats()["current-jobs-ready"] == 2
    one_line_error(ctl(server.port, "clear", "t", "--yes"), 1, "tube 't' not found")


def test_flush_uses_the_server_command_or_says_it_cannot(server):
    fill(server.port, "t", ready=5, delayed=2, buried=3)
    fill(server.port, "keep", ready=2)
    server_side = server.kind == "fastbean"
    with server.client() as holder:
        with server.client() as c:
            c.use("t")
            c.put(b"to be held", pri=0)
        held = reserve_from(holder, "t")
        before = tube_stats(server.port, "t")
        result = ctl(server.port, "flush", "t", stdin=b"n\n")
        assert result.returncode == 6 and result.stdout == b"", result
        assert "Delete 11 jobs (5 ready, 2 delayed, 3 buried, 1 reserved) from tube 't' on " \
               "127.0.0.1:%d? [y/N] " % server.port in result.stderr.decode()
        assert tube_stats(server.port, "t") == before

        result = ctl(server.port, "flush", "t", stdin=b"y\n")
        if server_side:
            assert result.returncode == 0, result
            assert result.stdout.decode() == \
                "flushed 11 jobs from tube 't' with the server's flush-tube\n"
            assert holder.cmd(b"delete %d" % held) == b"NOT_FOUND"
        else:
            assert result.returncode == 6, result
            assert "has no flush-tube" in result.stderr.decode()
            assert result.stdout.decode() == ("flushed 10 jobs from tube 't' with peek and delete\n"
                                              "left 1 job (1 reserved)\n")
            holder.cmd(b"delete %d" % held, b"DELETED")
    assert tube_stats(server.port, "keep")["current-jobs-ready"] == 2

    ids = fill(server.port, "b", ready=4, buried=3)
    result = ctl(server.port, "flush", "b", "--buried", "--yes", "--json")
    assert result.returncode == 0, result
    assert json.loads(result.stdout) == {
        "tube": "b", "flushed": 3, "server_side": server_side,
        "left": {"ready": 4, "delayed": 0, "buried": 0, "reserved": 0}}
    with server.client() as c:
        assert all(c.cmd(b"peek %d" % j) == b"NOT_FOUND" for j in ids["buried"])
    one_line_error(ctl(server.port, "flush", "nosuch", "--yes"), 1, "tube 'nosuch' not found")


def test_jobs_lists_a_state_in_order_or_says_the_server_cannot(server):
    ids = fill(server.port, "t", ready=3, delayed=2)
    if server.kind == "beanstalkd":
        one_line_error(ctl(server.port, "jobs", "t", "ready"), 4, "has no list-tube")
        return
    text = ok(ctl(server.port, "jobs", "t", "ready"))
    rows = table_rows(text.replace("TIME-LEFT", "TIME_LEFT"))
    assert [int(r["ID"]) for r in sorted(rows.values(), key=lambda r: int(r["ID"]))] == \
        ids["ready"]
    assert {r["PRI"] for r in rows.values()} == {"2000"}
    data = json.loads(ok(ctl(server.port, "jobs", "t", "delayed", "--json")))
    assert data["more"] is False and [j["id"] for j in data["jobs"]] == ids["delayed"]
    assert 990 <= data["jobs"][0]["time-left"] <= 1000 and data["jobs"][0]["bytes"] == 9
    text = ok(ctl(server.port, "jobs", "t", "ready", "-n", "2"))
    assert text.endswith("(more: --limit shows more than 2)\n") and text.count("\n") == 4
    assert ok(ctl(server.port, "jobs", "t", "buried")) == "no buried jobs in tube 't'\n"
    one_line_error(ctl(server.port, "jobs", "nosuch", "ready"), 1, "tube 'nosuch' not found")
    one_line_error(ctl(server.port, "jobs", "t", "urgent"), 2)


def test_flush_on_a_strict_fastbean_falls_back():
    with Server("fastbean", "--strict") as s:
        s.start()
        fill(s.port, "t", ready=3, buried=1)
        result = ctl(s.port, "flush", "t", "--yes")
        assert result.returncode == 0, result
        assert "has no flush-tube (beanstalkd, or fastbean --strict)" in result.stderr.decode()
        assert result.stdout.decode() == "flushed 4 jobs from tube 't' with peek and delete\n"


def test_put_with_a_key_and_retry_limit_or_why_not(server):
    # fastbean has both; beanstalkd has neither, and the tool says so in one line
    put = ctl(server.port, "put", "-t", "k", "--key", "job-1", "--cooldown", "60", "body")
    limit = ctl(server.port, "retry-limit", "k", "3", "--dead-letter", "dead")
    if server.kind == "beanstalkd":
        one_line_error(put, 4, "has no idempotency keys")
        one_line_error(limit, 4, "has no retry limits")
        return
    assert ok(put) == "inserted job 1 into tube 'k' with key job-1\n"
    again = json.loads(ok(ctl(server.port, "--json", "put", "-t", "k", "--key", "job-1", "other")))
    assert again == {"id": 1, "tube": "k", "key": "job-1", "existing": "ready"}
    assert ok(limit) == "tube 'k': a job is moved to tube 'dead' once released or timed out 3 times\n"
    assert ok(ctl(server.port, "retry-limit", "k")) == ok(limit)
    assert ok(ctl(server.port, "retry-limit", "k", "--default")) == "tube 'k': no retry limit\n"
    one_line_error(ctl(server.port, "put", "--key", "a b", "x"), 2, "not a key")


def test_move_and_priority_or_why_not(server):
    # fastbean moves a job and changes its priority; beanstalkd cannot, in one line
    with client(server.port) as c:
        c.use("src")
        job = c.put(b"x", pri=5)
    moved = ctl(server.port, "move", str(job), "dst")
    pri = ctl(server.port, "priority", str(job), "1")
    if server.kind == "beanstalkd":
        one_line_error(moved, 4, "cannot move jobs")
        one_line_error(pri, 4, "cannot change a job's priority")
        return
    assert ok(moved) == "moved job %d to tube 'dst'\n" % job
    assert ok(pri) == "job %d has priority 1\n" % job
    assert json.loads(ok(ctl(server.port, "--json", "move", str(job), "src"))) == {"id": job, "tube": "src"}
    with client(server.port) as c:
        stats = c.stats_job(job)
        assert (stats["tube"], stats["pri"]) == ("src", 1)
    one_line_error(ctl(server.port, "move", "999", "dst"), 1, "job 999 not found")
    one_line_error(ctl(server.port, "priority", "999", "3"), 1, "job 999 not found")
    one_line_error(ctl(server.port, "move", str(job), "-bad"), 2)
    one_line_error(ctl(server.port, "priority", str(job), "4294967296"), 2, "not a priority")


# -- addresses, failures and bad input

@pytest.mark.parametrize("kind", ["fastbean", "beanstalkd"])
def test_unix_socket(kind, tmp_path):
    path = str(tmp_path / "bean.sock")
    server = Server(kind, unix_socket=path).start()
    try:
        run = [*CTL, "-l", "unix:" + path]
        put = subprocess.run(run + ["put", "-t", "over-unix", "hi", "--json"],
                             capture_output=True, cwd=ROOT, timeout=60)
        assert put.returncode == 0, put
        tubes = subprocess.run(run + ["tubes", "--json"], capture_output=True, cwd=ROOT,
                               timeout=60)
        assert [t["current-jobs-ready"] for t in json.loads(tubes.stdout)
                if t["name"] == "over-unix"] == [1]
        gone = subprocess.run([*CTL, "-l", "unix:" + path + ".nope", "stats"],
                              capture_output=True, cwd=ROOT, timeout=60)
        one_line_error(gone, 3, "cannot connect to unix:%s.nope" % path)
    finally:
        server.stop()


@pytest.mark.parametrize("args", [
    ["stats"], ["tubes"], ["top", "--json", "-n", "1"], ["peek", "t", "ready"],
    ["kick", "t", "1"], ["pause", "t", "1"], ["put", "x"], ["delete", "1"],
    ["clear", "t", "--yes"]])
def test_closed_port(args):
    port = free_port()
    one_line_error(ctl(port, *args), 3, "cannot connect to 127.0.0.1:%d" % port,
                   "Connection refused")


@pytest.mark.parametrize("addr", ["a..b", "x" * 300, "unix:" + "x" * 200, "no.such.host.invalid"])
def test_unusable_address(addr):
    result = subprocess.run(CTL + ["-l", addr, "--timeout", "2", "stats"], capture_output=True,
                            cwd=ROOT, timeout=60)
    one_line_error(result, 3, "cannot connect to ")


class FakePeer:
    """A TCP peer that is not a working beanstalk server: it reads a request, then
    sends `reply` and closes, or holds the connection open if `hold`."""

    def __init__(self, reply, hold=False):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.reply, self.hold, self.held = reply, hold, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.recv(4096)
            conn.sendall(self.reply)
            if self.hold:
                self.held.append(conn)
            else:
                conn.close()

    def close(self):
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.mark.parametrize("reply,hold,words", [
    (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", False,
     ["does not speak the beanstalk protocol", "HTTP/1.1 400"]),
    (b"SSH-2.0-OpenSSH_9.2\r\n", True, ["does not speak the beanstalk protocol"]),
    (b"x" * 5000, True, ["does not speak the beanstalk protocol"]),
    (b"OK 300\r\n---\ncurrent-jobs-ready: 1\n", False, ["in the middle of a reply"]),
    (b"OK 12\r\n---\nbad: 1\nZZZZ", False, ["without its closing CRLF"]),
    (b"", False, ["closed the connection without replying"]),
    (b"", True, ["no reply from", "after waiting 0.5s"]),
])
def test_broken_peer(reply, hold, words):
    peer = FakePeer(reply, hold)
    try:
        for args in (["stats"], ["tubes"], ["peek", "t", "ready"], ["delete", "1"]):
            one_line_error(ctl(peer.port, "--timeout", "0.5", *args), 5, *words)
    finally:
        peer.close()


@pytest.mark.parametrize("args,words", [
    (["delete", "abc"], ["not a job id: 'abc'"]),
    (["delete", "0"], ["not a job id"]),
    (["delete", str(1 << 64)], ["not a job id"]),
    (["kick", "t", "-1"], ["not a count"]),
    (["kick", "a b", "1"], ["tube name", "' '"]),
    (["kick", "a\r\nput 0 0 0 0", "1"], ["tube name", "'\\r'"]),
    (["peek", "t" * 201, "ready"], ["at most 200"]),
    (["peek", "--", "-t", "ready"], ["cannot start with '-'"]),
    (["peek", "t", "reserved"], ["invalid choice"]),
    (["pause", "t", "1.5"], ["not a number of seconds"]),
    (["put", "--pri", str(1 << 32), "x"], ["not a priority"]),
    (["put", "--tube", "é", "x"], ["tube name"]),
    (["--timeout", "nan", "stats"], ["not a number of seconds"]),
    (["-p", "99999", "stats"], ["not a port number"]),
    (["frobnicate"], ["invalid choice"]),
    ([], ["required: COMMAND"]),
])
def test_bad_input_is_one_line_and_sends_nothing(server, args, words):
    with server.client() as c:
        connections = c.stats()["total-connections"]
        err = one_line_error(subprocess.run(CTL + ["-p", str(server.port), *args],
                                            capture_output=True, cwd=ROOT, timeout=60),
                             2, *words)
        assert "Traceback" not in err
        assert c.stats()["total-connections"] == connections      # never connected


def test_server_error_reply(server):
    server.signal(signal.SIGUSR1)                   # drain: put answers DRAINING
    deadline = time.monotonic() + 10
    while True:
        result = ctl(server.port, "put", "x")
        if result.returncode != 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    one_line_error(result, 4, "put: 127.0.0.1:%d answered DRAINING" % server.port)


@contextlib.contextmanager
def steady_puts(port, tube):
    """A thread putting jobs into `tube` every few milliseconds while the block runs."""
    stop = threading.Event()

    def produce():
        with client(port) as c:
            c.use(tube)
            while not stop.is_set():
                c.put(b"x")
                time.sleep(0.005)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        yield
    finally:
        stop.set()
        producer.join()


def test_top_json_samples(server):
    with steady_puts(server.port, "busy"):
        out = ok(ctl(server.port, "top", "--json", "-n", "3", "-i", "0.3"))
    samples = [json.loads(line) for line in out.splitlines()]
    assert len(samples) == 3
    assert samples[0]["rates"] is None
    assert all(t["rates"] is None for t in samples[0]["tubes"])
    for prev, cur in zip(samples, samples[1:]):
        puts = cur["server"]["cmd-put"] - prev["server"]["cmd-put"]
        seconds = cur["time"] - prev["time"]
        assert puts > 0
        assert abs(cur["rates"]["cmd-put"] - puts / seconds) <= 0.2 * puts / seconds
        busy = [t for t in cur["tubes"] if t["name"] == "busy"][0]
        assert busy["rates"]["total-jobs"] > 0 and busy["rates"]["cmd-delete"] == 0


# -- in a real terminal

class Tmux:
    """A private tmux server running one command in a 100x30 pane; stopped by its PID."""

    def __init__(self, tmp_path, argv):
        self.socket = str(tmp_path / "tmux.sock")
        # The shell in the pane records the command's exit status: tmux 3.3 sometimes
        # misses the exit of a pane's process and never reports its status.
        self.status_file = tmp_path / "status"
        conf = tmp_path / "tmux.conf"
        conf.write_text("set -g remain-on-exit on\nset -g default-terminal screen\n"
                        "set -g default-size 100x30\n")
        command = "%s; echo $? > %s" % (shlex.join(argv), shlex.quote(str(self.status_file)))
        self.pane = self.tmux("-f", str(conf), "new-session", "-d", "-P", "-F", "#{pane_id}",
                              "-c", str(ROOT), command)
        self.pid = int(self.tmux("display-message", "-p", "#{pid}"))

    def tmux(self, *args):
        return subprocess.run(["tmux", "-S", self.socket, *args], check=True,
                              capture_output=True, timeout=30).stdout.decode().strip()

    def screen(self, scrolled_off=False):
        """The pane's text; with scrolled_off, the lines above it too."""
        return self.tmux("capture-pane", "-p", "-t", self.pane,
                         *(["-S", "-"] if scrolled_off else []))

    def keys(self, *keys):
        self.tmux("send-keys", "-t", self.pane, *keys)

    def exit_status(self):
        """None while the command runs, then its exit status."""
        try:
            text = self.status_file.read_text()
        except FileNotFoundError:
            return None
        return int(text) if text.endswith("\n") else None

    def wait(self, what, predicate, timeout=30.0):
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if predicate(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError("timed out waiting for %s; the screen:\n%s" % (what, screen))
            time.sleep(0.05)

    def wait_exit(self, timeout=30.0):
        deadline = time.monotonic() + timeout
        while (status := self.exit_status()) is None:
            assert time.monotonic() < deadline, "still running; the screen:\n" + self.screen()
            time.sleep(0.05)
        return status

    def stop(self):
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.02)
        os.kill(self.pid, signal.SIGKILL)


@pytest.fixture
def terminal(tmp_path):
    started = []

    def start(*args, env=()):
        started.append(Tmux(tmp_path, ["env", *env, *CTL, *map(str, args)]))
        return started[-1]

    yield start
    for tmux in started:
        tmux.stop()


def top_rows(screen):
    """The tube rows of top's screen: {tube: [cells]}, in screen order."""
    lines = screen.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("TUBE"))
    rows = {}
    for line in lines[start + 1:]:
        cells = line.split()
        if len(cells) == 9:
            rows[cells[0]] = cells[1:]
    return rows


def test_top_in_a_terminal(server, terminal):
    fill(server.port, "alpha", ready=1)
    tmux = terminal("-p", server.port, "top", "-i", "0.2")

    def ready_is(tube, n):
        return lambda screen: "TUBE" in screen and top_rows(screen).get(tube, [None])[0] == n

    screen = tmux.wait("alpha with one ready job", ready_is("alpha", "1"))
    assert "fastbean-ctl top  127.0.0.1:%d" % server.port in screen
    assert "q quit" in screen

    fill(server.port, "alpha", ready=4, buried=2)
    fill(server.port, "beta", ready=3)
    screen = tmux.wait("the new jobs", ready_is("beta", "3"))
    screen = tmux.wait("alpha's new jobs", ready_is("alpha", "5"))
    assert top_rows(screen)["alpha"][3] == "2"       # BURIED

    with steady_puts(server.port, "gamma"):
        # PUT/S of gamma, and the server's put rate in the header, above zero
        tmux.wait("a put rate", lambda screen: "TUBE" in screen and float(
            top_rows(screen).get("gamma", ["0"] * 8)[5].replace("-", "0")) > 0
            and not re.search(r"per s  put (0\.0|-) ", screen))

    tmux.keys("s")                                  # sort by READY, most first
    screen = tmux.wait("the READY sort", lambda screen: "s sort (READY)" in screen)
    order = [t for t in top_rows(screen) if t in ("alpha", "beta", "default")]
    assert order == ["alpha", "beta", "default"]

    server.stop()
    tmux.wait("the lost connection", lambda screen: "retrying" in screen)
    assert tmux.exit_status() is None
    tmux.keys("q")
    assert tmux.wait_exit() == 0


def test_clear_in_a_terminal(server, terminal):
    fill(server.port, "t", ready=300, delayed=5)
    tmux = terminal("-p", server.port, "clear", "t")
    tmux.wait("the prompt", lambda screen: "Delete 305 jobs (300 ready, 5 delayed, 0 buried) "
                                           "from tube 't'" in screen and "[y/N]" in screen)
    assert tmux.exit_status() is None
    tmux.keys("y", "Enter")
    screen = tmux.wait("the summary", lambda s: "deleted 305 jobs from tube 't'" in s)
    assert re.search(r"\[#{30}\] 100%  305/305 deleted", screen), screen
    assert tmux.wait_exit() == 0
    with server.client() as c:
        assert c.cmd(b"stats-tube t") == b"NOT_FOUND"


def test_top_on_a_terminal_curses_cannot_drive(server, terminal):
    tmux = terminal("-p", server.port, "top", env=["TERM=no-such-terminal"])
    assert tmux.wait_exit() == 2
    # tmux's note on the dead pane pushes the top line off the screen
    lines = [line for line in tmux.screen(scrolled_off=True).split("\n")
             if line.strip() and not line.startswith("Pane is dead")]
    assert len(lines) == 1 and lines[0].startswith(
        "fastbean-ctl: cannot draw on this terminal:"), lines
