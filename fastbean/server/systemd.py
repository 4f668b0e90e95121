"""systemd's notify protocol without libsystemd: READY, STOPPING, STATUS, watchdog.

A service of Type=notify gets $NOTIFY_SOCKET, a datagram socket (a path, or
an abstract name written with a leading "@"). Each message is a datagram of
newline-separated VAR=value lines. With WatchdogSec= the manager also sets
$WATCHDOG_USEC (and $WATCHDOG_PID: the process meant), and kills a service
that stays silent that long; we ping at half of it from the event loop, so a
stuck loop is what gets restarted.
"""
import logging
import os
import socket

from fastbean.logs import event


class Notifier:
    """Sends to $NOTIFY_SOCKET; every method is a no-op when it is not set."""

    def __init__(self, environ=None):
        env = os.environ if environ is None else environ
        self.address = _address(env.get("NOTIFY_SOCKET", ""))
        self.watchdog_interval = _watchdog_interval(env)
        self._sock = None
        self._status = None
        if self.address is not None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.setblocking(False)

    @property
    def enabled(self):
        return self._sock is not None

    def send(self, *lines):
        if self._sock is None:
            return False
        try:
            self._sock.sendto("\n".join(lines).encode(), self.address)
        except OSError as e:
            # The manager went away or its queue is full: nothing to do but say so.
            event(logging.DEBUG, "notify-failed", "cannot notify systemd at %(socket)s: %(error)s",
                  socket=os.environ.get("NOTIFY_SOCKET"), error=str(e))
            return False
        return True

    def ready(self, status):
        self._status = status
        return self.send("READY=1", "STATUS=" + status)

    def stopping(self):
        return self.send("STOPPING=1", "STATUS=stopping")

    def status(self, text):
        """STATUS=text, sent only when it changed."""
        if text != self._status:
            self._status = text
            self.send("STATUS=" + text)

    def extend_start(self, seconds):
        """Still starting (a long replay that progresses): push the start timeout."""
        self.send("EXTEND_TIMEOUT_USEC=%d" % int(seconds * 1e6))

    def watchdog(self):
        self.send("WATCHDOG=1")

    def close(self):
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _address(value):
    if not value:
        return None
    if value.startswith("@"):
        return "\0" + value[1:]          # the abstract namespace
    if value.startswith("/"):
        return value
    event(logging.WARNING, "notify-socket", "ignoring NOTIFY_SOCKET=%(socket)s: not a path or an abstract "
          "socket name", socket=value)
    return None


def _watchdog_interval(env):
    """Seconds between pings: half of $WATCHDOG_USEC, if it is meant for this process."""
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and pid != str(os.getpid()):
        return None
    return int(usec) / 2e6
