"""Logs: JSON lines that parse one by one, each operator event as it happens,
and the levels -V selects."""
import json
import os
import re
import signal
import socket
import time
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.servers import Server, free_port

pytestmark = pytest.mark.timeout(120)


class EventLog:
    """Reads a server's stderr as JSON lines, as they come."""

    def __init__(self, server):
        self.server = server
        self.seen = 0           # lines read so far
        self.events = []

    def _read(self):
        lines = self.server.log.split("\n")
        complete = lines[:-1]   # the last one may be half written
        for line in complete[self.seen:]:
            obj = json.loads(line)          # every line is one JSON object
            assert {"time", "level", "event", "message"} <= obj.keys(), obj
            assert obj["level"] in ("debug", "info", "warning", "error")
            self.events.append(obj)
        self.seen = len(complete)

    def wait(self, name, timeout=10.0):
        """The next event called `name`, once it has been logged."""
        deadline = time.monotonic() + timeout
        while True:
            self._read()
            for i, obj in enumerate(self.events):
                if obj["event"] == name:
                    del self.events[:i + 1]
                    return obj
            assert time.monotonic() < deadline, "no %s event; log:\n%s" % (
                name, self.server.log)
            time.sleep(0.02)

    def names(self):
        self._read()
        return [obj["event"] for obj in self.events]


def test_json_events_each_as_it_happens(tmp_path, failing_fsync):
    d = tmp_path / "binlog"
    d.mkdir()
    first = Server("fastbean", "-b", str(d)).start()
    with first.client() as c:
        for _ in range(3):
            c.put(b"replayed")
    first.stop()
    # a torn tail for replay to report
    newest = max(d.glob("binlog.*"), key=lambda p: int(p.suffix[1:]))
    with open(newest, "ab") as f:
        f.write(b"\x07" * 50)

    mport = free_port()
    s = Server("fastbean", "--log-format", "json", "-b", str(d), "-f", "0",
               "--max-memory", "8K", "--max-connections", "3",
               "--metrics", "127.0.0.1:%d" % mport).start()
    log = EventLog(s)
    try:
        start = log.wait("start")
        assert start["pid"] == s.pid and start["version"] and start["level"] == "info"
        assert log.wait("bind")["address"] == "127.0.0.1:%d" % s.port
        assert log.wait("metrics")["address"] == "127.0.0.1:%d" % mport
        dropped = log.wait("replay-dropped")
        assert dropped["bytes"] == 50 and dropped["level"] == "warning"
        replay = log.wait("replay")
        assert replay["jobs"] == 3 and replay["files"] >= 1 and replay["dropped_bytes"] == 50
        assert isinstance(replay["seconds"], float)
        assert log.wait("memory-cap")["max_memory"] == 8192
        assert log.wait("ready")["jobs"] == 3

        # memory cap reached, then cleared
        assert "memory-cap-reached" not in log.names()
        with s.client() as c:
            ids = []
            while True:
                reply = c.cmd(b"put 0 0 60 1000\r\n" + b"m" * 1000)
                if reply == b"OUT_OF_MEMORY":
                    break
                ids.append(int(reply.split()[1]))
            reached = log.wait("memory-cap-reached")
            assert reached["level"] == "warning" and reached["max_memory"] == 8192
            assert "memory-cap-cleared" not in log.names()
            for jid in ids:
                c.cmd(b"delete %d" % jid, b"DELETED")
            assert log.wait("memory-cap-cleared")["refused"] >= 1

        # connection cap reached, then cleared
        clients = [s.client() for _ in range(3)]
        for c in clients:
            c.cmd(b"list-tube-used")
        extra = socket.create_connection(("127.0.0.1", s.port))
        assert extra.recv(10) == b""                         # refused
        extra.close()
        assert log.wait("connection-cap-reached")["limit"] == 3
        assert "connection-cap-cleared" not in log.names()
        clients.pop().close()
        assert log.wait("connection-cap-cleared")["limit"] == 3
        for c in clients:
            c.close()

        # a binlog error: fail-stop, the queue rebuilt from the disk
        failing_fsync.write_text("")
        with s.client() as c:
            c.send(b"put 0 0 60 1\r\nx\r\n")
            assert c.sock.recv(100) == b""
        error = log.wait("binlog-error")
        assert error["level"] == "error" and error["op"] == "fsync" and "error" in error
        stop = log.wait("fail-stop")
        assert stop["level"] == "error" and stop["op"] == "fsync"
        cut = log.wait("binlog-cut-back")
        assert cut["level"] == "warning" and cut["removed"] >= 0 and cut["bytes"] > 0
        rebuilt = log.wait("rebuilt")
        assert rebuilt["level"] == "warning" and rebuilt["jobs"] == 3   # not the put that failed
        failing_fsync.unlink()
        with s.client() as c:
            c.put(b"y")

        # drain, then shutdown
        os.kill(s.pid, signal.SIGUSR1)
        assert log.wait("drain")["message"] == "entering drain mode"
        assert s.stop() == 0
        shutdown = log.wait("shutdown")
        # 3 replayed and the last
        assert shutdown["signal"] == "SIGTERM" and shutdown["jobs"] == 4
        assert log.wait("exit")["status"] == 0
    finally:
        s.stop()


def test_text_logs_and_verbosity():
    s = Server("fastbean").start()
    with s.client() as c:
        c.cmd(b"list-tube-used")
    s.stop()
    text = s.log
    # the default level shows what an operator needs, nothing per connection
    assert "fastbean: fastbean " in text and "starting, pid %d" % s.pid in text
    assert "fastbean: listening on 127.0.0.1:%d\n" % s.port in text
    assert "fastbean: serving 0 jobs" in text and "shutting down on SIGTERM" in text
    assert "accept" not in text
    s = Server("fastbean", "-V").start()
    with s.client() as c:
        c.cmd(b"list-tube-used")
    s.stop()
    assert "fastbean: accept" in s.log and "fastbean: close" in s.log


def test_vv_logs_every_read_and_reply():
    s = Server("fastbean", "-VV").start()
    body = bytes(range(256)) * 20           # big enough for the big-put read path
    with s.client() as c:
        jid = c.put(body, pri=0)
        c.put(body, pri=0)                  # read after a big put: copied out in small chunks
        assert c.peek(jid) == body
        c.cmd(b"list-tube-used", b"USING default")
    s.stop()
    text = s.log
    assert "fastbean: < 127.0.0.1:" in text and "'put 0 0 60 5120\\r\\n" in text
    assert "'list-tube-used\\r\\n'" in text
    assert "'INSERTED %d\\r\\n'" % jid in text and "'USING default\\r\\n'" in text
    assert re.search(r"' \(\d{4} bytes\)\n", text)    # a read longer than what is shown


def test_json_logs_name_every_event_at_every_verbosity():
    # -VV with JSON: no line is a bare "message"; each read and reply is an
    # event with its peer, its size and its bytes
    s = Server("fastbean", "-VV", "--log-format", "json", "-c").start()
    with s.client() as c:
        jid = c.put(b"hello", pri=0)
        peer = "127.0.0.1:%d" % c.sock.getsockname()[1]
    s.stop()
    events = [json.loads(line) for line in s.log.splitlines()]
    assert [e for e in events if e["event"] == "message"] == []
    names = [e["event"] for e in events]
    assert names[:3] == ["flag", "start", "bind"] and names[-2:] == ["shutdown", "exit"]
    by = {}
    for e in events:
        by.setdefault(e["event"], []).append(e)
    assert by["flag"][0]["message"] == "-c flag was removed. binlog is always compacted."
    # (the first connection was start()'s, which asks the server its pid)
    assert by["accept"][-1]["peer"] == peer and by["close"][-1]["peer"] == peer
    (read,) = [e for e in by["read"] if e["peer"] == peer]
    assert read["bytes"] == 21 and read["data"] == "put 0 0 60 5\r\nhello\r\n"
    (reply,) = [e for e in by["reply"] if e["peer"] == peer]
    assert reply["data"] == "INSERTED %d\r\n" % jid and reply["level"] == "debug"
    assert by["shutdown"][0]["message"] == "shutting down on SIGTERM: 0 connections, 1 job"


def test_counts_are_in_good_english(tmp_path):
    s = Server("fastbean", "-b", tmp_path).start()
    with s.client() as c:
        c.put(b"one")
    s.stop()
    s = Server("fastbean", "-b", tmp_path).start()
    s.stop()
    text = s.log
    assert "fastbean: replayed 1 job from 1 binlog file in " in text, text
    assert "fastbean: serving 1 job\n" in text
    assert "fastbean: shutting down on SIGTERM: 0 connections, 1 job\n" in text


def test_the_package_logs_only_named_events():
    # every line goes through fastbean.logs.event (a name and fields), never
    # through the logger itself, whose JSON would say "event": "message"
    root = Path(ROOT) / "fastbean"
    bare = re.compile(r"\blog(ger)?\.(debug|info|warning|error|exception|critical|log)\(")
    found = [(str(p.relative_to(root)), n) for p in root.rglob("*.py") if p.name != "logs.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if bare.search(line)]
    assert found == []


def test_bad_log_format_is_a_usage_error():
    import subprocess

    from tests.support.servers import fastbean_cmd
    p = subprocess.run(fastbean_cmd() + ["--log-format", "xml"], capture_output=True, timeout=30)
    assert p.returncode == 5 and b"--log-format" in p.stderr
