"""A standby's side of the stream: its messages, in order, handed to
apply(seq, part, data, msg_id, after) as the stream grows (an ordered push
consumer); apply returns False for a message that does not follow on.

A message that does not follow the last one applied (the stream was
purged past where this node had got to) sets `gap`: the node then rebuilds
its queue from what the stream still holds. A consumer that makes no
progress for STUCK seconds while the stream is ahead is made again.
"""
import logging
import time

from fastbean.logs import event

STUCK = 3.0


class Follower:
    def __init__(self, link, apply):
        self.link = link
        self.apply = apply
        self.applied = 0            # stream sequence of the last message applied
        self.pending = 0            # messages the stream held after it, when it was sent
        self.stored_at = 0.0        # when the stream stored it (time.time(), the leader's clock)
        self.gap = False
        self.progress = time.monotonic()
        self._sub = None
        self._gen = 0

    @property
    def following(self):
        return self._sub is not None

    async def start(self, applied):
        """Follow from the message after `applied`."""
        await self.stop()
        self.applied = applied
        self.gap = False
        self.progress = time.monotonic()
        gen = self._gen
        sub = await self.link.follow(applied, lambda *message: self._on_message(gen, *message))
        if gen == self._gen:
            self._sub = sub
        else:
            await self.link.unfollow(sub)

    async def stop(self):
        self._gen += 1
        sub, self._sub = self._sub, None
        await self.link.unfollow(sub)

    def stuck(self):
        return time.monotonic() - self.progress > STUCK

    def lag(self):
        """How far behind the stream this standby is, in seconds: the age of
        the last message it applied while more followed it (those were
        stored after it), 0 once it has applied all it was sent."""
        if not self.following or not self.pending:
            return 0.0
        return max(0.0, time.time() - self.stored_at)

    async def _on_message(self, gen, seq, part, data, msg_id, after, pending, stored_at):
        if gen != self._gen or self.gap or seq <= self.applied:
            return                  # delivered again after a consumer reset
        if self.applied and seq != self.applied + 1:
            event(logging.WARNING, "stream-gap", "replication: message %(seq)d follows %(applied)d: "
                  "the stream was purged past this node", seq=seq, applied=self.applied)
            self.gap = True
            return
        if self.apply(seq, part, data, msg_id, after) is False:
            self.gap = True
            return
        self.applied = seq
        self.pending, self.stored_at = pending, stored_at
        self.progress = time.monotonic()
