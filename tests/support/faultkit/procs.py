"""Processes under test: a lone fastbean with its own log and environment, and
a Watchdog that knows which exits the test caused, restarts the servers that
stopped by themselves (as systemd would) and finds crashes."""
import os
import signal
import subprocess
import threading
import time

from tests.support.servers import Server

# What a log must never contain: an uncaught exception, a crash of the
# interpreter or of the compiled engine, a sanitizer's report.
CRASH_MARKS = ("Traceback", "Segmentation", "Fatal Python error", "AddressSanitizer",
               "runtime error:", "core dumped")


class FastbeanProcess(Server):
    """fastbean -l 127.0.0.1 -p PORT *args, on a port of its own that restarts
    keep; stderr appended to LOGDIR/NAME.log; env None = the test's.

    It counts as started once its port accepts, as a service manager would see
    it: a server that then fails (a disk that fails at start-up) is an exit for
    the Watchdog to see, not a failed start."""

    def __init__(self, name, logdir, *args, env=None, port=None, start=True):
        super().__init__("fastbean", *args, port=port, env=env, ready="accept", name=name,
                         log_path=os.path.join(str(logdir), "%s.log" % name))
        self.name = name
        if start:
            self.start()

    def start(self, timeout=30.0):
        return super().start(timeout)


class Watchdog:
    """Watches processes (anything with .name, .proc (a Popen, replaced by each
    start), .logfile, .start()): FastbeanProcess, tests.support.hanodes.Node,
    tests.support.natscluster.NatsServer.

    The test kills through kill()/stop() so that those exits are its own; any
    other exit is recorded (exits), and with restart=True the process is
    started again after `restart_delay` s, as a service manager would.
    crashes() lists the exits by a signal the test did not send, and every
    log that shows a crash. Call close() (or use it as a context manager)."""

    def __init__(self, restart=True, restart_delay=0.1, poll=0.05):
        self.restart, self.restart_delay, self.poll = restart, restart_delay, poll
        self.members = []
        self.exits = []             # (name, pid, returncode, seconds since the watch began)
        self.restarts = 0
        self.restart_errors = []
        self._ours = set()          # pids the test killed or stopped
        self._seen = set()          # pids whose exit is handled
        self._lock = threading.RLock()
        self._t0 = time.monotonic()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)
        self._thread.start()

    def watch(self, member, restart=None):
        """Watch member (restart: None = the watchdog's default)."""
        with self._lock:
            self.members.append((member, self.restart if restart is None else restart))
        return member

    def kill(self, member, sig=signal.SIGKILL, wait=True):
        """Send sig to member's process by its PID; the exit is the test's."""
        with self._lock:
            proc = member.proc
            if proc is None or proc.poll() is not None:
                return None
            self._ours.add(proc.pid)
            os.kill(proc.pid, sig)
        if wait:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
            return proc.returncode
        return None

    def stop(self, member):
        """SIGCONT then SIGTERM (SIGKILL after 30 s); the exit status."""
        with self._lock:
            proc = member.proc
            if proc is None or proc.poll() is not None:
                return None if proc is None else proc.returncode
            self._ours.add(proc.pid)
            os.kill(proc.pid, signal.SIGCONT)
        return self.kill(member, signal.SIGTERM)

    def start(self, member):
        """Start member again (after a kill by the test)."""
        with self._lock:
            member.start()

    def close(self):
        """Stop watching; stop every member still running (by its PID)."""
        self._stopping.set()
        self._thread.join(30)
        for member, _ in reversed(self.members):
            self.stop(member)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _run(self):
        while not self._stopping.wait(self.poll):
            with self._lock:
                members = list(self.members)
            for member, restart in members:
                self._check(member, restart)

    def _check(self, member, restart):
        with self._lock:
            proc = member.proc
            if proc is None or proc.poll() is None or proc.pid in self._seen:
                return
            self._seen.add(proc.pid)
            if proc.pid in self._ours:
                return
            self.exits.append((member.name, proc.pid, proc.returncode, round(time.monotonic() - self._t0, 2)))
            if not restart or self._stopping.is_set():
                return
        time.sleep(self.restart_delay)
        with self._lock:
            if member.proc is not proc or self._stopping.is_set():
                return              # the test started it meanwhile
            try:
                member.start()
                self.restarts += 1
            except Exception as e:          # recorded: crashes() reports it
                self.restart_errors.append("%s: %s" % (member.name, e))

    def crashes(self):
        """What shows a crash: exits by a signal the test did not send, restarts
        that failed, and logs with a crash's marks (each mark's first line)."""
        out = []
        for name, pid, rc, t in self.exits:
            if rc < 0:
                out.append("%s (pid %d) died of signal %d at %.1f s" % (name, pid, -rc, t))
        out += ["restart failed: %s" % e for e in self.restart_errors]
        for member, _ in self.members:
            try:
                with open(member.logfile, "rb") as f:
                    text = f.read().decode(errors="replace")
            except OSError:
                continue
            for mark in CRASH_MARKS:
                at = text.find(mark)
                if at >= 0:
                    start = text.rfind("\n", 0, at) + 1
                    out.append("%s's log: %s" % (member.name, text[start:start + 2000]))
        return out

    def fail_stops(self):
        """Exits with a status (not by a signal) the test did not cause."""
        return [e for e in self.exits if e[2] >= 0]
