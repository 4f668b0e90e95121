"""The primary's side of the stream: its records published in order, up to
WINDOW messages in flight at once, each message tried until it is stored
where it belongs.

What is queued goes out at once when nothing is in flight; while something
is, the next message goes out only when the queue holds as many bytes as the
last one sent. Where NATS's own CPU is the limit (its servers beside the
node), messages stay as large as with one in flight, and each costs NATS the
same whatever it holds; where the round trip is (NATS across a network), the
window opens as the load grows, one message per last one's worth of puts.

The stream is a chain: every message names the message before it in the
chain (AFTER_HEADER, the predecessor's Nats-Msg-Id), and readers apply a
message only if it names the last one they applied (log.py); any other is an
orphan, skipped by every reader alike. A writer's first message (its fence)
names the last message it applied as a standby. So two writers can never
both extend the chain: the first message stored after a given one that
names it wins, and whatever else names it is an orphan. This is the fence;
the stream's own check, Nats-Expected-Last-Sequence, keeps the chain free of
gaps where all goes well. (JetStream's checks cannot do it alone: a deposed
writer's message in flight expects the sequence after its predecessor's,
which a new writer's fence can make true, and it lands behind the fence;
Nats-Expected-Last-Msg-Id is checked on each replica as it applies, against
state a replica that caught up from a snapshot lacks.)

A message is acknowledged when its answer puts it right after the last one
acknowledged and it names that one. Otherwise (no answer, a refusal, or a
copy stored elsewhere) the publisher waits for the window's answers, then,
for each message in turn, reads the stream past the last acknowledged one:
the first message there that names it is this message (acknowledged) or
another writer's (deposed); if there is none, only orphans, the message is
sent again with a new id, expecting the stream's end. A stream purged past
the chain's end was purged by a writer after this one: deposed too. Ids are
never reused, so nothing depends on JetStream's duplicate window. A fence
holds the window shut, and one that gave up is looked for by the next.

A message that waits longer than --replicate-timeout makes the publisher
"stalled" (replication/ then stops serving clients); it goes on trying.
"""
import asyncio
import collections
import logging
import time
import uuid

from fastbean.logs import event
from fastbean.replication.link import AFTER_HEADER, PART_HEADER, Deposed, Quiet, Unavailable

RETRY_PAUSE = 0.05          # seconds between tries of one message
WINDOW = 8                  # messages in flight at once


class _Flight:
    """One message and its latest try."""
    __slots__ = ("part", "data", "records", "ids", "after", "expected", "t0", "task")

    def __init__(self, part, data, records):
        self.part = part
        self.data = data
        self.records = records
        self.ids = []           # every try's message id, the latest last
        self.after = None       # the message id the latest try names
        self.expected = 0       # the stream sequence the first try expected before it
        self.t0 = time.monotonic()
        self.task = None


class Publisher:
    def __init__(self, link, loop, timeout, chain, on_acked, on_orphans, on_deposed, on_stall, on_error):
        """chain(): (stream sequence, message id) of the last message in the
        chain: what the next message must follow when none is in flight.
        on_acked(part, bytes, seq, records, id): a message is stored as seq;
        it held the engine's records up to `records` (0: not the last piece).
        on_orphans(seq): the stream up to seq past the chain's end holds only
        orphans. on_deposed(): another writer extended the chain.
        on_stall(): stalled changed. on_error(why): publishing failed in a
        way no retry mends."""
        self.link = link
        self.loop = loop
        self.timeout = timeout
        self.chain = chain
        self.on_acked = on_acked
        self.on_orphans = on_orphans
        self.on_deposed = on_deposed
        self.on_stall = on_stall
        self.on_error = on_error
        self.max_payload = 1 << 20
        self.queue = collections.deque()    # [part, records bytes, engine record number or 0]
        self.queued = 0                     # bytes in the queue
        self.stalled = False
        self.published = 0
        self.retries = 0
        self.orphans = 0                    # orphans found past the chain's end
        self.most_in_flight = 0
        self._prefix = uuid.uuid4().hex + "-"
        self._count = 0
        self._flights = collections.deque()
        self._last_size = 0         # bytes of the last message sent
        self._settler = None
        self._mending = False
        self._fence = None          # a fence being placed: kept until it is, its tries' ids with it
        self._deposed = False       # nothing goes out until stop() (the node rebuilds)
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
        return len(self._flights) < WINDOW and not self._mending and self._fence is None and not self._deposed

    @property
    def in_flight(self):
        return len(self._flights)

    def push(self, part, data, records=0):
        self.queue.append([part, data, records])
        self.queued += len(data)

    def mark(self, records):
        """The last piece pushed ends the engine's records up to `records`."""
        self.queue[-1][2] = records

    def send(self):
        """Queued messages out, while the window has room."""
        while self.queue and self.room and (not self._flights or self.queued >= self._last_size):
            flight = _Flight(*self._next_message())
            self._last_size = len(flight.data)
            if self._flights:
                before = self._flights[-1]
                expected, after = before.expected + 1, before.ids[-1]
            else:
                expected, after = self.chain()
            flight.expected = expected
            headers = self._headers(flight, flight.part, expected, after)
            flight.task = self.loop.create_task(self._try(flight, headers))
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
        self.queued = 0
        self.stalled = False
        self._mending = False
        self._fence = None
        self._deposed = False

    def _headers(self, flight, part, expected, after):
        self._count += 1
        msg_id = self._prefix + str(self._count)
        flight.ids.append(msg_id)
        flight.after = after
        headers = {"Nats-Msg-Id": msg_id, "Nats-Expected-Last-Sequence": str(expected), PART_HEADER: str(part)}
        if after is not None:
            headers[AFTER_HEADER] = after
        return headers

    async def _try(self, flight, headers):
        # The first try: its stream sequence, or why it failed (Unavailable,
        # Deposed: the expected sequence did not hold).
        try:
            return await self.link.publish(flight.data, headers)
        except (Unavailable, Deposed) as e:
            return e

    async def _settle(self, gen):
        # The answers, in order: each message acknowledged once it is where
        # it belongs; at the first that is not, the window mended.
        try:
            while self._flights and gen == self._gen:
                flight = self._flights[0]
                answer = await flight.task
                if gen != self._gen:
                    return
                if not self._in_place(flight, answer):
                    await self._mend(gen)
                    continue
                self._stored(self._flights.popleft(), answer, flight.ids[-1])
                self.send()
        except Deposed:
            if gen == self._gen:
                self._settler = None
                self.stop()
                self._deposed = True
                self.on_deposed()
        except Exception as e:
            event(logging.ERROR, "publish-failed", "replication: publishing failed: %(error)s",
                  error=str(e) or type(e).__name__, exc_info=True)
            if gen == self._gen:
                self.on_error("publishing failed")
        finally:
            if gen == self._gen:
                self._settler = None
                self._mending = False

    def _in_place(self, flight, answer):
        # Stored right after the chain's end, naming it.
        seq, last_id = self.chain()
        return not isinstance(answer, Exception) and answer == seq + 1 and flight.after == last_id

    async def _mend(self, gen):
        # Every message of the window put in its place, one at a time.
        self._mending = True
        await asyncio.wait([flight.task for flight in self._flights])
        while self._flights and gen == self._gen:
            flight = self._flights[0]
            answer = flight.task.result()
            if self._in_place(flight, answer):
                placed = answer, flight.ids[-1]
            else:
                placed = await self._place(gen, flight)
                if placed is None or gen != self._gen:
                    return
            self._stored(self._flights.popleft(), *placed)
        self._mending = False
        self.send()

    async def _place(self, gen, flight, give_up=None):
        # flight stored right after the chain's end: (its sequence, the id of
        # the try stored there), or None once the generation changed or
        # `give_up` s passed. Raises Deposed.
        while gen == self._gen:
            try:
                placed = await self._find(flight)
                if placed is None:
                    expected, after = self.chain()
                    self.retries += bool(flight.ids)      # a fence's first try is not one
                    headers = self._headers(flight, flight.part, expected, after)
                    try:
                        seq = await self.link.publish(flight.data, headers)
                    except Deposed:
                        raise Unavailable("appended to meanwhile") from None
                    if seq != expected + 1:
                        raise RuntimeError("the stream stored message %s as %d, not %d"
                                           % (flight.ids[-1], seq, expected + 1))
                    placed = seq, flight.ids[-1]
                break
            except Unavailable as e:
                if gen != self._gen:
                    return None
                waited = time.monotonic() - flight.t0
                self._waiting.failed(seconds=waited, error=str(e))
                if give_up is not None and waited > give_up:
                    return None
                if give_up is None and waited > self.timeout and not self.stalled:
                    self.stalled = True
                    self.on_stall()
                await asyncio.sleep(RETRY_PAUSE)
        else:
            return None
        self._waiting.ok()
        if self.stalled and give_up is None:
            self.stalled = False
            event(logging.WARNING, "quorum-back", "replication: the stream takes records again after "
                  "%(seconds).1f s", seconds=time.monotonic() - flight.t0)
            self.on_stall()
        return placed

    async def _find(self, flight):
        # Past the chain's end, the first message that names it is one of
        # flight's tries: (its sequence, its id), so long as no other
        # writer's message follows it in the chain; or another writer's:
        # Deposed. With none, only orphans, the chain's end moves past them
        # (None). Raises Unavailable.
        seq, last_id = self.chain()
        first, last, _ = await self.link.last_seq()
        if last > seq and first > seq + 1:
            raise Deposed()         # purged past this node's chain end: only a writer after it purges
        placed, end = None, last_id
        own = {msg_id for other in self._flights for msg_id in other.ids}
        for at in range(seq + 1, last + 1):
            found = await self.link.message(at)
            if found is None:
                raise Deposed()     # the same, purged meanwhile
            msg_id, after = found
            if end is not None and after is not None and after != end:
                if placed is None:
                    self.orphans += 1   # as a reader finds it (log.py: apply)
                continue
            if placed is None and msg_id in flight.ids:
                placed = at, msg_id     # a try stored, its answer lost
            elif placed is None or msg_id not in own:
                raise Deposed()         # another writer's, maybe built on this node's try
            end = msg_id
        if placed is None and last > seq:
            self.on_orphans(last)
        return placed

    def _stored(self, flight, seq, msg_id):
        self.published += 1
        self.on_acked(flight.part, len(flight.data), seq, flight.records, msg_id)

    def _next_message(self):
        # the queue's first pieces of one part, as one message
        part, data, records = self.queue.popleft()
        self.queued -= len(data)
        if self.queue and self.queue[0][0] == part:
            pieces = [data]
            size = len(data)
            while (self.queue and self.queue[0][0] == part
                   and size + len(self.queue[0][1]) <= self.max_payload):
                _, more, more_records = self.queue.popleft()
                self.queued -= len(more)
                pieces.append(more)
                size += len(more)
                records = max(records, more_records)
            data = b"".join(pieces)
        return part, data, records

    async def fence(self, part, give_up):
        """Append an empty message of `part` to the chain's end (nothing in
        flight; none goes out meanwhile): (its sequence, its id), or None
        after `give_up` seconds without an answer; a try of it may still be
        stored, and the next fence looks for it. Raises Deposed."""
        gen = self._gen
        self._deposed = False       # a takeover after one lost, or a resume: a new start
        if self._fence is None or self._fence.part != part:
            self._fence = _Flight(part, b"", 0)
        self._fence.t0 = time.monotonic()
        try:
            placed = await self._place(gen, self._fence, give_up)
        except Deposed:
            if gen == self._gen:
                self._fence = None
                self._deposed = True
            raise
        if placed is not None and gen == self._gen:
            self._fence = None
            self.published += 1
        return placed
