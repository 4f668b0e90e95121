"""The roles attacked as a client of a role would attack them: every command
of every role against jobs and tubes outside its patterns, before and while
the jobs move (release, TTR timeout, retry limit, flush, kick); malformed
lines of every command; tube names with glob characters; pipelines that mix
`auth` and commands; auth guessed from many source addresses. Real server
processes, real TLS sockets; each check ends with what the server holds."""
import socket
import ssl
import time

import pytest

from fastbean.client import NotFound
from fastbean.engine.parser import Parser
from fastbean.server.rolefilter import malformed_line
from fastbean.server.roles import parse_roles
from tests.operations.test_metrics import get, samples
from tests.security.test_roles import write_tokens as roles_tokens_file
from tests.security.test_tls import ask, client_context, tls_connect, tls_server
from tests.support.certs import Pki
from tests.support.servers import HOST, client, free_port

pytestmark = pytest.mark.timeout(120)

TOKENS = {  # name -> (token, roles)
    "w1": ("w1-7d3c0b5a9e1f", "worker:orders*"),
    "w2": ("w2-4b6d8f0a2c4e", "worker:orders*"),
    "mon": ("mo-1e3a5c7b9d0f", "monitor:orders*"),
    "prod": ("pr-8c0e2a4b6d8f", "producer:orders*"),
    "glob": ("gl-3f5b7d9a1c3e", "producer:a[b]*,q?,x.y,$( worker:a[b]*,q? monitor:a[b]*,q?"),
    "all": ("al-6a8c0e2b4d6f", "producer worker monitor"),
    "boss": ("bo-9e1d3b5f7a0c", "admin"),
}
ROLE_NAMES = ("w1", "mon", "prod", "glob", "all")


def write_tokens(path):
    return roles_tokens_file(path, TOKENS)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    pki = Pki(str(tmp_path_factory.mktemp("pki")))
    tokens = write_tokens(tmp_path_factory.mktemp("tokens") / "tokens")
    s = tls_server(pki.server, "--auth-tokens", tokens)
    s.ctx = client_context(pki.ca.cert)
    yield s
    s.stop()
    assert "Traceback" not in s.log, s.log


@pytest.fixture(scope="module")
def strict_node(tmp_path_factory):
    pki = Pki(str(tmp_path_factory.mktemp("pki")))
    tokens = write_tokens(tmp_path_factory.mktemp("tokens") / "tokens")
    s = tls_server(pki.server, "--strict", "--auth-tokens", tokens)
    s.ctx = client_context(pki.ca.cert)
    yield s
    s.stop()
    assert "Traceback" not in s.log, s.log


def login(server, name):
    t = tls_connect(server.tls_port, server.ctx)
    assert ask(t, b"auth %s\r\n" % TOKENS[name][0].encode()) == b"AUTHENTICATED\r\n"
    return t


def replies(sock, count, timeout=10.0):
    """count replies (lines, with the bodies and parts that follow some)."""
    sock.settimeout(timeout)
    data = b""
    got = []
    while len(got) < count:
        reply = _one_reply(data)
        if reply is None:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed after %r" % got)
            data += chunk
            continue
        got.append(data[:reply])
        data = data[reply:]
    assert data == b"", data
    return got


def _one_reply(data):
    # the length of the first whole reply in data, or None
    end = data.find(b"\r\n")
    if end < 0:
        return None
    line = data[:end]
    words = line.split(b" ")
    if words[0] in (b"RESERVED", b"FOUND", b"OK"):
        size = end + 2 + int(words[-1]) + 2
        return size if len(data) >= size else None
    if words[0] in (b"RESERVED_BATCH", b"LISTED"):
        pos = end + 2
        for _ in range(int(words[1])):
            part = _one_reply(data[pos:])
            if part is None:
                return None
            pos += part
        return pos
    return end + 2


def admin(server):
    return client(server.port)


def wait_until(predicate, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "waited %gs for %s" % (timeout, what)
        time.sleep(0.01)


def job_tube(server, job):
    with admin(server) as c:
        try:
            return c.stats_job(job)["tube"]
        except Exception:
            return None


# -- malformed lines ------------------------------------------------------------------

EXTENSION_VERBS = ("list-tube", "flush-tube", "flush-buried", "reserve-batch", "delete-batch",
                   "delete-each", "retry-limit", "fastbean-stats", "fastbean-reset",
                   "fastbean-clock-advance", "move-job", "reprioritize-job")


def test_a_malformed_line_of_every_extension_reads_as_the_same_command():
    # what the filter hands the engine for a line it cannot read is read by
    # the engine as the same command, with the same error
    for verb in EXTENSION_VERBS:
        parsed = Parser().parse(malformed_line(verb))
        assert len(parsed) == 1 and parsed[0][0] == verb and parsed[0][1] == "BAD_FORMAT", (verb, parsed)


BAD_LINES = [b"list-tube ready 0 0", b"list-tube ready 0 1001", b"list-tube ready 1 1",
             b"list-tube ready 1.0 1", b"list-tube sideways 0 1", b"list-tube ready", b"list-tube ",
             b"list-tube ready 0 1 ", b"flush-tube -x", b"flush-tube", b"flush-buried a b",
             b"reserve-batch 0", b"reserve-batch 1001", b"reserve-batch 1 x", b"delete-batch",
             b"delete-batch 1 x", b"delete-each 0 y", b"retry-limit x", b"retry-limit 1 -d",
             b"retry-limit 1 d e", b"fastbean-stats x", b"fastbean-reset now",
             b"fastbean-clock-advance x", b"move-job 1 -x", b"move-job x y",
             b"reprioritize-job 1 -1", b"reprioritize-job 1"]


@pytest.mark.parametrize("which", ["node", "strict_node"])
def test_a_malformed_line_gets_what_the_engine_answers(which, request):
    # as every role, before and after allowed commands in the same read: the
    # answer an admin gets, and nothing before or after it is lost
    server = request.getfixturevalue(which)
    with login(server, "boss") as t:
        t.sendall(b"use orders1\r\n" + b"".join(line + b"\r\n" for line in BAD_LINES))
        expected = replies(t, 1 + len(BAD_LINES))
    for name in ROLE_NAMES:
        with login(server, name) as t:
            t.sendall(b"list-tube-used\r\n" + b"".join(line + b"\r\n" for line in BAD_LINES)
                      + b"list-tubes-watched\r\n")
            got = replies(t, 2 + len(BAD_LINES))
            assert got[0] == b"USING default\r\n"
            assert got[1:-1] == expected[1:], name
            assert got[-1] == b"OK 14\r\n---\n- default\n\r\n"
    assert "Traceback" not in server.log


def test_a_monitor_sends_list_tube_with_a_zero_count(node):
    # the attacker's reproduction: EOF and a ValueError before
    with login(node, "mon") as t:
        t.sendall(b"use orders1\r\nlist-tube ready 0 0\r\nlist-tube-used\r\n")
        assert replies(t, 3) == [b"USING orders1\r\n", b"BAD_FORMAT\r\n", b"USING orders1\r\n"]
    assert "Traceback" not in node.log


# -- permissions checked when the command runs ------------------------------------------

def test_a_job_moved_to_another_tube_behind_a_blocked_reserve(node):
    # W2's delete waits behind its reserve; meanwhile W1's release moves the
    # job to a tube neither may touch: the delete must not reach it
    with admin(node) as c:
        c.use("orders2")
        c.retry_limit(1, "deadq")
        job = c.put(b"J")
    with login(node, "w1") as w1, login(node, "w2") as w2:
        assert ask(w1, b"watch orders2\r\nignore default\r\nreserve\r\n", b"J\r\n") == (
            b"WATCHING 2\r\nWATCHING 1\r\nRESERVED %d 1\r\nJ\r\n" % job)
        w2.sendall(b"watch orders2\r\nignore default\r\nreserve-with-timeout 1\r\ndelete %d\r\n" % job)
        assert replies(w2, 2) == [b"WATCHING 2\r\n", b"WATCHING 1\r\n"]
        with admin(node) as c:
            wait_until(lambda: c.stats_tube("orders2")["current-waiting"] == 1, "W2 to wait")
        assert ask(w1, b"release %d 0 0\r\n" % job) == b"RELEASED\r\n"
        assert job_tube(node, job) == "deadq"
        assert replies(w2, 2) == [b"TIMED_OUT\r\n", b"NOT_FOUND\r\n"]
    assert job_tube(node, job) == "deadq"
    with admin(node) as c:
        assert c.peek(job) == b"J"
        c.delete(job)


# -- every command of every role against what is not its own ------------------------------

WORKER_BY_ID = (b"delete %d", b"release %d 0 0", b"bury %d 0", b"touch %d", b"reserve-job %d")
MONITOR_BY_ID = (b"peek %d", b"stats-job %d")
ADMIN_BY_ID = (b"kick-job %d", b"delete-batch %d", b"delete-each %d", b"move-job %d elsewhere",
               b"reprioritize-job %d 7")
ON_TUBE = (b"use %s", b"watch %s", b"stats-tube %s", b"pause-tube %s 0", b"flush-tube %s",
           b"flush-buried %s")
ON_USED = (b"peek-ready", b"peek-delayed", b"peek-buried", b"list-tube ready 0 10",
           b"list-tube buried 0 10", b"list-tube reserved 0 10", b"list-tube delayed 0 10",
           b"retry-limit", b"retry-limit 1 elsewhere", b"retry-limit default", b"kick 100",
           b"put 0 0 60 5\r\nhello")
ON_WATCHED = (b"reserve-with-timeout 0", b"reserve-batch 10 0")
ON_SERVER = (b"stats", b"list-tubes", b"fastbean-stats")


TUBE_FIELDS = ("current-jobs-ready", "current-jobs-reserved", "current-jobs-buried",
               "current-jobs-delayed", "total-jobs", "pause")


def snapshot(server, jobs, tubes):
    """What the server holds of jobs and tubes, as an admin sees it (a
    NotFound where it holds none)."""
    with admin(server) as c:
        looks = [(job, c.stats_job, lambda stats: {k: v for k, v in stats.items()
                                                   if k not in ("age", "time-left")}) for job in jobs]
        looks += [(tube, c.stats_tube, lambda stats: {k: stats[k] for k in TUBE_FIELDS}) for tube in tubes]
        held = {}
        for key, ask_stats, kept in looks:
            try:
                held[key] = kept(ask_stats(key))
            except NotFound:
                held[key] = "NotFound"
        return held


def expected_refusal(name, line):
    """What the role `name` is answered for line, on a job or tube not its own."""
    held = parse_roles(TOKENS[name][1].split()).globs
    verb = line.split(b" ")[0]
    if line in (b"stats", b"list-tubes") and "monitor" in held:
        return None             # a monitor sees the server's totals, not a tube's jobs
    for lines, role in ((WORKER_BY_ID, "worker"), (MONITOR_BY_ID, "monitor")):
        if verb in [w.split(b" ")[0] for w in lines]:
            return b"NOT_FOUND\r\n" if role in held else b"NOT_PERMITTED\r\n"
    return b"NOT_PERMITTED\r\n"


def assert_untouchable(server, name, jobs, tubes, setup=b"", on_own=True):
    """Every command the role `name` may send, against jobs and tubes that
    are not its own, in one pipeline after setup (and, unless setup moved it
    to its own tubes, on the tubes a connection starts with): each refused,
    or not found, and nothing the server holds changes."""
    before = snapshot(server, jobs, tubes)
    lines = []
    for job in jobs:
        lines += [line % job for line in WORKER_BY_ID + MONITOR_BY_ID + ADMIN_BY_ID]
    for tube in tubes:
        lines += [line % tube.encode() for line in ON_TUBE]
    if on_own:
        lines += list(ON_USED + ON_WATCHED + ON_SERVER)
    ahead = setup.count(b"\r\n")
    with login(server, name) as t:
        t.sendall(setup + b"".join(line + b"\r\n" for line in lines))
        got = replies(t, ahead + len(lines))
    for line, reply in zip(lines, got[ahead:]):
        expected = expected_refusal(name, line)
        assert expected is None or reply == expected, (name, line, reply)
    assert snapshot(server, jobs, tubes) == before, name
    return got[:ahead]


def outside_jobs(server, tube):
    """One job of tube in each state: ready, delayed, buried, and reserved by
    an admin connection that stays open (returned, to be closed by the caller)."""
    holder = admin(server)
    holder.use(tube)
    holder.watch(tube)
    holder.cmd(b"ignore default", b"WATCHING 1")
    reserved = holder.put(b"reserved")
    assert holder.job(b"reserve-with-timeout 0")[0] == reserved
    buried = holder.put(b"buried")
    assert holder.job(b"reserve-with-timeout 0")[0] == buried
    holder.cmd(b"bury %d 0" % buried, b"BURIED")
    ready = holder.put(b"ready")
    delayed = holder.put(b"delayed", delay=3600)
    return holder, [ready, delayed, buried, reserved]


@pytest.mark.parametrize("name", ["w1", "mon", "prod", "glob"])
def test_every_command_of_a_role_outside_its_tubes(node, name):
    secret = "secret-" + name
    holder, jobs = outside_jobs(node, secret)
    try:
        assert_untouchable(node, name, jobs, [secret, "default"])
        # the same behind a use/watch of its own tubes and a blocked reserve
        setup = {"w1": b"watch orders9\r\nignore default\r\nreserve-with-timeout 1\r\n",
                 "glob": b"watch ab1\r\nignore default\r\nreserve-with-timeout 1\r\n",
                 "mon": b"use orders9\r\n", "prod": b"use orders9\r\n"}[name]
        assert_untouchable(node, name, jobs, [secret, "default"], setup, on_own=False)
    finally:
        holder.close()


# -- jobs that move out of a role's tubes ---------------------------------------------------

# a worker's answers to by_id() on a job not in its tubes (peek and stats-job are a monitor's)
WORKER_GONE = [b"NOT_FOUND\r\n"] * 5 + [b"NOT_PERMITTED\r\n"] * 2


def by_id(job):
    return b"".join(line % job + b"\r\n" for line in WORKER_BY_ID + MONITOR_BY_ID)


def test_a_release_moves_the_job_out_in_the_same_pipeline(node):
    with admin(node) as c:
        c.use("orders-mv1")
        c.retry_limit(1, "dead-mv1")
        job = c.put(b"J")
    with login(node, "w1") as w1:
        got = ask(w1, b"watch orders-mv1\r\nignore default\r\nreserve\r\n", b"J\r\n")
        assert got.endswith(b"RESERVED %d 1\r\nJ\r\n" % job)
        w1.sendall(b"release %d 0 0\r\n" % job + by_id(job))
        assert replies(w1, 8) == [b"RELEASED\r\n"] + WORKER_GONE
    assert job_tube(node, job) == "dead-mv1"
    with admin(node) as c:
        assert c.stats_job(job)["state"] == "ready"


def test_a_timeout_moves_the_job_out_behind_a_blocked_reserve(node):
    with admin(node) as c:
        c.use("orders-mv2")
        c.retry_limit(1, "dead-mv2")
        job = c.put(b"J", ttr=1)
    with login(node, "w2") as w2, login(node, "w1") as w1:
        got = ask(w2, b"watch orders-mv2\r\nignore default\r\nreserve\r\n", b"J\r\n")
        assert got.endswith(b"RESERVED %d 1\r\nJ\r\n" % job)
        # judged at once, every one of these was W1's to send: the job was
        # in its tube then
        w1.sendall(b"watch orders-mv2\r\nignore default\r\nreserve-with-timeout 3\r\n" + by_id(job))
        assert replies(w1, 10) == [b"WATCHING 2\r\n", b"WATCHING 1\r\n", b"TIMED_OUT\r\n"] + (
            WORKER_GONE)
    assert job_tube(node, job) == "dead-mv2"
    with admin(node) as c:
        assert c.stats_job(job)["timeouts"] == 1 and c.stats_job(job)["state"] == "ready"


def test_a_kick_and_a_flush_behind_a_blocked_reserve(node):
    with admin(node) as c:
        c.use("dead-mv3")
        c.watch("dead-mv3")
        kept = c.put(b"K")
        assert c.job(b"reserve-job %d" % kept)[0] == kept
        c.cmd(b"bury %d 0" % kept, b"BURIED")
        c.use("orders-mv3")
        flushed = c.put(b"F")
    with login(node, "w1") as w1, admin(node) as c:
        w1.sendall(b"watch orders-mv3x\r\nignore default\r\nreserve-with-timeout 2\r\n" + by_id(kept)
                   + b"watch orders-mv3\r\nreserve-with-timeout 2\r\n")
        assert replies(w1, 2) == [b"WATCHING 2\r\n", b"WATCHING 1\r\n"]
        c.use("dead-mv3")
        assert c.kick(10) == 1
        assert c.flush_tube("orders-mv3") == 1
        assert replies(w1, 10) == [b"TIMED_OUT\r\n"] + WORKER_GONE + [
            b"WATCHING 2\r\n", b"TIMED_OUT\r\n"]
        assert c.stats_job(kept)["state"] == "ready" and job_tube(node, flushed) is None


# -- tube names and glob characters ---------------------------------------------------------

def test_glob_characters_match_only_as_globs(node):
    with login(node, "glob") as t:
        for tube, allowed in ((b"ab", True), (b"abc-1", True), (b"qz", True), (b"q.", True),
                              (b"x.y", True), (b"$(", True), (b"ac", False), (b"a", False),
                              (b"q", False), (b"qzz", False), (b"xzy", False), (b"x.yy", False),
                              (b"$((", False), (b"Ab", False)):
            expected = b"USING %s\r\n" % tube if allowed else b"NOT_PERMITTED\r\n"
            assert ask(t, b"use %s\r\n" % tube) == expected, tube
        # the glob's own characters are no tube's: the engine's BAD_FORMAT
        for tube in (b"a[b]", b"q?", b"a*", b"[!a]"):
            t.sendall(b"use %s\r\nwatch %s\r\n" % (tube, tube))
            assert replies(t, 2) == [b"BAD_FORMAT\r\n"] * 2, tube
        assert ask(t, b"list-tube-used\r\n") == b"USING $(\r\n"


# -- auth in pipelines, and guessed ----------------------------------------------------------

def raw_tls(server, source=HOST):
    sock = socket.create_connection((HOST, server.tls_port), timeout=10, source_address=(source, 0))
    try:
        return server.ctx.wrap_socket(sock, server_hostname="localhost")
    except BaseException:
        sock.close()
        raise


def test_auth_pipelined_with_commands(node):
    good, boss = TOKENS["w1"][0].encode(), TOKENS["boss"][0].encode()
    with raw_tls(node) as t:
        # refused before auth, whatever they are; a put's body is a line like any
        t.sendall(b"kick 1\r\nput 0 0 60 4\r\nkick\r\nauth wrong\r\nauth " + good + b"\r\n"
                  b"kick 1\r\nauth " + boss + b"\r\nkick 1\r\nlist-tube-used\r\n")
        assert replies(t, 9) == [b"NOT_AUTHENTICATED\r\n"] * 4 + [
            b"AUTHENTICATED\r\n", b"NOT_PERMITTED\r\n",
            # once in, auth is no command: a second token gives nothing more
            b"UNKNOWN_COMMAND\r\n", b"NOT_PERMITTED\r\n", b"USING default\r\n"]
    with raw_tls(node) as t:
        # eight refusals and the connection is closed, unread commands unrun
        t.sendall(b"use x\r\n" * 8 + b"auth " + boss + b"\r\nkick 1\r\n")
        assert replies(t, 8) == [b"NOT_AUTHENTICATED\r\n"] * 8
        assert t.recv(100) == b""


def test_guessing_from_many_source_addresses(node):
    # each address has five failures a minute, then its attempts are refused
    # unheard, even with a good token; other addresses notice nothing
    sources = ["127.0.%d.%d" % (1 + i // 200, 2 + i % 200) for i in range(40)]
    good = TOKENS["w1"][0].encode()
    for source in sources:
        with raw_tls(node, source) as t:
            t.sendall(b"".join(b"auth guess-%d\r\n" % i for i in range(6)))
            assert replies(t, 6) == [b"NOT_AUTHENTICATED\r\n"] * 6
            assert t.recv(100) == b""
        with raw_tls(node, source) as t:
            t.sendall(b"auth " + good + b"\r\n")
            assert replies(t, 1) == [b"NOT_AUTHENTICATED\r\n"]
            assert t.recv(100) == b""
    with login(node, "w1") as t:
        assert ask(t, b"list-tube-used\r\n") == b"USING default\r\n"
    for source in sources:
        assert "%s failed to authenticate 5 times" % source in node.log


# -- handshakes that never end ---------------------------------------------------------------

def client_hello(ctx):
    """The bytes of a ClientHello, as ctx would send it."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_slow_and_half_open_handshakes_are_closed_at_their_deadline(tmp_path):
    # a ClientHello begun and left, one dribbled a few bytes at a time (its
    # deadline runs from the accept, not from the last byte), one sent then
    # half-closed, and a connect half-closed at once: each is closed, while
    # a client that does its handshake is served
    (tmp_path / "pki").mkdir()
    pki = Pki(str(tmp_path / "pki"))
    mport = free_port()
    s = tls_server(pki.server, "--auth-tokens", write_tokens(tmp_path / "tokens"),
                   "--tls-handshake-timeout", "2", "--metrics", str(mport))
    s.ctx = client_context(pki.ca.cert)
    hello = client_hello(s.ctx)
    socks = [socket.create_connection((HOST, s.tls_port), timeout=20) for _ in range(4)]
    try:
        begun, dribbled, half_closed, fin_only = socks
        begun.sendall(hello[:20])
        half_closed.sendall(hello)
        half_closed.shutdown(socket.SHUT_WR)
        fin_only.shutdown(socket.SHUT_WR)
        start = time.monotonic()
        sent = 0
        while time.monotonic() - start < 4 and sent < len(hello) - 1:
            try:
                dribbled.sendall(hello[sent:sent + 3])
            except OSError:
                break
            sent += 3
            with login(s, "w1") as t:           # served meanwhile
                assert ask(t, b"list-tube-used\r\n") == b"USING default\r\n"
            time.sleep(0.2)
        for sock in socks:
            data = b""
            try:
                chunk = sock.recv(65536)
                while chunk:
                    data += chunk
                    chunk = sock.recv(65536)
            except ConnectionResetError:
                pass
            assert b"AUTHENTICATED" not in data
        # all four gone, by their deadline: none counts any more
        wait_until(lambda: samples(get(mport, "/metrics")[2])[0]["fastbean_connections_unauthenticated"] == 0,
                   "the connections not yet in to go")
    finally:
        for sock in socks:
            sock.close()
        s.stop()
    assert "Traceback" not in s.log
