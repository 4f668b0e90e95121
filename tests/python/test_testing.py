"""fastbean.testing.server: a real server process started from Python, its
address in every form, stopped, killed and started again by its PID, the
client it hands out; clear errors when it cannot start."""
import datetime
import os
import signal
import socket
import subprocess
import time

import greenstalk
import pytest

import fastbean.testing as fbt
from fastbean.client import NotFound, UnexpectedReply
from fastbean.errors import FastbeanError, ServerStartError

pytestmark = pytest.mark.timeout(60)


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_tcp_server_round_trip():
    with fbt.server() as srv:
        assert srv.running and srv.host == "127.0.0.1"
        assert srv.address == ("127.0.0.1", srv.port)
        assert srv.url == "beanstalk://127.0.0.1:%d" % srv.port
        with greenstalk.Client(srv.address) as c:
            jid = c.put("hello")
            job = c.reserve(timeout=0)
            assert (job.id, job.body) == (jid, "hello")
            c.delete(job)
            assert c.stats()["pid"] == srv.pid
        pid = srv.pid
    assert not srv.running and gone(pid)
    assert srv.stop() == 0                                  # stopping again is harmless


def test_unix_socket_server():
    with fbt.server(unix_socket=True) as srv:
        path = srv.unix_socket
        assert srv.address == path and srv.host is None and srv.url is None
        with greenstalk.Client(path) as c:
            c.put("over a unix socket")
            assert c.reserve(timeout=0).body == "over a unix socket"
    assert not os.path.exists(path)


def test_binlog_dir_is_created_and_kept(tmp_path):
    where = tmp_path / "new" / "binlog"
    with fbt.server(binlog_dir=where) as srv:
        with greenstalk.Client(srv.address) as c:
            c.put("durable")
    assert any(p.name.startswith("binlog.") for p in where.iterdir())
    with fbt.server(binlog_dir=where) as srv:
        with greenstalk.Client(srv.address) as c:
            assert c.reserve(timeout=0).body == "durable"


def test_extra_flags_reach_the_server():
    with fbt.server("-z", 10) as srv:
        with greenstalk.Client(srv.address) as c:
            with pytest.raises(greenstalk.JobTooBigError):
                c.put("x" * 11)


def test_clock_and_reset():
    with fbt.server(testing=True) as srv:
        with greenstalk.Client(srv.address) as c:
            c.put("in a day", delay=86400)
            with pytest.raises(greenstalk.TimedOutError):
                c.reserve(timeout=0)
            assert srv.clock.advance(datetime.timedelta(hours=23, minutes=59)) == 86340.0
            assert srv.clock.advance(59.5) == 86399.5
            assert srv.clock.offset == 86399.5
            srv.clock.advance(0.5)
            assert c.reserve(timeout=0).body == "in a day"
            with pytest.raises(ValueError):
                srv.clock.advance(-1)
        srv.reset()
        assert srv.clock.offset == 0.0
        with greenstalk.Client(srv.address) as c:
            assert c.stats()["total-jobs"] == 0


def test_test_commands_need_testing_true():
    with fbt.server() as srv:
        with pytest.raises(FastbeanError, match="testing=True"):
            srv.reset()
        with pytest.raises(FastbeanError, match="testing=True"):
            srv.clock.advance(1)


def test_bad_flag_is_a_clear_error():
    with pytest.raises(ServerStartError) as e:
        fbt.server("--bogus")
    text = str(e.value)
    assert "exited with status 5" in text and "unknown option: --bogus" in text


def test_taken_port_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(ServerStartError) as e:
            fbt.server(port=s.getsockname()[1])
    assert "Address already in use" in str(e.value)


def test_locked_binlog_is_a_clear_error(tmp_path):
    with fbt.server(binlog_dir=tmp_path):
        with pytest.raises(ServerStartError) as e:
            fbt.server(binlog_dir=tmp_path)
    assert "exited with status 10" in str(e.value) and "lock" in str(e.value)


def test_a_free_port_taken_meanwhile_is_tried_again(monkeypatch):
    # another process binds the port between our look and the server's bind
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        ports = [s.getsockname()[1]]
        real = fbt.free_port
        monkeypatch.setattr(fbt, "free_port", lambda host: ports.pop() if ports else real(host))
        with fbt.server() as srv:
            assert srv.port != s.getsockname()[1] and not ports
            with greenstalk.Client(srv.address) as c:
                assert c.stats()["pid"] == srv.pid


def test_a_dead_server_is_reported():
    srv = fbt.server(testing=True)
    srv._proc.kill()
    srv._proc.wait()
    with pytest.raises(FastbeanError, match="not running"):
        srv.reset()
    srv.stop()


def test_kill_and_start_again_on_the_same_port_and_binlog(tmp_path):
    with fbt.server(binlog_dir=tmp_path) as srv:
        port, first = srv.port, srv.pid
        with srv.client() as c:
            jid = c.put(b"survives")
        assert srv.kill() == -9 and not srv.running and gone(first)
        assert srv.start() is srv and srv.running
        assert (srv.port, srv.address) == (port, ("127.0.0.1", port)) and srv.pid != first
        with srv.client() as c:
            assert c.peek(jid) == b"survives" and c.stats()["pid"] == srv.pid
        with pytest.raises(FastbeanError, match="running already"):
            srv.start()
    assert srv.log.count("starting, pid") == 2        # both runs' stderr
    assert srv.stop() == 0


def test_a_unix_socket_server_starts_again():
    with fbt.server(unix_socket=True) as srv:
        path = srv.unix_socket
        srv.stop()
        assert not os.path.exists(path)
        srv.start()
        assert srv.unix_socket == path
        with srv.client() as c:
            assert c.cmd(b"list-tube-used") == b"USING default"


def test_signal_and_wait():
    srv = fbt.server()
    try:
        with srv.client() as c:
            srv.signal(signal.SIGUSR1)
            deadline = time.monotonic() + 10
            while c.stats()["draining"] is not True:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        with pytest.raises(subprocess.TimeoutExpired):
            srv.wait(0.1)
        srv.signal(signal.SIGTERM)
        assert srv.wait(10) == 0 and not srv.running
        with pytest.raises(FastbeanError, match="not running"):
            srv.signal(signal.SIGTERM)
    finally:
        srv.stop()


def test_env_and_log_path(tmp_path):
    log = tmp_path / "logs" / "server.log"
    env = dict(os.environ, FASTBEAN_TEST_MARK="env-reached-it")
    with fbt.server(env=env, log_path=log) as srv:
        with open("/proc/%d/environ" % srv.pid, "rb") as f:
            assert b"FASTBEAN_TEST_MARK=env-reached-it\0" in f.read()
        srv.stop()
        srv.start()
    text = log.read_text()
    assert text.count("starting, pid") == 2 and srv.log == text


def test_the_client_and_its_errors():
    with fbt.server() as srv:
        with srv.client() as c:
            assert c.watch("t") == 2
            c.use("t")
            jid = c.put(b"hello", pri=5)
            assert c.peek_state("ready") == (jid, b"hello")
            assert c.stats_job(jid)["tube"] == "t" and c.stats_tube("t")["current-jobs-ready"] == 1
            assert c.reserve_job(jid) == (jid, b"hello")
            with pytest.raises(NotFound):
                c.peek(jid + 1)
            with pytest.raises(UnexpectedReply):
                c.cmd(b"delete %d" % (jid + 1), b"DELETED")
            c.delete(jid)
        port = srv.port
    with pytest.raises(ConnectionError):           # ConnectError: nothing listens there now
        fbt.Server(port=port).client()


def test_free_port():
    port = fbt.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
