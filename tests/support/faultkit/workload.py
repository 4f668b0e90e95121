"""Audited clients: producers, deleters and readers on blocking sockets that
reconnect on any connection error and remember what every reply proved, and
the exact audit of a server's final state against it.

What a client knows, and the audit requires:
- a put answered INSERTED id: that job exists with exactly its body (bodies
  are random hex, so a body names its put), unless it was deleted;
- a delete answered DELETED, or answered NOT_FOUND when it was sent again
  after the reply to an earlier try was lost ("confirmed gone"): the job never
  comes back;
- a put whose reply was lost ("unsure") may or may not exist, at most once;
  it is not retried;
- the ids a client is given increase; a put after the run gets an id above
  every id ever acknowledged;
- a reader's peek of an acknowledged job agrees with what was acknowledged
  before it was sent (no stale read of a confirmed delete, no missing job).

Times are time.monotonic(). An audit may exempt windows of time (a fault
whose policy allows losing the last moments' changes, as -f 50 does): a
change acknowledged inside one may be lost, but then wholly.
"""
import os
import random
import socket
import threading
import time

from fastbean.client import parse_dict


class Lost(ConnectionError):
    """The connection closed (or timed out) before the reply."""


class Conn:
    """A blocking beanstalk connection with a buffer that parses without copying.

    Not the shared fastbean.client.Client, on purpose: every way a reply
    can fail to come (refused, reset, closed, timed out) is one exception,
    Lost, which the audited threads retry on and which marks the command as
    unsure; replies come back raw, for the audit to decide what each proves;
    and the audit's pipelined peeks of every id (peek_many) parse in place
    rather than copying the buffer per reply."""

    def __init__(self, port, timeout=30.0):
        try:
            self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        except OSError as e:
            raise Lost("connect to %d: %s" % (port, e)) from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.port = port
        self.buf = bytearray()
        self.pos = 0

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise Lost(str(e)) from None

    def _fill(self):
        if self.pos > 1 << 20:
            del self.buf[:self.pos]
            self.pos = 0
        try:
            data = self.sock.recv(1 << 20)
        except OSError as e:
            raise Lost(str(e)) from None
        if not data:
            raise Lost("closed by the server")
        self.buf += data

    def line(self):
        while True:
            end = self.buf.find(b"\r\n", self.pos)
            if end >= 0:
                line = bytes(self.buf[self.pos:end])
                self.pos = end + 2
                return line
            self._fill()

    def body(self, n):
        while len(self.buf) - self.pos < n + 2:
            self._fill()
        body = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n + 2
        return body

    def cmd(self, line):
        self.send(line + b"\r\n")
        return self.line()

    def put(self, body, pri=0, delay=0, ttr=120):
        return self.cmd(b"put %d %d %d %d\r\n%s" % (pri, delay, ttr, len(body), body))

    def yaml(self, line):
        """A command answered by OK and a stats document, read by the shared parser."""
        reply = self.cmd(line)
        if not reply.startswith(b"OK "):
            raise AssertionError("%r answered %r" % (line, reply))
        return parse_dict(self.body(int(reply.split()[1])))

    def peek_many(self, ids, chunk=4000):
        """{id: body} of the ids that exist (peek, pipelined)."""
        ids = list(ids)
        found = {}
        for at in range(0, len(ids), chunk):
            part = ids[at:at + chunk]
            self.send(b"".join(b"peek %d\r\n" % i for i in part))
            for i in part:
                reply = self.line()
                if reply == b"NOT_FOUND":
                    continue
                if not reply.startswith(b"FOUND %d " % i):
                    raise AssertionError("peek %d answered %r" % (i, reply))
                found[i] = self.body(int(reply.split()[2]))
        return found


def resolve(target):
    """A port from a target: a port, an object with .port, or a callable giving either."""
    if callable(target):
        target = target()
    return getattr(target, "port", target)


def connect(target, timeout=30.0):
    try:
        port = resolve(target)
    except (AssertionError, RuntimeError, OSError) as e:     # e.g. find_primary found none
        raise Lost("no server: %s" % e) from None
    return Conn(port, timeout)


class Workload:
    """Threads that put, delete and read through `target` (a port, an object
    with .port such as a HAProxy or a Node, or a callable returning one, such
    as lambda: find_primary(nodes)), reconnecting after `backoff` s on any
    connection error. pipeline: puts a producer sends before reading replies.
    Readers peek through read_target (default: target), e.g. straight to one node.

    start(), stop(), mark(what) (a fault's time, for the report), counts(),
    audit(target, exempt=...) -> Audit."""

    def __init__(self, target, producers=4, deleters=2, readers=0, pipeline=1, body_size=(8, 120),
                 backoff=0.05, timeout=30.0, seed=None, tube=None, read_target=None):
        self.target, self.pipeline, self.body_size = target, pipeline, body_size
        self.read_target = target if read_target is None else read_target
        self.backoff, self.timeout, self.tube = backoff, timeout, tube
        self.nthreads = (producers, deleters, readers)
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.acked = {}         # id -> (body, time of the reply)
        self.ack_order = []     # ids as acknowledged (readers pick from it)
        self.reused = []        # (id, old body, old time, new time): an id acknowledged twice
        self.pool = []          # acknowledged ids no deleter has taken
        self.del_sent = {}      # id -> when its first delete was sent
        self.deleted = {}       # id -> time of DELETED
        self.gone = {}          # id -> time of NOT_FOUND to a delete sent again
        self.missing = {}       # id -> time of NOT_FOUND to a first delete (the job was not there)
        self.unsure_deletes = {}    # id -> time: a delete with no reply when the run stopped
        self.unsure = {}        # body -> time sent: a put whose reply was lost
        self.errors = []        # (time, thread, command, reply): replies no client expected
        self.disconnects = []   # (time, thread, what was waiting)
        self.regressions = []   # (time, thread, id, the thread's previous id)
        self.reads = []         # (sent, replied, id, body or None)
        self.marks = []         # (time, what)
        self.max_id = 0
        self._stop = threading.Event()
        self._threads = []
        self.started = self.stopped = None

    # -- running --------------------------------------------------------------

    def start(self):
        self._stop.clear()
        self.started = self.started or time.monotonic()
        kinds = [(self._producer, "put"), (self._deleter, "del"), (self._reader, "read")]
        self._threads = []
        for (fn, prefix), n in zip(kinds, self.nthreads):
            for k in range(n):
                t = threading.Thread(target=self._guard, args=(fn, "%s%d" % (prefix, k), self.rng.random()),
                                     name="faultkit-%s%d" % (prefix, k), daemon=True)
                self._threads.append(t)
        for t in self._threads:
            t.start()
        return self

    def stop(self, timeout=120.0):
        self._stop.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.1, deadline - time.monotonic()))
        stuck = [t.name for t in self._threads if t.is_alive()]
        assert not stuck, "client threads still running after %.0f s: %s" % (timeout, stuck)
        self.stopped = time.monotonic()

    def running(self):
        return any(t.is_alive() for t in self._threads)

    def mark(self, what):
        """Note an event (a fault injected, a server restarted) with its time; returns the time."""
        t = time.monotonic()
        with self.lock:
            self.marks.append((t, what))
        return t

    def wait_for(self, puts=0, deletes=0, timeout=60.0):
        """Wait until `puts` more puts and `deletes` more deletes are acknowledged."""
        with self.lock:
            p0, d0 = len(self.acked), len(self.deleted)
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                if len(self.acked) - p0 >= puts and len(self.deleted) - d0 >= deletes:
                    return
            if time.monotonic() > deadline:
                raise AssertionError("the load made no progress in %.0f s (%d puts, %d deletes): %s" % (
                    timeout, len(self.acked) - p0, len(self.deleted) - d0, self.errors[-5:]))
            time.sleep(0.02)

    def accepting(self, target=None, timeout=60.0):
        """Put on a new connection (through target, default the workload's)
        until a put is acknowledged; the time it was. The put is audited as the
        clients' are."""
        deadline = time.monotonic() + timeout
        while True:
            body = b"accepting-" + os.urandom(8).hex().encode()
            try:
                with connect(self.target if target is None else target, 10) as c:
                    with self.lock:
                        self.unsure[body] = time.monotonic()
                    reply = c.put(body)
                    t = time.monotonic()
                    with self.lock:
                        del self.unsure[body]
                        if reply.startswith(b"INSERTED "):
                            self._ack(int(reply.split()[1]), body, t)
                            return t
            except Lost:
                pass
            assert time.monotonic() < deadline, "no put accepted in %.0f s" % timeout
            time.sleep(0.05)

    def _guard(self, fn, name, seed):
        try:
            fn(name, random.Random(seed))
        except Exception as e:          # a bug here must not pass as a quiet thread
            with self.lock:
                self.errors.append((time.monotonic(), name, "thread crashed", repr(e)))
            raise

    def _connect(self, retry_for=0.0, target=None):
        """A connection through the target, retrying until the run stops (then
        `retry_for` s more); None once it gives up."""
        give_up = None
        while True:
            if self._stop.is_set():
                give_up = give_up or time.monotonic() + retry_for
                if time.monotonic() >= give_up:
                    return None
            try:
                c = connect(self.target if target is None else target, self.timeout)
                if self.tube:
                    reply = c.cmd(b"use %s" % self.tube.encode())
                    if not reply.startswith(b"USING"):
                        c.close()
                        raise Lost("use answered %r" % reply)
                return c
            except Lost:
                time.sleep(self.backoff)

    def _lost(self, name, what):
        with self.lock:
            self.disconnects.append((time.monotonic(), name, what))
        time.sleep(self.backoff)

    def _body(self, rng):
        return os.urandom(rng.randint(*self.body_size) // 2 + 4).hex().encode()

    def _producer(self, name, rng):
        last = 0
        c = None
        while not self._stop.is_set():
            if c is None:
                c = self._connect()
                if c is None:
                    return
            bodies = [self._body(rng) for _ in range(self.pipeline)]
            now = time.monotonic()
            with self.lock:
                for b in bodies:
                    self.unsure[b] = now        # settled below when its reply comes
            waiting = list(bodies)
            refused = False
            try:
                c.send(b"".join(b"put %d 0 120 %d\r\n%s\r\n" % (rng.randrange(1 << 16), len(b), b)
                                for b in bodies))
                for b in bodies:
                    reply = c.line()
                    t = time.monotonic()
                    waiting.pop(0)
                    with self.lock:
                        del self.unsure[b]
                        if reply.startswith((b"INSERTED ", b"BURIED ")):
                            jid = int(reply.split()[1])
                            if reply.startswith(b"BURIED "):
                                self.errors.append((t, name, "put", reply))
                            if jid <= last:
                                self.regressions.append((t, name, jid, last))
                            last = jid
                            self._ack(jid, b, t)
                        else:
                            self.errors.append((t, name, "put", reply))
                            refused = True
            except Lost:
                c.close()
                c = None            # the bodies still waiting stay unsure
                self._lost(name, "put (%d replies)" % len(waiting))
                continue
            if refused:
                time.sleep(self.backoff)    # the server refuses changes for now
        if c is not None:
            c.close()

    def _ack(self, jid, body, t):
        # under self.lock
        old = self.acked.get(jid)
        if old is not None:
            self.reused.append((jid, old[0], old[1], t))
            for table in (self.deleted, self.gone, self.missing, self.unsure_deletes, self.del_sent):
                table.pop(jid, None)
        self.acked[jid] = (body, t)
        self.ack_order.append(jid)
        self.pool.append(jid)
        self.max_id = max(self.max_id, jid)

    def _take(self, rng):
        with self.lock:
            if not self.pool:
                return None
            k = rng.randrange(len(self.pool))
            self.pool[k], self.pool[-1] = self.pool[-1], self.pool[k]
            jid = self.pool.pop()
            self.del_sent.setdefault(jid, time.monotonic())
            return jid

    def _deleter(self, name, rng):
        c = None
        while not self._stop.is_set():
            jid = self._take(rng)
            if jid is None:
                time.sleep(0.005)
                continue
            tries = 0
            give_up = None
            while True:
                if c is None:
                    # once the run stops, a delete in doubt still gets 10 s to settle
                    if self._stop.is_set():
                        give_up = give_up or time.monotonic() + (10.0 if tries else 0.0)
                    c = self._connect(10.0 if tries else 0.0)
                    if c is None or (give_up is not None and time.monotonic() > give_up):
                        with self.lock:
                            self.unsure_deletes[jid] = time.monotonic()
                        if c is not None:
                            c.close()
                        return
                try:
                    reply = c.cmd(b"delete %d" % jid)
                except Lost:
                    c.close()
                    c = None
                    tries += 1
                    self._lost(name, "delete")
                    continue
                t = time.monotonic()
                with self.lock:
                    if reply == b"DELETED":
                        self.deleted[jid] = t
                    elif reply == b"NOT_FOUND":
                        (self.gone if tries else self.missing)[jid] = t
                    else:           # refused: the job stays
                        self.errors.append((t, name, "delete %d" % jid, reply))
                        self.pool.append(jid)
                        self.del_sent.pop(jid, None)
                if reply not in (b"DELETED", b"NOT_FOUND"):
                    time.sleep(self.backoff)
                break
        if c is not None:
            c.close()

    def _reader(self, name, rng):
        c = None
        while not self._stop.is_set():
            with self.lock:
                if not self.ack_order:
                    jid = None
                else:       # mostly recent jobs: those a stale server gets wrong
                    n = len(self.ack_order)
                    jid = self.ack_order[max(0, n - 1 - int(rng.expovariate(1 / 200.0)))]
            if jid is None:
                time.sleep(0.01)
                continue
            if c is None:
                c = self._connect(target=self.read_target)
                if c is None:
                    return
            sent = time.monotonic()
            try:
                reply = c.cmd(b"peek %d" % jid)
                body = None
                if reply.startswith(b"FOUND "):
                    body = c.body(int(reply.split()[2]))
                elif reply != b"NOT_FOUND":
                    with self.lock:
                        self.errors.append((time.monotonic(), name, "peek %d" % jid, reply))
                    continue
            except Lost:
                c.close()
                c = None
                self._lost(name, "peek")
                continue
            with self.lock:
                self.reads.append((sent, time.monotonic(), jid, body))
            time.sleep(0.001)
        if c is not None:
            c.close()

    # -- results ----------------------------------------------------------------

    def error_kinds(self):
        """{(command, reply): how many}"""
        out = {}
        with self.lock:
            for _, _, what, reply in self.errors:
                key = (what.split()[0], reply)
                out[key] = out.get(key, 0) + 1
        return out

    def counts(self):
        with self.lock:
            return {"acked_puts": len(self.acked), "deleted": len(self.deleted), "confirmed_gone": len(self.gone),
                    "unsure_puts": len(self.unsure), "unsure_deletes": len(self.unsure_deletes),
                    "missing_on_delete": len(self.missing), "errors": len(self.errors),
                    "disconnects": len(self.disconnects), "reads": len(self.reads),
                    "id_regressions": len(self.regressions), "ids_reused": len(self.reused)}

    def exempt_from(self, faults, before=1.0):
        """Windows (start, end) for audit(exempt=): each fault (t_fault, t_recovered)
        widened `before` s back."""
        return [(t - before, r) for t, r in faults]

    def audit(self, target=None, exempt=(), watchdog=None, attempts=3, timeout=120.0, others=()):
        """The exact audit through target (default: the workload's): an Audit
        whose .failures lists every contradiction (assert_ok() raises). others:
        more workloads on the same server, audited together with this one."""
        works = [self] + list(others)
        assert not any(w.running() for w in works), "stop() the workloads first"
        last = None
        for _ in range(attempts):
            try:
                return Audit(works, target or self.target, exempt, watchdog, timeout)
            except Lost as e:   # the server went away under the audit: once more
                last = e
                time.sleep(1)
        raise AssertionError("the audit could not complete: %s" % last)


def _within(t, windows):
    return any(a <= t <= b for a, b in windows)


class Audit:
    """The final state through target against what the clients were told."""

    def __init__(self, works, target, exempt=(), watchdog=None, timeout=120.0):
        t0 = time.monotonic()
        self.failures = []
        exempt = list(exempt)
        acked, deleted, gone, missing, unsure_del, unsure, del_sent = {}, {}, {}, {}, {}, {}, {}
        reused, regressions, reads = [], [], []
        for work in works:
            with work.lock:
                for jid, ack in work.acked.items():
                    if jid in acked:        # two workloads were given one id: the later counts
                        old, new = sorted((acked[jid], ack), key=lambda a: a[1])
                        reused.append((jid, old[0], old[1], new[1]))
                        ack = new
                    acked[jid] = ack
                deleted.update(work.deleted)
                gone.update(work.gone)
                missing.update(work.missing)
                unsure_del.update(work.unsure_deletes)
                unsure.update(work.unsure)
                del_sent.update(work.del_sent)
                reused += work.reused
                regressions += work.regressions
                reads += work.reads
        # ids must go on after every id acknowledged outside the exempt windows
        # (a power loss under -f MS may take the last ids back, as beanstalkd's)
        max_id = max((jid for jid, (_, t) in acked.items() if not _within(t, exempt)), default=0)
        fail = self.failures.append
        # the server's state, read with no load running
        deadline = time.monotonic() + timeout
        while True:
            try:
                c = connect(target, 30)
                probe_body = b"faultkit-probe-" + os.urandom(8).hex().encode()
                reply = c.put(probe_body)
                if reply.startswith(b"INSERTED "):
                    break
                c.close()
                raise Lost("probe put answered %r" % reply)
            except Lost:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with c:
            probe = int(reply.split()[1])
            stats = c.yaml(b"stats")
            total = sum(stats["current-jobs-" + s] for s in ("ready", "reserved", "delayed", "buried"))
            found = c.peek_many(range(1, probe))
            if c.cmd(b"delete %d" % probe) != b"DELETED":
                fail("the probe job %d could not be deleted" % probe)
        self.probe = probe
        self.total = total - 1
        self.found = len(found)
        if probe <= max_id:
            fail("ids went back: a new put got id %d, but id %d was acknowledged before" % (probe, max_id))
        if total - 1 != len(found):
            fail("stats counts %d jobs (and the probe), a peek of ids 1..%d finds %d" % (
                total - 1, probe - 1, len(found)))
        # the same body twice
        by_body = {}
        for jid, body in found.items():
            by_body.setdefault(body, []).append(jid)
        for body, ids in by_body.items():
            if len(ids) > 1:
                fail("one put's body is in %d jobs: ids %s (%r)" % (len(ids), ids, body[:40]))
        acked_bodies = {b: jid for jid, (b, _) in acked.items()}
        # every acknowledged put, and what became of it
        lost, back, wrong = [], [], []
        for jid, (body, t_put) in acked.items():
            have = found.get(jid)
            if have is not None and have != body:
                wrong.append((jid, body, have))
                continue
            put_exempt = _within(t_put, exempt)
            if jid in deleted or jid in gone:
                t_del = deleted.get(jid, gone.get(jid))
                if have is not None and not _within(t_del, exempt):
                    back.append((jid, "DELETED" if jid in deleted else "NOT_FOUND on a retried delete", t_del))
            elif jid in unsure_del:
                pass
            elif jid in missing:
                if not put_exempt:
                    fail("acknowledged job %d was not there when deleted (NOT_FOUND to the first delete, "
                         "%.1f s after its put)" % (jid, missing[jid] - t_put))
            elif have is None and not put_exempt:
                lost.append((jid, t_put))
        if lost:
            fail("lost %d acknowledged jobs (no delete ever sent for them), ids %s" % (
                len(lost), _ids([j for j, _ in lost])))
        if back:
            fail("%d confirmed deletes undone (the job is back), ids %s; first: %s" % (
                len(back), _ids([j for j, _, _ in back]), back[0][:2]))
        if wrong:
            fail("%d jobs hold another body than acknowledged, first: id %d %r != %r" % (
                len(wrong), wrong[0][0], wrong[0][2][:40], wrong[0][1][:40]))
        # jobs no client was told about
        unknown, moved, unsure_found = [], [], 0
        for jid, body in found.items():
            if jid in acked and acked[jid][0] == body:
                continue
            if body in unsure:
                unsure_found += 1
            elif body in acked_bodies:
                moved.append((jid, acked_bodies[body]))
            elif jid not in acked:
                unknown.append(jid)
        if unknown:
            fail("%d jobs no put made (neither acknowledged nor unsure), ids %s" % (len(unknown), _ids(unknown)))
        if moved:
            fail("%d acknowledged bodies under another id (id, acknowledged id): %s" % (len(moved), moved[:10]))
        # ids
        for t, name, jid, prev in regressions:
            if not _within(t, exempt):
                fail("client %s got id %d after id %d" % (name, jid, prev))
        for jid, _, t_old, t_new in reused:
            if not _within(t_old, exempt):
                fail("id %d was acknowledged twice (%.1f s apart): the first put is lost" % (jid, t_new - t_old))
        # reads (by readers): a read sent after a confirmed delete must not find the job,
        # a read of a job acknowledged before it was sent and never deleted must
        stale, unseen, wrong_reads = [], [], []
        for sent, replied, jid, body in reads:
            if jid not in acked:
                continue
            put_body, t_put = acked[jid]
            t_del = deleted.get(jid, gone.get(jid))
            if body is not None:
                if body != put_body:
                    wrong_reads.append((jid, put_body[:40], body[:40]))
                elif t_del is not None and t_del < sent and not _within(t_del, exempt):
                    stale.append((jid, round(sent - t_del, 2)))
            elif t_put < sent and (del_sent.get(jid) is None or del_sent[jid] > replied) \
                    and not _within(t_put, exempt) and jid not in missing:
                unseen.append((jid, round(sent - t_put, 2)))
        if wrong_reads:
            fail("%d reads found another body than acknowledged: %s" % (len(wrong_reads), wrong_reads[:5]))
        if stale:
            fail("%d reads found a job after its delete was confirmed (id, s after): %s" % (len(stale), stale[:10]))
        if unseen:
            fail("%d reads did not find an acknowledged job (id, s after its put): %s" % (len(unseen), unseen[:10]))
        # processes
        if watchdog is not None:
            for crash in watchdog.crashes():
                fail("crash: " + crash)
        counts = {}
        for work in works:
            for k, v in work.counts().items():
                counts[k] = counts.get(k, 0) + v
        self.counts = dict(counts, jobs_at_end=len(found), unsure_found=unsure_found,
                           lost=len(lost), undone_deletes=len(back), audit_s=round(time.monotonic() - t0, 2))
        if watchdog is not None:
            self.counts["fail_stop_exits"] = len(watchdog.fail_stops())
            self.counts["restarts"] = watchdog.restarts

    def __str__(self):
        head = " ".join("%s=%s" % kv for kv in self.counts.items())
        if not self.failures:
            return "audit ok: " + head
        return "audit FAILED (%d): %s\n  - %s" % (len(self.failures), head, "\n  - ".join(self.failures))

    def assert_ok(self):
        assert not self.failures, str(self)
        return self


def _ids(ids, n=12):
    ids = sorted(ids)
    return "%s%s" % (ids[:n], " ..." if len(ids) > n else "")
