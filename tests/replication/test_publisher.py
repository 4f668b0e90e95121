"""The publisher's window and its chain, against a model of one stream.

The model stores each publish in the order it was sent (one connection, one
stream leader) if its expected last sequence holds, and answers duplicates
of an id it holds with that id's sequence; answers come back in any order,
some are lost, some publishes never arrive. Two other writers may append:
a stale one (a deposed primary whose messages were in flight) whose
messages name a predecessor not at the chain's end, and a live one (a new
primary) whose fence names the chain's last message. Readers keep the chain
as log.py does. The test checks what the fence promises: every message of
this node's acknowledged is in the chain, in order, each once; the chain
holds all it published unless a live writer took over, and then this node
says it was deposed; a stale writer never deposes it. The real stream is
tested in test_faults.py and test_replication.py."""
import asyncio
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastbean.replication import publisher as publisher_module
from fastbean.replication.link import AFTER_HEADER, Deposed, Unavailable
from fastbean.replication.publisher import WINDOW, Publisher

FATES = ("ok", "lost", "answer-lost", "slow")


class Stream:
    def __init__(self):
        self.messages = []      # (writer, message id, after, data)
        self.ids = {}           # message id -> sequence
        self.first = 1          # messages below were purged

    def store(self, writer, data, headers):
        msg_id = headers["Nats-Msg-Id"]
        if msg_id in self.ids:
            return self.ids[msg_id]
        if int(headers["Nats-Expected-Last-Sequence"]) != len(self.messages):
            raise Deposed()     # as link.py reads JetStream's 10071
        self.messages.append((writer, msg_id, headers.get(AFTER_HEADER), data))
        self.ids[msg_id] = len(self.messages)
        return len(self.messages)

    def chain(self):
        """The sequences of the valid messages, as every reader finds them."""
        valid, last, chained = [], None, False
        for seq, (_, msg_id, after, _) in enumerate(self.messages, 1):
            if chained and after is not None and after != last:
                continue
            valid.append(seq)
            last, chained = msg_id, True
        return valid

    def append(self, writer, after):
        n = len(self.messages)
        self.messages.append((writer, "%s-%d" % (writer, n), after, b"?"))
        self.ids["%s-%d" % (writer, n)] = n + 1


class Link:
    """Publishes reach the model in the order they are sent; fates[k] is what
    becomes of the k-th (then "ok"); just before the k-th arrives, the
    other writers in others[k] append."""

    def __init__(self, stream, fates, others, rng):
        self.stream = stream
        self.fates = list(fates)
        self.others = others
        self.rng = rng
        self.sent = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self.sizes = []         # each publish's size, and how many were in flight as it went
        self.purge_at = {}      # k: before the k-th publish, the stream is purged below its end

    async def publish(self, data, headers):
        k = self.sent
        self.sent += 1
        fate = self.fates[k] if k < len(self.fates) else "ok"
        self.sizes.append((len(data), self.in_flight))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            for writer in self.others.get(k, ()):
                valid = self.stream.chain()
                last = self.stream.messages[valid[-1] - 1][1] if valid else None
                self.stream.append(writer, last if writer == "live" else "gone")
            if k in self.purge_at:
                self.stream.first = len(self.stream.messages)
            answer = None
            if fate != "lost":
                try:
                    answer = self.stream.store("node", data, headers)
                except Deposed as e:
                    answer = e
            await asyncio.sleep(self.rng.random() * (0.004 if fate == "slow" else 0.001))
            if fate in ("lost", "answer-lost"):
                raise Unavailable("no answer")
            if isinstance(answer, Exception):
                raise answer
            return answer
        finally:
            self.in_flight -= 1

    async def last_seq(self):
        await asyncio.sleep(0)
        n = len(self.stream.messages)
        return self.stream.first, n, n - self.stream.first + 1

    async def message(self, seq):
        await asyncio.sleep(0)
        if not self.stream.first <= seq <= len(self.stream.messages):
            return None
        _, msg_id, after, _ = self.stream.messages[seq - 1]
        return msg_id, after


async def run(pieces, fates, others, seed, max_payload, purge_at=()):
    rng = random.Random(seed)
    stream = Stream()
    stream.append("fence", None)            # this node's takeover: the chain starts there
    link = Link(stream, fates, others, rng)
    link.purge_at = set(purge_at)
    loop = asyncio.get_running_loop()
    acked, deposed, errors, stalls = [], [], [], []
    state = {"applied": 1, "last": stream.messages[0][1], "chained": True}

    def chain():
        return state["applied"], state["last"] if state["chained"] else None

    def on_acked(part, size, seq, records, msg_id):
        assert part == 1
        state.update(applied=seq, last=msg_id, chained=True)
        acked.append((seq, msg_id, size, records))

    def on_orphans(seq):
        state["applied"] = max(state["applied"], seq)

    pub = Publisher(link, loop, 0.005, chain, on_acked, on_orphans, lambda: deposed.append(True),
                    lambda: stalls.append(pub.stalled), errors.append)
    pub.max_payload = max_payload
    for n, piece in enumerate(pieces, 1):
        pub.push(1, piece)
        pub.mark(n)
        if pub.room:
            pub.send()
        if rng.random() < 0.5:
            await asyncio.sleep(0)
    for _ in range(20000):
        if not pub.busy or deposed or errors:
            break
        await asyncio.sleep(0.001)
    pub.stop()
    return stream, link, pub, acked, deposed, errors, stalls


def check(pieces, fates=(), others=None, seed=0, max_payload=8, purge_at=()):
    others = others or {}
    stream, link, pub, acked, deposed, errors, stalls = asyncio.run(
        run(pieces, fates, others, seed, max_payload, purge_at))
    assert not errors
    valid = stream.chain()
    assert valid[0] == 1
    mine = [seq for seq in valid if stream.messages[seq - 1][0] == "node"]
    # every acknowledgement is the chain's next message of this node, in order
    assert [seq for seq, _, _, _ in acked] == mine[:len(acked)]
    for seq, msg_id, size, _ in acked:
        assert stream.messages[seq - 1][1] == msg_id and len(stream.messages[seq - 1][3]) == size
    records = [r for _, _, _, r in acked if r]
    assert records == sorted(records)
    stored = b"".join(stream.messages[seq - 1][3] for seq in mine)
    live = [seq for seq in valid if stream.messages[seq - 1][0] == "live"]
    if not live:
        assert not deposed, "deposed with no other live writer"
        assert stored == b"".join(pieces)
        assert acked[-1][3] == len(pieces)
        assert stalls == [] or stalls[-1] is False
    else:
        # nothing of this node's is in the chain after the live writer's fence
        assert all(seq < live[0] for seq in mine)
        assert b"".join(pieces).startswith(stored)
        assert deposed == [True] or stored == b"".join(pieces)
    return link, pub, stream


def test_messages_go_out_in_a_window_and_are_acknowledged_in_order():
    pieces = [b"%04d" % i for i in range(200)]
    link, pub, _ = check(pieces, max_payload=4)
    assert link.most_in_flight == WINDOW == pub.most_in_flight
    assert pub.published == 200 and pub.retries == 0


def test_while_messages_are_in_flight_the_next_waits_for_as_many_bytes():
    # A large message goes out, then small pieces come: they go as one
    # message as large as it, not one message each, while it is in flight.
    pieces = [b"x" * 40] + [b"y" * 4] * 60
    link, pub, _ = check(pieces, max_payload=64)
    assert link.sizes[0] == (40, 0)
    for (size, in_flight), (before, _) in zip(link.sizes[1:], link.sizes):
        assert size >= before or in_flight == 0, link.sizes
    assert max(n for _, n in link.sizes) >= 1       # the window opened all the same
    assert len(link.sizes) <= 1 + (60 * 4) // 40 + 1


def test_a_lost_publish_in_the_window_is_sent_again_with_the_ones_after_it():
    pieces = [b"%04d" % i for i in range(40)]
    link, pub, _ = check(pieces, ["ok"] * 3 + ["lost"], max_payload=4)
    assert pub.retries >= 1 and link.sent > 40


def test_an_answer_lost_is_found_in_the_stream():
    pieces = [b"%04d" % i for i in range(40)]
    link, pub, stream = check(pieces, ["ok"] * 5 + ["answer-lost"], max_payload=4)
    assert len(stream.messages) == 41       # the fence and 40: found, not sent again


def test_a_stale_writers_messages_are_orphans_and_do_not_depose():
    # A deposed primary's messages land in the middle of the window: the
    # ones behind them are refused or stored out of the chain, and go again.
    pieces = [b"%04d" % i for i in range(40)]
    link, pub, stream = check(pieces, others={3: ["stale"], 4: ["stale", "stale"]}, max_payload=4)
    assert pub.orphans >= 3 and len(stream.chain()) == 41


def test_a_live_writer_deposes_once_the_messages_before_are_placed():
    pieces = [b"%04d" % i for i in range(40)]
    check(pieces, ["ok"] * 3 + ["lost"], others={6: ["live"]}, max_payload=4)


def test_a_purge_past_the_chain_end_is_another_writers():
    # Another node took over (its fence names this node's last message) and
    # purged the stream up to its own messages: this node's next publish is
    # refused, and it must not take what it finds for orphans.
    pieces = [b"%04d" % i for i in range(10)]
    link, pub, stream = check(pieces, ["ok"] * 3 + ["lost"], others={5: ["live", "stale"]}, purge_at=(5,),
                              max_payload=4)
    assert stream.first > 1


def fence_given_up():
    # A stream holding one message, a publisher that has applied it, and
    # a link that loses the next answer: (the stream, the publisher).
    stream = Stream()
    stream.append("fence", None)
    link = Link(stream, ["answer-lost"], {}, random.Random(1))
    state = {"applied": 1, "last": stream.messages[0][1]}
    pub = Publisher(link, asyncio.get_running_loop(), 5.0, lambda: (state["applied"], state["last"]),
                    None, lambda seq: state.update(applied=seq), None, lambda: None, None)
    return stream, pub


def test_a_fence_given_up_is_found_by_the_next_one_and_holds_the_window():
    # The fence's answer is lost and it gives up; its try was stored. The
    # next fence (a resume after a suspension) finds it rather than taking
    # it for another writer's; while a fence is out, nothing else goes.
    async def fences():
        stream, pub = fence_given_up()
        assert await pub.fence(7, give_up=0.0) is None and not pub.room
        second = asyncio.ensure_future(pub.fence(7, give_up=5.0))
        await asyncio.sleep(0)
        pub.push(7, b"records")
        assert not pub.room and pub.in_flight == 0
        placed = await second
        assert placed == (2, stream.messages[1][1]) and pub.room and len(stream.messages) == 2
    asyncio.run(fences())


def test_a_fence_given_up_that_another_writer_built_on_deposes():
    # The fence's try was stored but its answer lost; meanwhile another node
    # applied it, took over and wrote after it. The next fence finds its try,
    # and what follows it: another writer's, so this node is deposed.
    async def fences():
        stream, pub = fence_given_up()
        assert await pub.fence(7, give_up=0.0) is None
        stream.append("live", stream.messages[1][1])
        stream.append("live", stream.messages[2][1])
        with pytest.raises(Deposed):
            await pub.fence(7, give_up=5.0)
        assert not pub.room
    asyncio.run(fences())


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.binary(min_size=1, max_size=6), min_size=1, max_size=60),
       fates=st.lists(st.sampled_from(FATES), max_size=80),
       others=st.dictionaries(st.integers(0, 80), st.lists(st.sampled_from(("stale", "live")), min_size=1,
                                                           max_size=3), max_size=4),
       seed=st.integers(0, 2 ** 32), max_payload=st.sampled_from((1, 8, 64)))
def test_the_chain_keeps_the_fence(pieces, fates, others, seed, max_payload):
    check(pieces, fates, others, seed, max_payload)


def setup_module():
    publisher_module.RETRY_PAUSE, setup_module.pause = 0.001, publisher_module.RETRY_PAUSE


def teardown_module():
    publisher_module.RETRY_PAUSE = setup_module.pause
