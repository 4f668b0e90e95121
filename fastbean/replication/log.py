"""The engine's log on the stream: what a standby applies, what a primary
takes from its engine and publishes (the server's Sink, fastbean.wal),
the stream's parts, the -b mirror, and when records count as durable.

While the node logs (primary or suspended), each turn's records go to the
publisher (and the mirror) as take_wal() hands them over, in pieces no
bigger than a message; a reply goes once its records are stored on a NATS
quorum (and by -f on the mirror). Parts no live job needs leave the
stream (purged) and the mirror once what made them unneeded is stored.
"""
import asyncio
import logging
from typing import Dict, Optional

from fastbean.binlog.mirror import Mirror
from fastbean.engine.core import FILE_HEADER
from fastbean.logs import counted, event
from fastbean.replication.link import Unavailable
from fastbean.replication.parts import Parts
from fastbean.replication.publisher import Publisher
from fastbean.wal import MIGRATE_BATCH, Host, Reclaim, TurnCommit, compaction_due


class StreamLog:
    def __init__(self, host: Host, link, config, on_deposed, on_change, on_local_failure, on_error) -> None:
        """host: what the log may ask of the server (fastbean.wal.Host).
        on_deposed(): another writer appended; on_change(): a message was
        stored or the publisher stalled or recovered; on_local_failure(op):
        the mirror's disk failed; on_error(why): publishing failed for good."""
        self.host = host
        self.loop = host.loop
        self.logging = False        # the engine logs: this node is primary or suspended
        self.applied = 0            # stream sequence of the last message applied or stored
        self.last_id = None         # the id of the last message in the chain (publisher.py)
        self.chained = False        # last_id is known: else the next message starts the chain
        self.orphans = 0            # messages skipped as a deposed writer's
        self.parts = Parts(config.binlog_size)
        self.publisher = Publisher(link, self.loop, config.replicate_timeout, self.chain, self._acked,
                                   self._orphans, on_deposed, on_change, on_error)
        self.link = link
        self.on_change = on_change
        self.mirror = None          # -b: a local mirror of the stream
        if config.binlog_dir is not None:
            self.mirror = Mirror(self.loop, config.binlog_dir, config.replicate_stream, config.fsync,
                                 config.fsync_ms, self._local_durable, on_local_failure)
        self._turn = TurnCommit(self.loop, self.commit)
        self._reclaim = Reclaim(self._reclaimed)
        self._purging: Optional[asyncio.Task] = None
        self.gen = 0
        self.engine_part = 0        # the newest part the engine has (next_file gave it)
        self.part_caps: Dict[int, int] = {}         # part -> bytes the engine may fill, until it starts
        self.local_seq = 0          # engine records the local mirror has made durable
        self.remote_seq = 0         # engine records JetStream has stored

    @property
    def disk(self):
        """The -b mirror's state (fastbean.wal.DiskLog), or None."""
        return self.mirror

    def close(self):
        """Shutdown: the mirror's last records go to disk and its file closes."""
        if self.mirror is not None:
            self.mirror.close()

    def reset(self):
        """The node rebuilds its queue from the stream: so does everything here
        (the server has a new engine)."""
        self.gen += 1
        self.logging = False
        self.publisher.stop()
        self._turn.cancel()
        self._reclaim.clear()
        if self._purging is not None:
            self._purging.cancel()
            self._purging = None
        if self.mirror is not None:
            self.mirror.reset()
        self.applied = 0
        self.last_id, self.chained = None, False
        self.parts.reset()
        self.engine_part = self.local_seq = self.remote_seq = 0
        self.part_caps.clear()

    # -- a standby --------------------------------------------------------------

    def chain(self):
        """(stream sequence, message id) of the chain's last message; the id
        is None while unknown (the next message then starts the chain)."""
        return self.applied, self.last_id if self.chained else None

    def apply(self, seq, part, data, msg_id, after):
        """One message of the stream, applied as replay applies a file's records:
        the engine's jobs stay in replay until begin(). False when it does
        not follow on from the last one (rebuild from the stream). A message
        that names another predecessor than the chain's last message is an
        orphan, a deposed writer's: skipped (publisher.py)."""
        if self.chained and after is not None and after != self.last_id:
            event(logging.WARNING, "stream-orphan", "replication: message %(seq)d does not follow the "
                  "last one applied (a deposed writer's): skipped", seq=seq)
            self.orphans += 1
            self.applied = seq
            return True
        self.last_id, self.chained = msg_id, True
        core = self.host.core
        if part != self.parts.current:
            if part < self.parts.current:
                event(logging.ERROR, "stream-part-back", "replication: message %(seq)d goes back to "
                      "part %(part)d from %(current)d", seq=seq, part=part, current=self.parts.current)
                return False
            # parts are numbered on; one without messages was empty
            for empty in range(self.parts.current + 1 if self.parts.current else part, part):
                core.replay(FILE_HEADER, empty)
                self._mirror_part(empty, 0)
            self.parts.start(part)
            self._mirror_part(part, 0)
        if self.mirror is not None:
            self.mirror.write(data)
        count, end, reason = core.replay(FILE_HEADER + data, part)
        if reason is not None:
            dropped = len(data) + len(FILE_HEADER) - end
            event(logging.ERROR, "stream-records-dropped", "replication: message %(seq)d: %(reason)s: "
                  + counted(dropped, "byte") + " after record %(records)d not applied", seq=seq, reason=reason,
                  bytes=dropped, records=count)
        self.parts.add(part, seq, len(data))
        self.applied = seq
        gone = core.wal_collect()
        self.parts.unneeded(gone)
        self._reclaimed(gone)                   # applied records are in the stream already
        return True

    def begin(self, part, seq, msg_id):
        """The fence, message seq, opened `part`: the engine places its
        replayed jobs and logs from now on, into that part. The job count."""
        core = self.host.core
        jobs = core.replay_finish()
        self.parts.start(part)
        self._acked(part, 0, seq, 0, msg_id)
        cap = self.parts.capacity(core.wal_status().reserved)
        self.engine_part = part
        self._mirror_part(part, cap)
        core.set_wal_piece(self.publisher.max_payload)
        core.wal_start(part, cap, 0)
        self.logging = True
        self.commit()               # the engine's first record in its part
        return jobs

    def fenced(self, seq, msg_id):
        """An empty message this node appended to its current part is stored."""
        self._acked(self.parts.current, 0, seq, 0, msg_id)

    # -- the Sink: the engine's records (server.py passes them on) ------------------

    def schedule(self):
        self._turn.schedule()

    def end_of_turn(self):
        self._turn.end_of_turn()

    def commit(self):
        """The turn's records: published now, or, while the publisher's window
        is full, with everything gathered meanwhile once a message is stored."""
        if self.logging and self.publisher.room:
            self._take()
            self.publisher.send()

    def next_file(self, need, replace):
        """The current part is full: the next part for the engine to go on in,
        as (part, room, bytes used); its records start there in take_wal().
        (No spare is ever offered: replace is 0.)"""
        if not self.logging:
            return None
        self.engine_part += 1
        cap = self.part_caps[self.engine_part] = self.parts.capacity(need)
        return self.engine_part, cap, 0

    def _take(self):
        # The engine's records, in pieces no bigger than a message; a part the
        # engine went on to starts here (and its mirror file with -b).
        segments, records = self.host.core.take_wal()
        taken = False
        for part, data in segments:
            if part != self.parts.current:
                self.parts.start(part)
                self._mirror_part(part, self.part_caps.pop(part, 0))
            if data:
                taken = True
                if self.mirror is not None:
                    self.mirror.write(data)
                self.publisher.push(part, data)     # a bytearray of its own: no copy
        if taken:
            self.publisher.mark(records)
            if self.mirror is not None:
                self.mirror.written(records)

    def _mirror_part(self, part, cap):
        if self.mirror is not None:
            self.mirror.part(part, cap)

    # -- stored ------------------------------------------------------------------

    def _acked(self, part, size, seq, records, msg_id):
        self.applied = seq
        self.last_id, self.chained = msg_id, True
        self.parts.add(part, seq, size)
        if records:
            self.remote_seq = records
            self._release()
        if self.logging:
            # what turns left in the engine while the window was full joins
            # what the queue holds back, so the next message has it all
            self._take()
            self.publisher.send()       # after a fence too, what was logged meanwhile
        if size:
            self._maintain()
        self.on_change()

    def _orphans(self, seq):
        # the stream up to seq, past the chain's end, holds orphans only
        self.applied = max(self.applied, seq)

    def _local_durable(self, seq):
        self.local_seq = max(self.local_seq, seq)
        self._release()

    def _release(self):
        # A reply goes once its records are in the stream (and on the local disk, with -b).
        seq = self.remote_seq if self.mirror is None else min(self.remote_seq, self.local_seq)
        if seq and self.logging:
            self.host.core.set_durable(seq)
            # parts go once what made them unneeded is stored (and synced here)
            self._reclaim.durable(seq if self.mirror is None else min(seq, self.mirror.synced))

    def _maintain(self):
        # As the binlog does with files: the parts no live job needs go (once
        # what made them unneeded is stored), and when most of the stream is
        # dead records, the oldest part's jobs are logged again, a batch per message.
        core = self.host.core
        gone = core.wal_collect()
        self.parts.unneeded(gone)
        wal = core.wal_status()
        if compaction_due(self.parts.closed_bytes, wal.used, wal.live, wal.reserved, self.parts.size, wal.files):
            more = core.wal_migrate(MIGRATE_BATCH) and core.wal_collect()
            if more:
                self.parts.unneeded(more)
                gone += more
        self._reclaim.add(gone, core.logged)

    def _reclaimed(self, parts):
        if not parts:
            return
        self.parts.forget(parts)
        if self.mirror is not None:
            self.mirror.remove(parts)
        if self.logging:
            keep = self.parts.keep_from()
            if keep > self.parts.purged and self._purging is None:
                self._purging = self.loop.create_task(self._purge(self.gen, keep))

    async def _purge(self, gen, keep):
        try:
            await self.link.purge(keep)
            if gen == self.gen:
                self.parts.purged = max(self.parts.purged, keep)
        except Unavailable as e:
            event(logging.WARNING, "purge-failed", "replication: purging the stream below %(seq)d: "
                  "%(error)s", seq=keep, error=str(e))
        finally:
            if gen == self.gen:
                self._purging = None
