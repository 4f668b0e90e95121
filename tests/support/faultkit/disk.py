"""DiskFaults: a disk whose fdatasync or write fails on demand, for the
processes started with its env() (diskshim.c, compiled here with gcc and
preloaded after whatever is preloaded already)."""
import os
import subprocess
import time

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "diskshim.c")


def build_shim(workdir):
    """Compile diskshim.c into workdir; the .so's path."""
    shim = os.path.join(str(workdir), "faultkit-diskshim.so")
    subprocess.run(["gcc", "-O2", "-Wall", "-shared", "-fPIC", "-o", shim, SOURCE, "-ldl", "-lpthread"],
                   check=True)
    return shim


class DiskFaults:
    """Faults for the files under `watch_dir` of the processes started with env().

    fail_sync(n): the next n fdatasync/fsync calls on such files fail with EIO,
    and the bytes written since the file's last good sync become zeros on disk.
    fail_write(n): the next n pwrite/write calls to such files fail with EIO
    and write nothing. power_loss(): at the next write or sync of such a file,
    every unsynced byte becomes zeros and the process is killed (SIGKILL).
    Given err (an errno other than EIO: ENOMEM, say), fail_sync and fail_write
    fail with it and do nothing else (no byte is lost: a shortage, not a
    disk fault). events(): the faults injected so far, as dicts."""

    def __init__(self, workdir, watch_dir):
        self.workdir = str(workdir)
        self.watch_dir = os.path.realpath(str(watch_dir))
        self.shim = build_shim(self.workdir)
        self.sync_trigger = os.path.join(self.workdir, "faultkit-fail-sync")
        self.write_trigger = os.path.join(self.workdir, "faultkit-fail-write")
        self.power_trigger = os.path.join(self.workdir, "faultkit-power-loss")
        self.logfile = os.path.join(self.workdir, "faultkit-disk.log")
        for path in (self.sync_trigger, self.write_trigger, self.power_trigger):
            if os.path.exists(path):
                os.unlink(path)

    def env(self, base=None):
        """An environment (a copy of `base`, default os.environ) that preloads the shim."""
        env = dict(os.environ if base is None else base)
        env["LD_PRELOAD"] = " ".join(filter(None, [env.get("LD_PRELOAD"), self.shim]))
        env.update(FAULTKIT_DIR=self.watch_dir, FAULTKIT_SYNC_TRIGGER=self.sync_trigger,
                   FAULTKIT_WRITE_TRIGGER=self.write_trigger, FAULTKIT_POWER_TRIGGER=self.power_trigger,
                   FAULTKIT_LOG=self.logfile)
        return env

    @staticmethod
    def _arm(path, count, err=None):
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % count if err is None else "%d %d\n" % (count, err))
        os.rename(tmp, path)        # the shim never sees a half-written count

    def fail_sync(self, count=1, err=None):
        self._arm(self.sync_trigger, count, err)

    def fail_write(self, count=1, err=None):
        self._arm(self.write_trigger, count, err)

    def power_loss(self):
        self._arm(self.power_trigger, 1)

    def pending(self):
        """True while an armed fault has not happened yet."""
        return any(os.path.exists(p) for p in (self.sync_trigger, self.write_trigger, self.power_trigger))

    def wait_injected(self, timeout=30.0):
        """Wait until the armed faults have happened; False if they did not in time."""
        deadline = time.monotonic() + timeout
        while self.pending():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def disarm(self):
        for path in (self.sync_trigger, self.write_trigger, self.power_trigger):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def events(self):
        """[{'what': 'sync-eio'|'write-eio'|'sync-shortage'|'write-shortage'|'power-loss', 'pid',
        'tid', 'fd', 'bytes', 'ranges', 'path'}]"""
        out = []
        try:
            with open(self.logfile) as f:
                for line in f:
                    what, rest = line.rstrip("\n").split(" ", 1)
                    fields = dict(kv.split("=", 1) for kv in rest.split(" ", 5))
                    for k in ("pid", "tid", "fd", "bytes", "ranges"):
                        fields[k] = int(fields[k])
                    out.append(dict(fields, what=what))
        except FileNotFoundError:
            pass
        return out
