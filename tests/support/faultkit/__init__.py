"""faultkit: faults for fastbean's durability and high-availability tests, and
the exact audit of what clients were told against what a server holds.

- NatsProxy (proxy.py): a loopback TCP proxy in front of one NATS server that
  can drop() or blackhole() the connections through it, and restore() them.
- DiskFaults (disk.py, diskshim.c): an LD_PRELOAD shim whose fdatasync fails
  with EIO (and the unsynced bytes become zeros on disk) or whose write fails.
- FastbeanProcess, Watchdog (procs.py): a lone server with its own log and
  environment; exits the test did not cause, restarts as systemd would, crashes.
- Workload, Audit, Conn (workload.py): audited clients that reconnect, and the
  audit of a server's final state against every reply they got.
- NatsClient, Lease, LeaseThief (natsctl.py): the test's own NATS client; who
  holds the lease as the cluster sees it; a foreign writer of the lease key.
"""
from tests.support.faultkit.disk import DiskFaults, build_shim
from tests.support.faultkit.natsctl import Lease, LeaseThief, NatsClient
from tests.support.faultkit.procs import FastbeanProcess, Watchdog
from tests.support.faultkit.proxy import NatsProxy
from tests.support.faultkit.workload import Audit, Conn, Lost, Workload, connect

__all__ = ["Audit", "Conn", "DiskFaults", "FastbeanProcess", "Lease", "LeaseThief", "Lost", "NatsClient", "NatsProxy",
           "Watchdog", "Workload", "build_shim", "connect"]
