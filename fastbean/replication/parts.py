"""The stream's parts: they play the binlog files' role.

The engine's space accounting decides when a part is full, which live jobs
have their latest full record in which part, and which old parts no job
needs (wal_collect), exactly as for files. Here: where each part starts in
the stream, how many bytes each holds, and so how far the stream may be
purged.
"""
from fastbean.binlog.files import blocks
from fastbean.engine.core import FILE_FIRST_RECORD


class Parts:
    def __init__(self, size):
        self.size = max(size, 1)    # -s: bytes of new records a part holds
        self.reset()

    def reset(self):
        self.current = 0            # the part messages go to now
        self.first = {}             # part -> stream sequence of its first message
        self.bytes = {}             # part -> bytes of its messages
        self.closed_bytes = 0       # bytes in parts older than the current one
        self.purged = 0             # the stream holds no message below this sequence
        self.unneeded_parts = set() # no longer counted, their messages may still be in flight

    def start(self, part):
        """Messages go to `part` from now on."""
        if self.current in self.bytes:
            self.closed_bytes += self.bytes[self.current]
        self.current = part
        self.bytes[part] = 0

    def add(self, part, seq, size):
        """Message `seq` of `size` bytes belongs to `part`."""
        self.first.setdefault(part, seq)
        if part in self.unneeded_parts:
            return
        self.bytes[part] = self.bytes.get(part, 0) + size
        if part != self.current:        # sent before the part it belongs to ended
            self.closed_bytes += size

    def unneeded(self, parts):
        """Parts no live job needs: they stop counting for compaction."""
        for part in parts:
            self.closed_bytes -= self.bytes.pop(part, 0)
            self.unneeded_parts.add(part)

    def forget(self, parts):
        """Parts whose successors are stored: the stream may be purged past them."""
        for part in parts:
            self.first.pop(part, None)
            self.unneeded_parts.discard(part)

    def keep_from(self):
        """The first stream sequence still needed (0: nothing is known)."""
        return min(self.first.values(), default=0)

    def capacity(self, need):
        """Bytes a new part may hold: -s of new records beyond `need` (the room
        the engine keeps for the live jobs' deletes) and its first record."""
        return blocks(self.size + need + FILE_FIRST_RECORD)
