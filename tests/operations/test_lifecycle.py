"""Process lifecycle: drain mode on SIGUSR1, clean exit on SIGTERM/SIGINT,
start-up speed, UNIX sockets and socket activation."""
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from fastbean.errors import ServerStartError
from tests.support.servers import Server, client, fastbean_cmd, free_port

pytestmark = pytest.mark.timeout(60)


def test_sigusr1_drains(server):
    with server.client() as c:
        j = c.put(b"before")
        os.kill(server.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while c.stats()["draining"] is not True:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert c.cmd(b"put 0 0 10 5\r\nhello") == b"DRAINING"
        assert c.job(b"reserve-with-timeout 0") == (j, b"before")
        c.cmd(b"delete %d" % j, b"DELETED")
        assert c.stats()["current-jobs-ready"] == 0


def test_signals_sent_as_soon_as_the_port_answers_are_not_lost():
    # The port accepts (kernel backlog) before the event loop runs: a signal
    # then must wait for the handlers, not vanish or kill the process. So
    # each is sent once the port accepts, not once the server answers.
    for _ in range(5):
        s = Server("fastbean", ready="accept").start()
        os.kill(s.pid, signal.SIGUSR1)
        with s.client() as c:
            deadline = time.monotonic() + 5
            while c.stats()["draining"] is not True:
                assert time.monotonic() < deadline, "SIGUSR1 was lost"
                time.sleep(0.02)
        s.stop()
    for _ in range(5):
        s = Server("fastbean", ready="accept").start()
        os.kill(s.pid, signal.SIGTERM)
        assert s.wait(5) == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_clean_exit(sig):
    s = Server("fastbean").start()
    idle = s.client()
    with s.client() as c:
        c.put(b"x")
        c.send(b"stats\r\n")
        os.kill(s.pid, sig)
        assert c.line().startswith(b"OK ")
    assert s.wait(10) == 0
    idle.close()


def test_accepts_connections_soon_after_start():
    # the socket is bound before the heavy imports; clients can connect into
    # the backlog and are answered once the loop runs
    server = Server("fastbean").spawn()
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.002)
        s.sendall(b"list-tube-used\r\n")
        assert s.recv(100) == b"USING default\r\n"
        s.close()
    finally:
        server.stop()


def test_unix_socket_replaces_a_stale_one(tmp_path):
    path = str(tmp_path / "fb.sock")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)
    stale.close()
    server = Server("fastbean", unix_socket=path).start()
    try:
        with server.client() as c:
            assert c.cmd(b"list-tube-used") == b"USING default"
    finally:
        server.stop()
    assert "removing existing local socket" in server.log


def test_unix_socket_path_taken_by_a_file_is_refused(tmp_path):
    path = tmp_path / "not-a-socket"
    path.write_text("x")
    p = subprocess.run(fastbean_cmd() + ["-l", "unix:%s" % path], capture_output=True, timeout=30)
    assert p.returncode == 111


def test_socket_activation(tmp_path):
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    port = lsock.getsockname()[1]
    fd = lsock.fileno()
    # the child gets the socket as fd 3 and LISTEN_PID set to its own pid
    code = ("import os, sys; os.dup2(%d, 3); os.environ['LISTEN_FDS'] = '1'; "
            "os.environ['LISTEN_PID'] = str(os.getpid()); "
            "os.execv(sys.executable, [sys.executable, '-m', 'fastbean', '-p', '1'])" % fd)
    p = subprocess.Popen([sys.executable, "-c", code], pass_fds=[fd], stderr=subprocess.PIPE)
    lsock.close()
    try:
        with client(port) as c:
            assert c.cmd(b"list-tube-used") == b"USING default"
    finally:
        p.terminate()
        p.wait()
    assert b"inherited listen fd; ignoring option: -p 1" in p.stderr.read()


@pytest.mark.parametrize("argv,status", [(["-h"], 0), (["-v"], 0), (["-x"], 5), (["stray"], 5),
                                         (["-z", "10k"], 5), (["-p"], 5), (["-"], 5)])
def test_flag_errors_match_beanstalkd(argv, status):
    for cmd in (fastbean_cmd(), ["beanstalkd"]):
        p = subprocess.run(cmd + argv, capture_output=True, timeout=30)
        assert p.returncode == status, (cmd, argv, p.stderr)


def test_version_and_help_streams():
    p = subprocess.run(fastbean_cmd() + ["-v"], capture_output=True, text=True, timeout=30)
    assert p.stdout.startswith("fastbean ") and p.stderr == ""
    p = subprocess.run(fastbean_cmd() + ["-h"], capture_output=True, text=True, timeout=30)
    assert "-b DIR" in p.stderr and p.stdout == ""


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_long_help_and_version_go_to_stdout(flag):
    # GNU's long forms: stdout and status 0 (beanstalkd refuses them with its
    # usage and 5; -h and -v stay as beanstalkd has them, above)
    p = subprocess.run(fastbean_cmd() + ["-p", "1", flag], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and p.stderr == ""
    if flag == "--help":
        assert p.stdout.startswith("Use: fastbean [OPTIONS]") and "--replicate URLS" in p.stdout
    else:
        assert p.stdout.startswith("fastbean ") and len(p.stdout.splitlines()) == 1
    p = subprocess.run(fastbean_cmd() + [flag + "=yes"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 5 and "takes no value" in p.stderr


def _started(kind, argv):
    """(exit status and first stderr line) of a server that refused to start,
    or the stats values the flags set, of one that did."""
    server = Server(kind, *argv)
    try:
        server.start()
    except ServerStartError:
        return server.proc.returncode, server.log.splitlines()[0].split(": ", 1)[1]
    try:
        with server.client() as c:
            st = c.stats()
            return st["max-job-size"], st["binlog-max-size"]
    finally:
        server.stop()


@pytest.mark.parametrize("argv", [
    ["-z", "-1"], ["-z", "+5"], ["-z", " \t7"], ["-z", "7 "], ["-z", "0x10"], ["-z", ""],
    ["-z", "0"], ["-z", "99999999999999999999999"], ["-z", "-18446744073709551615"],
    ["-z", "\u0663"], ["-z", "- 5"], ["-z", "--5"],
    ["-s", "-1"], ["-s", "4294967297"], ["-s", "2147483648"], ["-s", "+9"], ["-s", "x"],
    ["-f", "-1"], ["-f", "+5"], ["-f", " 3"], ["-f", "x"], ["-f", "1.5"],
])
def test_number_flags_parse_as_in_beanstalkd(argv, tmp_path):
    # beanstalkd reads -z, -s and -f with sscanf("%zu%c"): blanks and a sign
    # before the digits are fine, a negative number wraps (-z -1 is the
    # largest size), -s is kept in an int; a service file may rely on any of it.
    if argv[0] in ("-s", "-f"):
        argv = argv + ["-b", str(tmp_path)]
    ours = _started("fastbean", argv)
    for f in tmp_path.iterdir():
        f.unlink()
    assert ours == _started("beanstalkd", argv)


def test_negative_fsync_interval_syncs_every_write():
    # beanstalkd multiplies -f's int64 by 10**6: at or below zero it syncs
    # after every write, as -f 0 does.
    from fastbean.cli import parse_args
    assert parse_args(["-f", "-1"]).fsync_ms == 0
    assert parse_args(["-f", "18446744073709551615"]).fsync_ms == 0
    assert parse_args(["-f", "+7"]).fsync_ms == 7
    assert parse_args(["-F", "-f", "5"]).fsync


def test_a_mistake_on_the_command_line_is_the_one_line_printed():
    # beanstalkd follows it with the usage: 80 lines that hid the mistake
    p = subprocess.run(fastbean_cmd() + ["--metric", "9100"], capture_output=True, text=True, timeout=30)
    assert (p.returncode, p.stderr) == (5, "fastbean: unknown option: --metric\n")


@pytest.mark.parametrize("path, says", [
    ("missing", "does not exist"), ("file", "is not a directory"),
    ("file/below", "part of the path is not a directory"), ("/proc", "takes no new files"),
])
def test_an_unusable_binlog_directory_stops_the_start_before_any_listener(tmp_path, path, says):
    (tmp_path / "file").write_text("")
    path = path if path.startswith("/") else str(tmp_path / path)
    p = subprocess.run(fastbean_cmd() + ["-b", path, "-l", "127.0.0.1", "-p", str(free_port())],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 10 and says in p.stderr, p.stderr
    assert "/proc" in path or "listening" not in p.stderr
    assert "Traceback" not in p.stderr
