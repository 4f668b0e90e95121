"""The publisher's window against a model of JetStream's rules for one stream.

The model applies each publish in the order it was sent (one connection, one
stream leader), checking the message id first, then the expected last
sequence, as nats-server does; its answers come back in any order, some are
lost, and some publishes never reach it. The test checks what the fence
promises: every message stored exactly once, in order; every acknowledgement
names the sequence that holds that message; and "deposed" only once another
writer appended. The real stream is tested in test_faults.py and
test_replication.py."""
import asyncio
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from fastbean.replication import publisher as publisher_module
from fastbean.replication.link import Deposed, Unavailable
from fastbean.replication.publisher import WINDOW, Publisher

FATES = ("ok", "lost", "answer-lost", "slow")


class Stream:
    def __init__(self):
        self.messages = []      # (writer, message id, data)
        self.ids = {}           # message id -> sequence

    def store(self, data, headers):
        msg_id = headers["Nats-Msg-Id"]
        if msg_id in self.ids:
            return self.ids[msg_id]
        if int(headers["Nats-Expected-Last-Sequence"]) != len(self.messages):
            raise Deposed()
        after = headers.get("Nats-Expected-Last-Msg-Id")
        if after is not None and (not self.messages or self.messages[-1][1] != after):
            raise Unavailable("wrong last msg ID")   # as link.py reads JetStream's 10070
        self.messages.append(("node", msg_id, data))
        self.ids[msg_id] = len(self.messages)
        return len(self.messages)

    def foreign_append(self):
        self.messages.append(("other", "other-%d" % len(self.messages), b"?"))


class Link:
    """The publishes reach the model in the order they are sent; fates[k] is
    what becomes of the k-th publish (then "ok"); foreign_at: another writer
    appends just before that publish arrives."""

    def __init__(self, stream, fates, foreign_at, rng):
        self.stream = stream
        self.fates = list(fates)
        self.foreign_at = foreign_at
        self.rng = rng
        self.sent = 0
        self.in_flight = 0
        self.most_in_flight = 0

    async def publish(self, data, headers):
        k = self.sent
        self.sent += 1
        fate = self.fates[k] if k < len(self.fates) else "ok"
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if k == self.foreign_at:
                self.stream.foreign_append()
            answer = None
            if fate != "lost":
                try:
                    answer = self.stream.store(data, headers)
                except (Deposed, Unavailable) as e:
                    answer = e
            await asyncio.sleep(self.rng.random() * (0.004 if fate == "slow" else 0.001))
            if fate in ("lost", "answer-lost"):
                raise Unavailable("no answer")
            if isinstance(answer, Exception):
                raise answer
            return answer
        finally:
            self.in_flight -= 1


async def run(pieces, fates, foreign_at, seed, max_payload):
    rng = random.Random(seed)
    stream = Stream()
    link = Link(stream, fates, foreign_at, rng)
    loop = asyncio.get_running_loop()
    acked, deposed, errors, stalls = [], [], [], []
    applied = [0]

    def on_acked(part, size, seq, records):
        assert part == 1
        applied[0] = seq
        acked.append((seq, size, records))

    pub = Publisher(link, loop, 0.005, lambda: applied[0], on_acked, lambda: deposed.append(True),
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


def check(pieces, fates, foreign_at, seed, max_payload):
    stream, link, pub, acked, deposed, errors, stalls = asyncio.run(
        run(pieces, fates, foreign_at, seed, max_payload))
    assert not errors
    # every acknowledgement names the message stored there, in order
    seqs = [seq for seq, _, _ in acked]
    assert seqs == sorted(set(seqs))
    for seq, size, _ in acked:
        writer, _, data = stream.messages[seq - 1]
        assert writer == "node" and len(data) == size
    records = [r for _, _, r in acked if r]
    assert records == sorted(records)
    # no message stored twice
    ids = [msg_id for writer, msg_id, _ in stream.messages if writer == "node"]
    assert len(ids) == len(set(ids))
    foreign = foreign_at is not None and foreign_at < link.sent
    if not foreign:
        assert not deposed
        assert b"".join(data for _, _, data in stream.messages) == b"".join(pieces)
        assert seqs == list(range(1, len(stream.messages) + 1))
        assert acked[-1][2] == len(pieces)
        assert stalls == [] or stalls[-1] is False
    else:
        # nothing of this node's follows the other writer's message; the
        # publisher says it was deposed unless all it had was stored before
        other = next(i for i, m in enumerate(stream.messages) if m[0] == "other")
        assert len(stream.messages) == other + 1
        assert all(seq <= other for seq in seqs)
        stored = b"".join(data for _, _, data in stream.messages[:other])
        if deposed:
            assert deposed == [True] and b"".join(pieces).startswith(stored)
        else:
            assert stored == b"".join(pieces) and acked[-1][2] == len(pieces)
    return link, pub


def test_messages_go_out_in_a_window_and_are_acknowledged_in_order():
    pieces = [b"%04d" % i for i in range(200)]
    link, pub = check(pieces, [], None, 1, 4)
    assert link.most_in_flight == WINDOW == pub.most_in_flight
    assert pub.published == 200 and pub.retries == 0


def test_a_lost_publish_in_the_window_is_sent_again_with_the_ones_after_it():
    pieces = [b"%04d" % i for i in range(40)]
    fates = ["ok"] * 3 + ["lost"] + ["ok"] * 50
    link, pub = check(pieces, fates, None, 2, 4)
    # the lost one and the window behind it, refused for its sequence, went again
    assert pub.retries >= WINDOW - 1


def test_an_answer_lost_is_a_duplicate_when_sent_again():
    pieces = [b"%04d" % i for i in range(40)]
    fates = ["ok"] * 5 + ["answer-lost"] + ["ok"] * 50
    link, pub = check(pieces, fates, None, 3, 4)
    assert pub.retries == 1


def test_another_writer_deposes_only_once_the_messages_before_are_stored():
    pieces = [b"%04d" % i for i in range(40)]
    # the 4th publish is lost and another writer appends before the 7th
    fates = ["ok"] * 3 + ["lost"] + ["ok"] * 50
    check(pieces, fates, 6, 4, 4)


def test_a_message_behind_a_refused_one_is_not_stored_after_another_writers():
    # Another writer appends first: the window's first message is refused
    # for its sequence, and the second one's sequence would now hold; the id
    # of the message before it (Nats-Expected-Last-Msg-Id) keeps it out.
    check([b"a", b"b"], [], 0, 0, 1)


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.binary(min_size=1, max_size=6), min_size=1, max_size=60),
       fates=st.lists(st.sampled_from(FATES), max_size=80),
       foreign_at=st.one_of(st.none(), st.integers(0, 80)),
       seed=st.integers(0, 2 ** 32), max_payload=st.sampled_from((1, 8, 64)))
def test_the_window_keeps_the_fence(pieces, fates, foreign_at, seed, max_payload):
    check(pieces, fates, foreign_at, seed, max_payload)


def setup_module():
    publisher_module.RETRY_PAUSE, setup_module.pause = 0.001, publisher_module.RETRY_PAUSE


def teardown_module():
    publisher_module.RETRY_PAUSE = setup_module.pause
