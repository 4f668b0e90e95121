"""systemd: the notify protocol as a Type=notify unit sees it (READY, STATUS,
WATCHDOG, STOPPING on a socket the test listens on), and the shipped units."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fastbean.errors import CONFIG_EXITS
from tests.support import ROOT
from tests.support.servers import Server

pytestmark = pytest.mark.timeout(60)

CONTRIB = Path(ROOT) / "contrib" / "systemd"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze") or "/usr/bin/systemd-analyze"
SYSTEMD_SYSUSERS = shutil.which("systemd-sysusers") or "/usr/bin/systemd-sysusers"


class Manager:
    """The service manager's end of NOTIFY_SOCKET: a datagram socket."""

    def __init__(self, tmp_path, abstract=False):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = "fastbean-test-%d-%d" % (os.getpid(), time.monotonic_ns())
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            self.address = str(tmp_path / "notify")
            self.sock.bind(self.address)
        self.messages = []

    def wait_for(self, text, timeout=15.0):
        """The first message (since the last match) containing `text`."""
        deadline = time.monotonic() + timeout
        while True:
            for i, msg in enumerate(self.messages):
                if text in msg:
                    del self.messages[:i + 1]
                    return msg
            left = deadline - time.monotonic()
            assert left > 0, "no %r in %r" % (text, self.messages)
            self.sock.settimeout(left)
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except socket.timeout:
                pass

    def drain(self, seconds):
        """Everything that arrives within `seconds`."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.sock.settimeout(max(0.001, end - time.monotonic()))
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except socket.timeout:
                pass
        out, self.messages = self.messages, []
        return out


class Notifying(Server):
    """fastbean with NOTIFY_SOCKET; pid_vars are set to its own pid, as systemd
    sets WATCHDOG_PID (a wrapper sets them, then execs the server)."""

    WRAPPER = ("import os, sys\n"
               "for var in sys.argv[1].split(','):\n"
               "    if var: os.environ[var] = str(os.getpid())\n"
               "os.execvp(sys.argv[2], sys.argv[2:])\n")

    def __init__(self, manager, env=None, pid_vars=()):
        super().__init__("fastbean", env=dict(os.environ, NOTIFY_SOCKET=manager.address, **(env or {})))
        self.pid_vars = pid_vars

    def _program(self):
        return [sys.executable, "-c", self.WRAPPER, ",".join(self.pid_vars)] + super()._program()


def spawn(manager, env=None, pid_vars=()):
    """A Notifying server, started; the test waits for its READY=1."""
    return Notifying(manager, env, pid_vars).spawn()


def test_ready_status_watchdog_and_stopping_on_an_abstract_socket(tmp_path):
    manager = Manager(tmp_path, abstract=True)
    p = spawn(manager, {"WATCHDOG_USEC": "200000"}, pid_vars=["WATCHDOG_PID"])
    try:
        ready = manager.wait_for("READY=1")
        assert "STATUS=0 jobs, 0 connections" in ready.split("\n")
        with p.client() as c:                       # READY=1 came once it serves
            c.put(b"x")
            # STATUS follows the queue (checked once a second, sent when it changed)
            manager.wait_for("STATUS=1 job, 1 connection")
        for _ in range(3):                          # a ping every 100 ms
            manager.wait_for("WATCHDOG=1")
        p.signal(signal.SIGUSR1)
        manager.wait_for("STATUS=1 job, 0 connections; drained: no job reserved")
        p.signal(signal.SIGTERM)
        manager.wait_for("STOPPING=1")
        assert p.wait(10) == 0
    finally:
        p.kill()


def test_no_watchdog_pings_for_another_process(tmp_path):
    manager = Manager(tmp_path)
    p = spawn(manager, {"WATCHDOG_USEC": "100000", "WATCHDOG_PID": "1"})
    try:
        manager.wait_for("READY=1")
        # 10 intervals: a server that pinged would have sent several
        assert not [m for m in manager.drain(1.0) if "WATCHDOG=1" in m]
    finally:
        assert p.stop() == 0


def test_without_notify_socket_nothing_is_sent(tmp_path):
    # the same server under a plain shell: no NOTIFY_SOCKET, no errors
    env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
    p = Server("fastbean", env=env).start()
    try:
        with p.client() as c:
            assert c.cmd(b"list-tube-used") == b"USING default"
    finally:
        assert p.stop() == 0
    assert "notify" not in p.log.lower()


def test_units_pass_systemd_analyze_verify(tmp_path):
    # verify checks that ExecStart names an executable: point it at this
    # test's interpreter (test_install.py verifies the unit as shipped,
    # against a root where the README's install put fastbean).
    service = (CONTRIB / "fastbean.service").read_text()
    assert "ExecStart=/opt/fastbean/bin/fastbean " in service
    (tmp_path / "fastbean.service").write_text(
        service.replace("ExecStart=/opt/fastbean/bin/fastbean ",
                        "ExecStart=%s -m fastbean " % sys.executable))
    shutil.copy(CONTRIB / "fastbean.socket", tmp_path / "fastbean.socket")
    shutil.copy(CONTRIB / "fastbean-tls.socket", tmp_path / "fastbean-tls.socket")
    p = subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no", str(tmp_path / "fastbean.service"),
                        str(tmp_path / "fastbean.socket"), str(tmp_path / "fastbean-tls.socket")],
                       capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr == "" and p.stdout == "", p.stdout + p.stderr


def test_unit_keeps_debian_settings_and_adds_what_debian_lacks():
    service = (CONTRIB / "fastbean.service").read_text()
    lines = {line.split("=", 1)[0]: line.split("=", 1)[1]
             for line in service.splitlines() if "=" in line and not line.startswith("#")}
    env_files = [line for line in service.splitlines() if line.startswith("EnvironmentFile=")]
    assert env_files == ["EnvironmentFile=-/etc/default/beanstalkd",
                         "EnvironmentFile=-/etc/default/fastbean"]
    assert lines["ExecStart"].split()[1:] == [
        "-l", "${BEANSTALKD_LISTEN_ADDR}", "-p", "${BEANSTALKD_LISTEN_PORT}", "$BEANSTALKD_EXTRA",
        "$FASTBEAN_EXTRA"]
    assert lines["Type"] == "notify" and lines["Restart"] == "on-failure"
    # every configuration error's status, and neither a crash's (1) nor a failing disk's (74)
    assert sorted(int(x) for x in lines["RestartPreventExitStatus"].split()) == sorted(CONFIG_EXITS)
    assert lines["StateDirectory"] == "fastbean" and lines["User"] == "fastbean"
    assert int(lines["LimitNOFILE"]) >= 65536
    assert lines["ProtectSystem"] == "strict" and lines["NoNewPrivileges"] == "yes"
    # every variable the default file mentions is one the unit uses
    default = (CONTRIB / "fastbean.default").read_text()
    names = {line.lstrip("#").split("=")[0] for line in default.splitlines()
             if "=" in line and not line.startswith("##")}
    assert names == {"BEANSTALKD_LISTEN_ADDR", "BEANSTALKD_LISTEN_PORT", "BEANSTALKD_EXTRA",
                     "FASTBEAN_EXTRA"}
    socket_unit = (CONTRIB / "fastbean.socket").read_text()
    assert "ListenStream=127.0.0.1:11300" in socket_unit
    # the TLS socket is named as fastbean's socket activation expects (sockets.TLS_FD_NAME)
    from fastbean.sockets import TLS_FD_NAME
    tls_unit = (CONTRIB / "fastbean-tls.socket").read_text()
    assert "FileDescriptorName=%s\n" % TLS_FD_NAME in tls_unit and "Service=fastbean.service" in tls_unit


def test_sysusers_file_creates_the_user(tmp_path):
    (tmp_path / "etc").mkdir()
    p = subprocess.run([SYSTEMD_SYSUSERS, "--dry-run", "--root", str(tmp_path),
                        str(CONTRIB / "fastbean.sysusers")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "Creating user 'fastbean'" in p.stdout + p.stderr

