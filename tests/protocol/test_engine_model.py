"""The engine against a small pure-Python model of the protocol's semantics.

Hypothesis drives several connections through random commands; every reply
of the compiled engine (run in-process, sans-IO, with fake transports) must be
the one the model predicts. Time plays no part: no delays, TTRs far away.
"""
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fastbean.engine.core import Core
from tests.support.servers import FUZZ, EngineClient, parse_dict

TUBES = ["default", "a", "b", "c"]
URGENT = 1024


def document(reply):
    """The stats document of an `OK <bytes>` reply, as the shared parser reads it."""
    head, _, rest = reply.partition(b"\r\n")
    assert head.startswith(b"OK "), reply
    return parse_dict(rest[:int(head.split()[1])])


class ModelJob:
    def __init__(self, id, tube, pri, body):
        self.id, self.tube, self.pri, self.body = id, tube, pri, body
        self.state = "ready"
        self.owner = None
        self.origin = None            # the tube a retry limit dead-lettered it from
        self.reserves = self.releases = self.buries = self.kicks = 0


class ModelConn:
    def __init__(self):
        self.use = "default"
        self.watch = ["default"]


class Model:
    """beanstalkd's semantics, written as plainly as possible."""

    def __init__(self):
        self.jobs = {}
        self.next_id = 1
        self.tubes = ["default"]
        self.buried = {}              # tube -> [ids], oldest first
        self.keys = {}                # (tube, key) -> id of the live job put with it
        self.job_keys = {}            # id -> (key, cooldown)
        self.cooling = {}             # (tube, key) -> id deleted with a cooldown (never over here)
        self.limits = {}              # tube -> (retry limit, dead-letter tube or None)

    def forget(self, jid):
        # a job deleted: its key goes, or cools down
        j = self.jobs.pop(jid)
        if jid in self.job_keys:
            key, cool = self.job_keys.pop(jid)
            del self.keys[(j.tube, key)]
            if cool:
                self.cooling[(j.tube, key)] = jid

    def referenced(self, tube, conns):
        return (tube == "default" or any(j.tube == tube for j in self.jobs.values())
                or any(c.use == tube or tube in c.watch for c in conns))

    def touch_tube(self, tube):
        if tube not in self.tubes:
            self.tubes.append(tube)

    def gc(self, conns):
        # freed tubes leave list-tubes by swap-removal, as in beanstalkd
        for t in list(self.tubes):
            if not self.referenced(t, conns):
                i = self.tubes.index(t)
                last = self.tubes.pop()
                if i < len(self.tubes):
                    self.tubes[i] = last

    def ready_in(self, tubes):
        cands = [j for j in self.jobs.values() if j.state == "ready" and j.tube in tubes]
        return min(cands, key=lambda j: (j.pri, j.id)) if cands else None


def job_reply(word, j):
    return b"%s %d %d\r\n%s\r\n" % (word, j.id, len(j.body), j.body)


class EngineVsModel(RuleBasedStateMachine):
    @initialize()
    def setup(self):
        self.core = Core(max_job_size=8192, version=b"test")
        self.model = Model()
        self.conns = []
        for _ in range(3):
            self._open()

    def _open(self):
        self.conns.append((EngineClient(self.core), ModelConn()))

    def send(self, i, data):
        # Each command is a loop turn of its own: the read may be held back
        # (fair turns) and then runs at the turn's end.
        c, _ = self.conns[i]
        c.send(data)
        self.core.end_turn()
        return c.take()

    def mconns(self):
        return [m for _, m in self.conns]

    idx = st.integers(0, 2)
    pri = st.sampled_from([0, 1, 5, 1023, 1024, 4294967295])
    tube = st.sampled_from(TUBES)

    # mostly small bodies; now and then one big enough for the engine's
    # other paths (reads taken apart after a big put, replies in a chunk of
    # their own)
    body = st.one_of(st.binary(max_size=12),
                     st.builds(lambda n, b: bytes([b]) * n, st.integers(4094, 4200),
                               st.integers(0, 255)))

    @rule(i=idx, pri=pri, body=body)
    def put(self, i, pri, body):
        m = self.mconns()[i]
        got = self.send(i, b"put %d 0 1000 %d\r\n%s\r\n" % (pri, len(body), body))
        j = ModelJob(self.model.next_id, m.use, pri, body)
        self.model.jobs[j.id] = j
        self.model.next_id += 1
        assert got == b"INSERTED %d\r\n" % j.id

    @rule(i=idx)
    def reserve_now(self, i):
        m = self.mconns()[i]
        got = self.send(i, b"reserve-with-timeout 0\r\n")
        j = self.model.ready_in(m.watch)
        if j is None:
            assert got == b"TIMED_OUT\r\n"
        else:
            j.state, j.owner = "reserved", i
            j.reserves += 1
            assert got == job_reply(b"RESERVED", j)

    @rule(i=idx, n=st.integers(1, 4))
    def reserve_batch(self, i, n):
        # without a timeout: what is ready, in reserve order, up to n
        m = self.mconns()[i]
        got = self.send(i, b"reserve-batch %d\r\n" % n)
        taken = []
        while len(taken) < n:
            j = self.model.ready_in(m.watch)
            if j is None:
                break
            j.state, j.owner = "reserved", i
            j.reserves += 1
            taken.append(j)
        assert got == b"RESERVED_BATCH %d\r\n" % len(taken) + b"".join(
            job_reply(b"RESERVED", j) for j in taken)

    def pick(self, data, ids):
        return data.draw(st.sampled_from(sorted(ids) + [self.model.next_id + 5]))

    @rule(i=idx, data=st.data())
    def reserve_job(self, i, data):
        jid = self.pick(data, self.model.jobs)
        got = self.send(i, b"reserve-job %d\r\n" % jid)
        j = self.model.jobs.get(jid)
        if j is None or j.state == "reserved":
            assert got == b"NOT_FOUND\r\n"
            return
        if j.state == "buried":
            self.model.buried[j.tube].remove(j.id)
        j.state, j.owner = "reserved", i
        j.reserves += 1
        assert got == job_reply(b"RESERVED", j)

    @rule(i=idx, data=st.data())
    def delete(self, i, data):
        jid = self.pick(data, self.model.jobs)
        got = self.send(i, b"delete %d\r\n" % jid)
        j = self.model.jobs.get(jid)
        if j is None or (j.state == "reserved" and j.owner != i):
            assert got == b"NOT_FOUND\r\n"
            return
        if j.state == "buried":
            self.model.buried[j.tube].remove(j.id)
        self.model.forget(jid)
        self.model.gc(self.mconns())
        assert got == b"DELETED\r\n"

    @rule(i=idx, data=st.data())
    def delete_batch(self, i, data):
        # each id as delete takes it, repeats and unknown ids included;
        # delete-each names the ids it did not delete
        ids = data.draw(st.lists(st.sampled_from(sorted(self.model.jobs) + [self.model.next_id + 5]),
                                 min_size=1, max_size=6))
        word = data.draw(st.sampled_from([b"delete-batch", b"delete-each"]))
        got = self.send(i, b"%s %s\r\n" % (word, b" ".join(b"%d" % j for j in ids)))
        deleted, missed = 0, []
        for jid in ids:
            j = self.model.jobs.get(jid)
            if j is None or (j.state == "reserved" and j.owner != i):
                missed.append(b" %d" % jid)
                continue
            if j.state == "buried":
                self.model.buried[j.tube].remove(j.id)
            self.model.forget(jid)
            deleted += 1
        self.model.gc(self.mconns())
        if word == b"delete-each":
            assert got == b"DELETED_EACH %d %d%s\r\n" % (deleted, len(missed), b"".join(missed))
        else:
            assert got == b"DELETED_BATCH %d %d\r\n" % (deleted, len(ids) - deleted)

    @rule(i=idx, pri=pri, data=st.data())
    def release(self, i, pri, data):
        jid = self.pick(data, self.model.jobs)
        got = self.send(i, b"release %d %d 0\r\n" % (jid, pri))
        j = self.model.jobs.get(jid)
        if j is None or j.state != "reserved" or j.owner != i:
            assert got == b"NOT_FOUND\r\n"
            return
        j.state, j.owner, j.pri = "ready", None, pri
        j.releases += 1
        limit, dead = self.model.limits.get(j.tube, (0, None))
        if limit and j.releases >= limit:           # buried, or moved to the dead-letter tube
            if dead is None or dead == j.tube:
                j.state = "buried"
                j.buries += 1
                self.model.buried.setdefault(j.tube, []).append(j.id)
            else:
                if jid in self.model.job_keys:      # its key stays behind, with no cooldown
                    del self.model.keys[(j.tube, self.model.job_keys.pop(jid)[0])]
                j.origin = j.tube
                j.tube = dead
                self.model.touch_tube(dead)
                self.model.gc(self.mconns())
        assert got == b"RELEASED\r\n"

    @rule(i=idx, limit=st.integers(0, 2), dead=st.sampled_from([None, "c", "a"]),
          default=st.booleans())
    def retry_limit(self, i, limit, dead, default):
        m = self.mconns()[i]
        if default:
            got = self.send(i, b"retry-limit default\r\n")
            self.model.limits.pop(m.use, None)
        else:
            got = self.send(i, b"retry-limit %d%s\r\n" % (limit, b" " + dead.encode() if dead else b""))
            self.model.limits[m.use] = (limit, dead)
        limit, dead = self.model.limits.get(m.use, (0, None))
        if not limit:
            assert got == b"RETRY_LIMIT 0\r\n"
        else:
            assert got == b"RETRY_LIMIT %d%s\r\n" % (limit, b" " + dead.encode() if dead else b"")

    @rule(i=idx, pri=pri, key=st.sampled_from(["x", "y"]), cool=st.sampled_from([0, 3600]))
    def put_keyed(self, i, pri, key, cool):
        m = self.mconns()[i]
        tag = b"idp:%s" % key.encode() + (b":%d" % cool if cool else b"")
        got = self.send(i, b"put %d 0 1000 1 %s\r\nk\r\n" % (pri, tag))
        name = (m.use, key)
        jid = self.model.next_id
        self.model.next_id += 1                     # taken at the put line, even when no job is made
        if name in self.model.keys:
            j = self.model.jobs[self.model.keys[name]]
            more = b""
            if pri < j.pri:
                j.pri = pri
                more = b" %d" % pri
            assert got == b"INSERTED %d %s%s\r\n" % (j.id, j.state.upper().encode(), more)
        elif name in self.model.cooling:
            assert got == b"INSERTED %d DELETED\r\n" % self.model.cooling[name]
        else:
            self.model.jobs[jid] = ModelJob(jid, m.use, pri, b"k")
            self.model.keys[name] = jid
            self.model.job_keys[jid] = (key, cool)
            assert got == b"INSERTED %d\r\n" % jid

    @rule(i=idx, t=tube, data=st.data())
    def move_job(self, i, t, data):
        # as it is, into t: its key too unless t has a live job with it; a
        # dead letter forgets its origin
        jid = self.pick(data, self.model.jobs)
        got = self.send(i, b"move-job %d %s\r\n" % (jid, t.encode()))
        j = self.model.jobs.get(jid)
        if j is None or j.state == "reserved":
            assert got == b"NOT_FOUND\r\n"
            return
        if t != j.tube:
            if j.state == "buried":
                self.model.buried[j.tube].remove(jid)
                self.model.buried.setdefault(t, []).append(jid)
            if jid in self.model.job_keys:
                key = self.model.job_keys[jid][0]
                del self.model.keys[(j.tube, key)]
                if (t, key) in self.model.keys:
                    del self.model.job_keys[jid]
                else:
                    self.model.keys[(t, key)] = jid
            j.tube, j.origin = t, None
            self.model.touch_tube(t)
            self.model.gc(self.mconns())
        assert got == b"MOVED\r\n"

    @rule(i=idx, pri=pri, data=st.data())
    def reprioritize_job(self, i, pri, data):
        jid = self.pick(data, self.model.jobs)
        got = self.send(i, b"reprioritize-job %d %d\r\n" % (jid, pri))
        j = self.model.jobs.get(jid)
        if j is None:
            assert got == b"NOT_FOUND\r\n"
            return
        j.pri = pri
        assert got == b"REPRIORITIZED\r\n"

    @rule(i=idx, pri=pri, data=st.data())
    def bury(self, i, pri, data):
        jid = self.pick(data, self.model.jobs)
        got = self.send(i, b"bury %d %d\r\n" % (jid, pri))
        j = self.model.jobs.get(jid)
        if j is None or j.state != "reserved" or j.owner != i:
            assert got == b"NOT_FOUND\r\n"
            return
        j.state, j.owner, j.pri = "buried", None, pri
        j.buries += 1
        self.model.buried.setdefault(j.tube, []).append(j.id)
        assert got == b"BURIED\r\n"

    @rule(i=idx, n=st.integers(0, 4))
    def kick(self, i, n):
        m = self.mconns()[i]
        got = self.send(i, b"kick %d\r\n" % n)
        ids = self.model.buried.get(m.use, [])[:n]
        for jid in ids:
            j = self.model.jobs[jid]
            j.state = "ready"
            j.kicks += 1
            self.model.buried[m.use].remove(jid)
        assert got == b"KICKED %d\r\n" % len(ids)

    @rule(i=idx, data=st.data())
    def kick_job(self, i, data):
        jid = self.pick(data, self.model.jobs)
        got = self.send(i, b"kick-job %d\r\n" % jid)
        j = self.model.jobs.get(jid)
        if j is None or j.state != "buried":
            assert got == b"NOT_FOUND\r\n"
            return
        self.model.buried[j.tube].remove(jid)
        j.state = "ready"
        j.kicks += 1
        assert got == b"KICKED\r\n"

    @rule(i=idx)
    def peek_ready(self, i):
        m = self.mconns()[i]
        got = self.send(i, b"peek-ready\r\n")
        j = self.model.ready_in([m.use])
        assert got == (b"NOT_FOUND\r\n" if j is None else job_reply(b"FOUND", j))

    @rule(i=idx)
    def peek_buried(self, i):
        m = self.mconns()[i]
        got = self.send(i, b"peek-buried\r\n")
        ids = self.model.buried.get(m.use)
        assert got == (job_reply(b"FOUND", self.model.jobs[ids[0]]) if ids else b"NOT_FOUND\r\n")

    @rule(i=idx, data=st.data())
    def stats_job(self, i, data):
        jid = self.pick(data, self.model.jobs)
        got = self.send(i, b"stats-job %d\r\n" % jid)
        j = self.model.jobs.get(jid)
        if j is None:
            assert got == b"NOT_FOUND\r\n"
            return
        fields = document(got)
        assert fields["tube"] == j.tube and fields["state"] == j.state
        assert fields["pri"] == j.pri and fields["reserves"] == j.reserves
        assert fields["releases"] == j.releases and fields["buries"] == j.buries
        assert fields["kicks"] == j.kicks
        assert self.core.job_origin(jid) == (j.origin.encode() if j.origin else None)

    @rule(i=idx, t=tube)
    def use(self, i, t):
        m = self.mconns()[i]
        got = self.send(i, b"use %s\r\n" % t.encode())
        self.model.touch_tube(t)
        m.use = t
        self.model.gc(self.mconns())
        assert got == b"USING %s\r\n" % t.encode()

    @rule(i=idx, t=tube)
    def watch(self, i, t):
        m = self.mconns()[i]
        got = self.send(i, b"watch %s\r\n" % t.encode())
        self.model.touch_tube(t)
        if t not in m.watch:
            m.watch.append(t)
        assert got == b"WATCHING %d\r\n" % len(m.watch)

    @rule(i=idx, t=tube)
    def ignore(self, i, t):
        m = self.mconns()[i]
        got = self.send(i, b"ignore %s\r\n" % t.encode())
        if t in m.watch:
            if len(m.watch) == 1:
                assert got == b"NOT_IGNORED\r\n"
                return
            k = m.watch.index(t)
            last = m.watch.pop()
            if k < len(m.watch):
                m.watch[k] = last
            self.model.gc(self.mconns())
        assert got == b"WATCHING %d\r\n" % len(m.watch)

    @rule(i=idx)
    def list_tubes(self, i):
        got = self.send(i, b"list-tubes\r\nlist-tubes-watched\r\n")
        m = self.mconns()[i]

        def doc(names):
            body = b"---\n" + b"".join(b"- %s\n" % n.encode() for n in names)
            return b"OK %d\r\n%s\r\n" % (len(body), body)
        assert got == doc(self.model.tubes) + doc(m.watch)

    @rule(i=idx, t=tube)
    def flush_tube(self, i, t):
        # every job of the tube goes, reserved ones too (tuber's flush-tube)
        got = self.send(i, b"flush-tube %s\r\n" % t.encode())
        gone = [jid for jid, j in self.model.jobs.items() if j.tube == t]
        for jid in gone:
            self.model.forget(jid)
        self.model.buried.pop(t, None)
        self.model.gc(self.mconns())
        assert got == b"FLUSHED %d\r\n" % len(gone)

    @rule(i=idx, t=tube)
    def flush_buried(self, i, t):
        got = self.send(i, b"flush-buried %s\r\n" % t.encode())
        gone = self.model.buried.pop(t, [])
        for jid in gone:
            self.model.forget(jid)
        self.model.gc(self.mconns())
        assert got == b"FLUSHED %d\r\n" % len(gone)

    @rule(i=idx, state=st.sampled_from(["ready", "buried", "reserved"]), count=st.integers(1, 3))
    def list_tube(self, i, state, count):
        # every page of the used tube, cursor to cursor: the jobs in the order
        # they leave the state
        t = self.mconns()[i].use
        rows, cursor = [], b"0"
        for _ in range(100):
            got = self.send(i, b"list-tube %s %s %d\r\n" % (state.encode(), cursor, count))
            head, *lines = got.split(b"\r\n")
            word, n, cursor = head.split()
            assert word == b"LISTED" and int(n) <= count and lines[int(n):] == [b""]
            rows += [tuple(int(v) for v in line.split()) for line in lines[:int(n)]]
            if cursor == b"0":
                break
        jobs = [j for j in self.model.jobs.values() if j.tube == t and j.state == state]
        if state == "ready":
            jobs.sort(key=lambda j: (j.pri, j.id))
        elif state == "buried":
            jobs = [self.model.jobs[jid] for jid in self.model.buried.get(t, [])]
        else:                   # by time left: the order of the reservations, not modelled
            rows.sort()
            jobs.sort(key=lambda j: j.id)
        assert [(r[0], r[1], r[4]) for r in rows] == [(j.id, j.pri, len(j.body)) for j in jobs]

    @precondition(lambda self: len(self.conns) > 1)
    @rule(i=idx)
    def reconnect(self, i):
        # close connection i (its reservations go back to ready), open a fresh one
        c, _ = self.conns[i]
        c.conn.gone()
        for j in self.model.jobs.values():
            if j.state == "reserved" and j.owner == i:
                j.state, j.owner = "ready", None
        self.conns[i] = (EngineClient(self.core), ModelConn())
        self.model.gc(self.mconns())

    @invariant()
    def counts_agree(self):
        if not hasattr(self, "core"):
            return
        stats = document(self.send(0, b"stats\r\n"))
        jobs = self.model.jobs.values()
        for state in ("ready", "reserved", "buried"):
            assert stats["current-jobs-" + state] == sum(j.state == state for j in jobs)
        assert stats["current-jobs-urgent"] == sum(
            j.state == "ready" and j.pri < URGENT for j in jobs)
        assert stats["current-tubes"] == len(self.model.tubes)
        assert self.core.current_jobs == len(self.model.jobs)
        assert self.core.check()


EngineVsModel.TestCase.settings = settings(max_examples=150 * FUZZ, stateful_step_count=60, deadline=None)
test_engine_matches_model = EngineVsModel.TestCase


def test_big_puts_take_turns_with_other_connections():
    # A read holding ten 16 KiB puts runs 64 KiB of them, then waits for the
    # next turn (later()), so consumers get in between; small puts don't count.
    core = Core(version=b"test")
    c = EngineClient(core)
    body = b"x" * 16384
    c.conn.feed(b"".join(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body) for _ in range(10))
                + b"put 0 0 60 1\r\ny\r\n" * 3)
    replies = []
    out = b""
    while True:
        out += c.take()
        replies.append(out.count(b"INSERTED"))
        if not c.flags["again"]:
            break
        c.flags["again"] = False
        c.conn.again()
    assert replies == [4, 8, 13]
    assert core.current_jobs == 13


def test_connections_served_last_turn_wait_for_the_others():
    # With a loop (end_turn_soon given), a read from a connection served in the
    # last turn waits for the end of this one (end_turn), where the held-back
    # connections run oldest-served first; others run at once. Job ids show
    # the order the puts ran in.
    asked = []
    core = Core(version=b"test", end_turn_soon=lambda: asked.append(1))
    clients = [EngineClient(core) for _ in range(4)]
    conns = [c.conn for c in clients]
    put = b"put 0 0 60 1\r\nx\r\n"

    def replies():
        return [c.take() for c in clients]

    for c in conns[:3]:                # never served: each runs at once
        c.feed(put)
    assert replies() == [b"INSERTED 1\r\n", b"INSERTED 2\r\n", b"INSERTED 3\r\n", b""]
    core.end_turn()
    assert asked == [1]                # one call per turn, not per read

    for c in reversed(conns[:3]):      # all served last turn, reported newest first
        c.feed(put)
    assert replies() == [b""] * 4      # held back
    core.end_turn()
    assert replies() == [b"INSERTED 4\r\n", b"INSERTED 5\r\n", b"INSERTED 6\r\n", b""]

    conns[1].feed(put)                 # held back
    conns[3].feed(put)                 # new: runs at once
    assert replies() == [b"", b"", b"", b"INSERTED 7\r\n"]
    conns[0].feed(put)                 # held back; two reads of one connection
    conns[0].feed(put)                 # make one run
    core.end_turn()
    assert replies() == [b"INSERTED 8\r\nINSERTED 9\r\n", b"INSERTED 10\r\n", b"", b""]

    conns[2].feed(put)                 # last served two turns ago: runs at once
    conns[1].feed(put)                 # served last turn: held back
    assert replies() == [b"", b"", b"INSERTED 11\r\n", b""]
    core.end_turn()
    assert replies() == [b"", b"INSERTED 12\r\n", b"", b""]

    conns[1].feed(put)                 # held back: the last turn served 2 and 1
    assert replies() == [b""] * 4
    core.end_turn()
    core.end_turn()                    # not asked for: changes nothing
    assert replies() == [b"", b"INSERTED 13\r\n", b"", b""]
    conns[1].feed(put)                 # the last turn served it alone: runs at once
    assert replies() == [b"", b"INSERTED 14\r\n", b"", b""]
    assert asked == [1, 1, 1, 1, 1, 1]


def test_job_tube_names_a_jobs_tube_until_it_is_gone():
    # roles (server/rolefilter.py) ask it before a restricted client touches a job
    core = Core(version=b"test")
    c = EngineClient(core)
    c.conn.feed(b"use mail\r\nput 0 0 60 1\r\nx\r\nput 0 0 60 1\r\ny\r\ndelete 2\r\n")
    assert c.take() == b"USING mail\r\nINSERTED 1\r\nINSERTED 2\r\nDELETED\r\n"
    assert core.job_tube(1) == b"mail"
    assert core.job_tube(2) is None and core.job_tube(3) is None and core.job_tube(0) is None
