"""The primary's side of the stream: its records published in order, one
message in flight at a time, each message tried until JetStream stores it.

Every try of a message carries the same message id (unique to this process
and message), so a try whose answer was lost is not stored twice; and the
stream sequence its sender saw last (Nats-Expected-Last-Sequence), so only
a node whose queue is exactly the stream's can append: the fence. What the
engine logs while a message is in flight goes out as the next message.

A message that waits longer than --replicate-timeout makes the publisher
"stalled" (replication/ then stops serving clients); it goes on trying.
"""
import asyncio
import collections
import logging
import time
import uuid

from fastbean.logs import event
from fastbean.replication.link import PART_HEADER, Deposed, Quiet, Unavailable

RETRY_PAUSE = 0.05          # seconds between tries of one message


class Publisher:
    def __init__(self, link, loop, timeout, expected, on_acked, on_deposed, on_stall, on_error):
        """expected(): the stream sequence the next message must follow.
        on_acked(part, bytes, seq, records): a message is stored as seq; it
        held the engine's records up to `records` (0: not the last piece).
        on_deposed(): another writer appended. on_stall(): stalled changed.
        on_error(why): publishing failed in a way no retry mends."""
        self.link = link
        self.loop = loop
        self.timeout = timeout
        self.expected = expected
        self.on_acked = on_acked
        self.on_deposed = on_deposed
        self.on_stall = on_stall
        self.on_error = on_error
        self.max_payload = 1 << 20
        self.queue = collections.deque()    # [part, records bytes, engine record number or 0]
        self.stalled = False
        self.published = 0
        self.retries = 0
        self._prefix = uuid.uuid4().hex + "-"
        self._count = 0
        self._task = None
        self._gen = 0
        self._waiting = Quiet("publish-waiting", "replication: a publish has waited %(seconds).1f s: "
                              "%(error)s")

    @property
    def busy(self):
        """Messages are queued or in flight."""
        return bool(self.queue) or self._task is not None

    @property
    def in_flight(self):
        """Messages published and not yet stored: 0 or 1."""
        return int(self._task is not None)

    def push(self, part, data, records=0):
        self.queue.append([part, data, records])

    def mark(self, records):
        """The last piece pushed ends the engine's records up to `records`."""
        self.queue[-1][2] = records

    def send(self):
        if self._task is None and self.queue:
            self._task = self.loop.create_task(self._run(self._gen))

    def stop(self):
        """Drop what is queued; a publish in flight is abandoned (its task checks
        its generation after every wait, so nothing it does lands)."""
        self._gen += 1
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.queue.clear()
        self.stalled = False

    async def _run(self, gen):
        try:
            while self.queue and gen == self._gen:
                part, data, records = self._next_message()
                seq = await self._publish(gen, part, data)
                if gen != self._gen:
                    return
                self.on_acked(part, len(data), seq, records)
        except Deposed:
            if gen == self._gen:
                self.on_deposed()
        except Exception as e:
            event(logging.ERROR, "publish-failed", "replication: publishing failed: %(error)s",
                  error=str(e) or type(e).__name__, exc_info=True)
            if gen == self._gen:
                self.on_error("publishing failed")
        finally:
            if gen == self._gen:
                self._task = None

    def _next_message(self):
        # the queue's first pieces of one part, as one message
        part, data, records = self.queue.popleft()
        if self.queue and self.queue[0][0] == part:
            pieces = [data]
            size = len(data)
            while (self.queue and self.queue[0][0] == part
                   and size + len(self.queue[0][1]) <= self.max_payload):
                _, more, more_records = self.queue.popleft()
                pieces.append(more)
                size += len(more)
                records = max(records, more_records)
            data = b"".join(pieces)
        return part, data, records

    async def fence(self, part, give_up):
        """Publish an empty message of `part` expecting the stream to end where
        this node's queue does: its sequence, or None after `give_up` seconds
        without an answer. Raises Deposed."""
        gen = self._gen
        return await self._publish(gen, part, b"", give_up)

    async def _publish(self, gen, part, data, give_up=None):
        self._count += 1
        headers = {"Nats-Msg-Id": self._prefix + str(self._count),
                   "Nats-Expected-Last-Sequence": str(self.expected()), PART_HEADER: str(part)}
        t0 = time.monotonic()
        while True:
            try:
                seq = await self.link.publish(data, headers)
                break
            except Unavailable as e:
                if gen != self._gen:
                    return None
                waited = time.monotonic() - t0
                self.retries += 1
                self._waiting.failed(seconds=waited, error=str(e))
                if give_up is not None and waited > give_up:
                    return None
                if give_up is None and waited > self.timeout and not self.stalled:
                    self.stalled = True
                    self.on_stall()
                await asyncio.sleep(RETRY_PAUSE)
                if gen != self._gen:
                    return None
        self._waiting.ok()
        if self.stalled and give_up is None:
            self.stalled = False
            event(logging.WARNING, "quorum-back", "replication: the stream takes records again after "
                  "%(seconds).1f s", seconds=time.monotonic() - t0)
            self.on_stall()
        self.published += 1
        return seq
