"""The primary's side of the stream: its records published in order, up to
WINDOW messages in flight at once, each message tried until JetStream
stores it.

Every try of a message carries the same message id (unique to this process
and message), so a try whose answer was lost is not stored twice; and the
stream sequence that must precede it (Nats-Expected-Last-Sequence), so only
a node whose queue is exactly the stream's can append: the fence. Only this
node appends while it leads, so the message after one expecting s expects
s + 1. A message sent while the one before it is in flight also names that
one's id (Nats-Expected-Last-Msg-Id): were the one before refused because
another writer appended a message, the sequence alone would let this one in
behind the other writer's. JetStream checks the id for duplicates before
either expectation, and applies a stream's messages in the order they came.

When a try in the window fails, every later one fails too or was stored
behind it: the publisher waits for the whole window's answers, then tries
its messages again one at a time, in order, with their ids and sequences
(every message before each is then stored: the sequence is fence enough);
the ones already stored answer as duplicates. Only a sequence refused while
every message before it is stored means another writer appended. What the
engine logs while the window is full goes out in the next message.

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
AFTER = "Nats-Expected-Last-Msg-Id"
WINDOW = 8                  # messages in flight at once (benchmarks/limits.py: the stream's rate by depth)


class _Flight:
    """One message: its headers are fixed at its first try."""
    __slots__ = ("part", "data", "records", "expected", "headers", "t0", "task")

    def __init__(self, part, data, records, expected, headers):
        self.part = part
        self.data = data
        self.records = records
        self.expected = expected
        self.headers = headers
        self.t0 = time.monotonic()
        self.task = None


class Publisher:
    def __init__(self, link, loop, timeout, expected, on_acked, on_deposed, on_stall, on_error):
        """expected(): the stream sequence the next message must follow when
        none is in flight.
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
        self.most_in_flight = 0
        self._prefix = uuid.uuid4().hex + "-"
        self._count = 0
        self._flights = collections.deque()
        self._settler = None
        self._retrying = False
        self._gen = 0
        self._waiting = Quiet("publish-waiting", "replication: a publish has waited %(seconds).1f s: "
                              "%(error)s")

    @property
    def busy(self):
        """Messages are queued or in flight."""
        return bool(self.queue) or bool(self._flights)

    @property
    def room(self):
        """Another message may go out now."""
        return len(self._flights) < WINDOW and not self._retrying

    @property
    def in_flight(self):
        return len(self._flights)

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
        """Queued messages out, while the window has room."""
        while self.queue and self.room:
            part, data, records = self._next_message()
            if self._flights:
                before = self._flights[-1]
                headers = self._headers(part, before.expected + 1)
                headers[AFTER] = before.headers["Nats-Msg-Id"]
                flight = _Flight(part, data, records, before.expected + 1, headers)
            else:
                expected = self.expected()
                flight = _Flight(part, data, records, expected, self._headers(part, expected))
            flight.task = self.loop.create_task(self._try(flight))
            self._flights.append(flight)
        self.most_in_flight = max(self.most_in_flight, len(self._flights))
        if self._flights and self._settler is None:
            self._settler = self.loop.create_task(self._settle(self._gen))

    def stop(self):
        """Drop what is queued; messages in flight are abandoned (the tasks
        check their generation after every wait, so nothing they do lands)."""
        self._gen += 1
        if self._settler is not None:
            self._settler.cancel()
            self._settler = None
        for flight in self._flights:
            flight.task.cancel()
        self._flights.clear()
        self.queue.clear()
        self.stalled = False
        self._retrying = False

    async def _try(self, flight):
        # The first try: its answer, or why it failed (Unavailable, Deposed).
        try:
            return await self.link.publish(flight.data, flight.headers)
        except (Unavailable, Deposed) as e:
            return e

    async def _settle(self, gen):
        # The answers, in order: each stored message acknowledged; at a failed
        # one, the window tried again one message at a time.
        try:
            while self._flights and gen == self._gen:
                flight = self._flights[0]
                answer = await flight.task
                if gen != self._gen:
                    return
                if isinstance(answer, Exception):
                    await self._retry_window(gen)
                    continue
                self._stored(self._flights.popleft(), answer)
                self.send()
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
                self._settler = None
                self._retrying = False

    async def _retry_window(self, gen):
        self._retrying = True
        await asyncio.wait([flight.task for flight in self._flights])
        while self._flights and gen == self._gen:
            flight = self._flights[0]
            answer = flight.task.result()
            if isinstance(answer, Exception):
                self.retries += 1
                self._waiting.failed(seconds=time.monotonic() - flight.t0, error=str(answer) or "refused")
                headers = {k: v for k, v in flight.headers.items() if k != AFTER}
                answer = await self._publish(gen, headers, flight.data, flight.t0)
                if answer is None or gen != self._gen:
                    return
            self._stored(self._flights.popleft(), answer)
        self._retrying = False
        self.send()

    def _stored(self, flight, seq):
        self.published += 1
        self.on_acked(flight.part, len(flight.data), seq, flight.records)

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

    def _headers(self, part, expected):
        self._count += 1
        return {"Nats-Msg-Id": self._prefix + str(self._count),
                "Nats-Expected-Last-Sequence": str(expected), PART_HEADER: str(part)}

    async def fence(self, part, give_up):
        """Publish an empty message of `part` expecting the stream to end where
        this node's queue does (nothing in flight): its sequence, or None after
        `give_up` seconds without an answer. Raises Deposed."""
        seq = await self._publish(self._gen, self._headers(part, self.expected()), b"", time.monotonic(),
                                  give_up)
        if seq is not None:
            self.published += 1
        return seq

    async def _publish(self, gen, headers, data, t0, give_up=None):
        # One message tried until stored (its sequence), or None once the
        # generation changed or `give_up` seconds passed since t0. Raises Deposed.
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
        return seq
