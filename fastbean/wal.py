"""Where the engine's records go: the contracts between the server and its
log, and the rules every log keeps.

The engine appends records to its log and calls two hooks: commit_soon()
when records wait, and next_file() when the space it was given is full.
A log (the local binlog, binlog/; the replication stream, replication/)
implements Sink, the server's one log object; `Sink.disk` is the DiskLog,
the state of a binlog directory the server reports (the binlog itself,
the stream's -b mirror, or none). A log that must act on the server (a
standby that takes over, a stream that rebuilds the queue) is given a
Host, what the server lets its log do, and never the server itself.
Both logs keep the same rules, written here once:

- one commit per loop turn (TurnCommit), so every connection's records of
  a turn share one write and one fsync or publish;
- compaction (compaction_due): when most of the log's bytes are dead
  records, the oldest file's live jobs are logged again at the head;
- reclamation (Reclaim): a file (or stream part) the engine no longer needs
  goes only once the records that made it unneeded are durable. A job
  logged again at the head has, until then, its only durable record in the
  old file.
"""
import asyncio
import collections
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Protocol, Tuple

MIGRATE_BATCH = 2048        # jobs logged again per commit while compacting


class Host(Protocol):
    """What a log may ask of the server: the engine it logs for (a new one
    after reset_core()), serving clients or not, and stopping."""

    loop: asyncio.AbstractEventLoop

    @property
    def core(self) -> Any:
        """The engine (fastbean.engine.core.Core) whose records the log takes."""

    def set_serving(self, on: bool) -> None:
        """Serve clients (a primary), or close them and refuse new ones."""

    def reset_core(self) -> None:
        """Drop the engine and its connections; a new, empty one replaces it."""

    def fatal(self, message: str, status: int = 1) -> None:
        """Log message and stop the server with exit status `status`."""


class DiskLog(Protocol):
    """A binlog directory's state, as metrics and /readyz report it."""

    @property
    def failing(self) -> bool:
        """A write, fsync or new file failed, and the log has not recovered."""

    @property
    def errors(self) -> int:
        """Failed writes, fsyncs and file creations so far."""

    @property
    def files(self) -> Any:
        """The binlog files on disk (a sized collection of their numbers)."""

    @property
    def disk_bytes(self) -> int:
        """Bytes the files take on disk."""

    def histograms(self) -> Optional[Dict[str, Any]]:
        """fsync-latency and group-commit histograms, or None without fsync."""


class Sink(Protocol):
    """What server.py calls on the log it was built with."""

    @property
    def disk(self) -> Optional[DiskLog]:
        """The directory this log keeps (-b), or None."""

    def schedule(self) -> None:
        """The engine has records waiting: commit them in this loop turn."""

    def end_of_turn(self) -> None:
        """The loop turn's reads have run: commit what they logged, now."""

    def next_file(self, need: int, replace: int) -> Optional[Tuple[int, int, int]]:
        """The engine's space is used up: (file, bytes of room, bytes used) for
        `need` bytes of records, or None (then the engine refuses changes)."""

    def close(self) -> None:
        """Shutdown: what is written goes to disk, and the files close."""


class TurnCommit:
    """Calls commit() once per loop turn that logged something: at the end of
    the turn (end_of_turn) or, when no turn end comes, from a loop callback."""

    __slots__ = ("_loop", "_commit", "_pending")

    def __init__(self, loop, commit: Callable[[], None]):
        self._loop = loop
        self._commit = commit
        self._pending = False

    def schedule(self) -> None:
        if not self._pending:
            self._pending = True
            self._loop.call_soon(self._scheduled)

    def _scheduled(self) -> None:
        if self._pending:           # else the end of the turn committed already
            self.now()

    def end_of_turn(self) -> None:
        if self._pending:
            self.now()

    def now(self) -> None:
        self._pending = False
        self._commit()

    def cancel(self) -> None:
        self._pending = False


def compaction_due(closed_bytes: int, used: int, live: int, reserved: int, size: int,
                   files: int) -> bool:
    """True when the log holds more than twice what its live jobs need, plus
    one file's worth (-s): then the oldest file's jobs move forward."""
    return files > 1 and closed_bytes + used > 2 * (live + reserved) + size


class Reclaim:
    """Files no live job needs, each waiting until the records logged up to
    its collection are durable; remove(files) is then called."""

    __slots__ = ("_remove", "_waiting")

    def __init__(self, remove: Callable[[List[int]], None]):
        self._remove = remove
        self._waiting: Deque[Tuple[int, List[int]]] = collections.deque()   # (record number, files)

    def add(self, files: Iterable[int], logged: int) -> None:
        files = list(files)
        if files:
            self._waiting.append((logged, files))

    def durable(self, seq: int) -> None:
        while self._waiting and self._waiting[0][0] <= seq:
            self._remove(self._waiting.popleft()[1])

    def pending(self) -> List[int]:
        return [f for _, files in self._waiting for f in files]

    def clear(self) -> None:
        self._waiting.clear()
