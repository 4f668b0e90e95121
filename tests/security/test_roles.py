"""Roles of tokens (--auth-tokens lines `NAME SHA256 ROLE[:PATTERN,...]`):
each role at the edge of its tube patterns, pipelines mixing allowed and
refused commands, put bodies that look like commands, admins old and new,
bad role syntax, SIGHUP; real server processes, real TLS clients."""
import hashlib
import re
import signal
import socket
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastbean import testing
from fastbean.client import Client, ServerError, tls_context
from fastbean.engine.core import Core
from fastbean.server.authgate import AuthConnProtocol
from fastbean.server.rolefilter import RoleFilter
from fastbean.server.roles import ALLOW, DENY, HIDE, parse_roles
from fastbean.server.tokens import TokenAuth
from tests.security.test_tls import (
    ask,
    client_context,
    current_connections,
    hang_up,
    start_fails,
    tls_connect,
    tls_server,
    wait_for_log,
)
from tests.support.certs import Pki
from tests.support.servers import FUZZ, HOST, EngineClient, Server, client, wait_listening

pytestmark = pytest.mark.timeout(90)

TOKENS = {  # name -> (token, roles)
    "prod": ("p-1c9e0a7b3d5f", "producer:jobs-*,mail"),
    "work": ("w-8a2b4c6d8e0f", "worker:jobs-*"),
    "mon": ("m-5e7f9a1b3c5d", "monitor:jobs-*"),
    "both": ("b-2d4f6a8c0e1b", "producer:out worker:in"),
    "old": ("o-9f8e7d6c5b4a", ""),
    "boss": ("a-0a1b2c3d4e5f", "admin"),
}


def write_tokens(path, tokens=TOKENS):
    path.write_text("".join("%s %s %s\n" % (name, hashlib.sha256(token.encode()).hexdigest(), roles)
                            for name, (token, roles) in tokens.items()))
    return str(path)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture(scope="module")
def guarded(pki, tmp_path_factory):
    path = write_tokens(tmp_path_factory.mktemp("tokens") / "tokens")
    s = tls_server(pki.server, "--auth-tokens", path)
    s.ctx = client_context(pki.ca.cert)
    s.ca = pki.ca.cert
    yield s
    s.stop()


def login(server, name):
    t = tls_connect(server.tls_port, server.ctx)
    talk(t, b"auth %s\r\n" % TOKENS[name][0].encode(), b"AUTHENTICATED\r\n")
    return t


def talk(sock, data, expected):
    """Send data; assert the replies are expected (read until that many bytes came)."""
    sock.sendall(data)
    reply = b""
    while len(reply) < len(expected):
        chunk = sock.recv(65536)
        assert chunk, "closed after %r" % reply
        reply += chunk
    assert reply == expected


def put_plain(server, tube, body):
    with client(server.port) as c:
        c.use(tube)
        return c.put(body)


def test_role_syntax():
    roles = parse_roles(["producer:jobs-*,mail", "worker", "producer:x?"])
    assert not roles.admin and str(roles) == "producer:jobs-*,mail,x? worker:*"
    assert roles.allows("producer", b"jobs-1") and roles.allows("producer", b"xy")
    assert not roles.allows("producer", b"mailbox") and not roles.allows("monitor", b"jobs-1")
    assert parse_roles([]).admin and parse_roles(["admin", "worker:a"]).admin
    for words, message in ((["boss"], "'boss' is not a role"), (["admin:x"], "admin takes no"),
                           (["worker:"], "'' is not a tube pattern"), (["worker:a,,b"], "''"),
                           (["worker:a b"], "is not a tube pattern")):
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_roles(words[0].split(" ") if " " not in words[0] else [words[0]])


def test_verdicts_on_job_ids_hide_other_tubes():
    roles = parse_roles(["worker:a"])
    tubes = {1: b"a", 2: b"b"}.get
    assert roles.verdict("delete", 1, b"default", [b"a"], tubes) == ALLOW
    assert roles.verdict("delete", 2, b"default", [b"a"], tubes) == HIDE
    assert roles.verdict("delete", 3, b"default", [b"a"], tubes) == HIDE
    assert roles.verdict("peek", 1, b"default", [b"a"], tubes) == DENY
    assert roles.verdict("reserve", None, b"default", [b"default", b"a"], tubes) == DENY
    assert roles.verdict("kick", 1, b"a", [b"a"], tubes) == DENY


def test_producer_puts_only_to_its_tubes(guarded):
    with login(guarded, "prod") as t:
        # default is not its tube: the put is refused, and its body (which
        # reads like commands) swallowed
        talk(t, b"put 0 0 60 15\r\nkick 9\r\nstats\r\n\r\nlist-tube-used\r\n",
             b"NOT_PERMITTED\r\nUSING default\r\n")
        talk(t, b"use other\r\n", b"NOT_PERMITTED\r\n")
        talk(t, b"use jobs-p\r\n", b"USING jobs-p\r\n")
        reply = ask(t, b"put 0 0 60 15\r\nkick 9\r\nstats\r\n\r\n")
        job = int(reply.split()[1])
        assert reply == b"INSERTED %d\r\n" % job
        talk(t, b"use mail\r\nput 1 0 60 2\r\nhi\r\n", b"USING mail\r\nINSERTED %d\r\n" % (job + 1))
        for line in (b"use mailbox", b"reserve-with-timeout 0", b"watch jobs-p", b"delete %d" % job,
                     b"peek %d" % job, b"stats", b"list-tubes", b"kick 1", b"pause-tube jobs-p 0",
                     b"fastbean-stats"):
            talk(t, line + b"\r\n", b"NOT_PERMITTED\r\n")
        talk(t, b"nonsense\r\nput 0 0 1\r\n", b"UNKNOWN_COMMAND\r\nBAD_FORMAT\r\n")
    with client(guarded.port) as c:
        assert c.peek(job) == b"kick 9\r\nstats\r\n"
        assert c.stats_job(job)["tube"] == "jobs-p"


def test_worker_takes_only_jobs_of_its_tubes(guarded):
    mine = put_plain(guarded, "jobs-w", b"mine")
    theirs = put_plain(guarded, "elsewhere", b"theirs")
    with login(guarded, "work") as t:
        talk(t, b"watch elsewhere\r\n", b"NOT_PERMITTED\r\n")
        talk(t, b"watch jobs-w\r\n", b"WATCHING 2\r\n")
        # while it watches default, outside its patterns, it may not reserve
        talk(t, b"reserve-with-timeout 0\r\n", b"NOT_PERMITTED\r\n")
        talk(t, b"ignore default\r\n", b"WATCHING 1\r\n")
        talk(t, b"reserve-with-timeout 0\r\n", b"RESERVED %d 4\r\nmine\r\n" % mine)
        # another tube's job: as if it did not exist
        for line in (b"delete %d", b"release %d 0 0", b"bury %d 0", b"touch %d", b"reserve-job %d"):
            talk(t, line % theirs + b"\r\n", b"NOT_FOUND\r\n")
        talk(t, b"touch %d\r\nbury %d 5\r\n" % (mine, mine), b"TOUCHED\r\nBURIED\r\n")
        talk(t, b"kick-job %d\r\n" % mine, b"NOT_PERMITTED\r\n")
        talk(t, b"put 0 0 60 1\r\nx\r\nuse jobs-w\r\npeek %d\r\n" % mine, b"NOT_PERMITTED\r\n" * 3)
        talk(t, b"delete %d\r\n" % mine, b"DELETED\r\n")
        talk(t, b"list-tubes-watched\r\n", b"OK 13\r\n---\n- jobs-w\n\r\n")
    with client(guarded.port) as c:
        assert c.peek(theirs) == b"theirs"
    assert re.search(r"work \(127\.0\.0\.1\) may not delete job %d on tube elsewhere" % theirs, guarded.log)
    assert "work (127.0.0.1) may not reserve-with-timeout on tube default,jobs-w" in guarded.log


def test_monitor_sees_only_its_tubes(guarded):
    mine = put_plain(guarded, "jobs-m", b"seen")
    theirs = put_plain(guarded, "hidden", b"unseen")
    with login(guarded, "mon") as t:
        assert ask(t, b"stats\r\n", b"\n\r\n").startswith(b"OK ")
        assert ask(t, b"stats-tube jobs-m\r\n", b"\n\r\n").startswith(b"OK ")
        talk(t, b"stats-tube hidden\r\n", b"NOT_PERMITTED\r\n")
        talk(t, b"peek %d\r\n" % theirs, b"NOT_FOUND\r\n")
        talk(t, b"stats-job %d\r\n" % theirs, b"NOT_FOUND\r\n")
        talk(t, b"peek %d\r\n" % mine, b"FOUND %d 4\r\nseen\r\n" % mine)
        talk(t, b"peek-ready\r\n", b"NOT_PERMITTED\r\n")        # on default
        talk(t, b"use jobs-m\r\npeek-ready\r\n", b"USING jobs-m\r\nFOUND %d 4\r\nseen\r\n" % mine)
        for line in (b"put 0 0 60 1\r\nx", b"reserve", b"delete %d" % mine, b"watch jobs-m", b"kick 1"):
            talk(t, line + b"\r\n", b"NOT_PERMITTED\r\n")
        assert ask(t, b"list-tubes\r\n", b"\n\r\n").startswith(b"OK ")


def test_pipelined_refusals_wait_for_a_blocked_reserve(guarded):
    with login(guarded, "both") as t:
        t.sendall(b"watch in\r\nignore default\r\nreserve-with-timeout 5\r\nkick 1\r\nwatch out\r\n"
                  b"use out\r\nput 0 0 60 9\r\nreserve\r\n\r\nstats\r\nlist-tube-used\r\n")
        time.sleep(0.3)
        job = put_plain(guarded, "in", b"work")
        reply = b""
        while not reply.endswith(b"USING out\r\n"):
            chunk = t.recv(65536)
            assert chunk, reply
            reply += chunk
        assert reply == (b"WATCHING 2\r\nWATCHING 1\r\nRESERVED %d 4\r\nwork\r\nNOT_PERMITTED\r\n"
                         b"NOT_PERMITTED\r\nUSING out\r\nINSERTED %d\r\nNOT_PERMITTED\r\nUSING out\r\n"
                         % (job, job + 1))


def test_admins_old_and_new_run_everything(guarded):
    job = put_plain(guarded, "anything", b"x")
    for name in ("old", "boss"):
        with login(guarded, name) as t:
            talk(t, b"use anything\r\nkick-job %d\r\npause-tube anything 0\r\n" % job,
                 b"USING anything\r\nNOT_FOUND\r\nPAUSED\r\n")
            assert ask(t, b"watch anything\r\nstats-job %d\r\n" % job, b"\n\r\n").startswith(
                b"WATCHING 2\r\nOK ")


def test_refusals_are_logged_without_a_flood(guarded):
    with login(guarded, "prod") as t:
        talk(t, b"kick 1\r\n" * 200, b"NOT_PERMITTED\r\n" * 200)
    wait_for_log(guarded, "prod (127.0.0.1) may not kick", 1)
    time.sleep(0.2)
    assert guarded.log.count("prod (127.0.0.1) may not kick") == 1


def test_a_client_that_never_reads_its_refusals_is_closed(guarded):
    with login(guarded, "work") as t:
        t.sendall(b"watch jobs-idle\r\nignore default\r\nreserve\r\n")
        try:
            for _ in range(200):
                t.sendall(b"kick 1\r\n" * 100)
        except OSError:
            pass
        t.settimeout(5)
        data = b""
        try:
            chunk = t.recv(65536)
            while chunk:
                data += chunk
                chunk = t.recv(65536)
        except OSError:
            pass
    # every refusal waited behind the reserve, and went with the connection
    assert b"NOT_PERMITTED" not in data
    wait_for_log(guarded, "piled up 1024 refused commands behind a waiting one: closed", 1)


def test_bad_roles_stop_the_start(pki, tmp_path):
    tls = ["--tls-listen", "%s:%d" % (HOST, testing.free_port()), "--tls-cert", pki.server[0],
           "--tls-key", pki.server[1]]
    hashed = hashlib.sha256(b"t").hexdigest()
    for roles, message in (("reader", "line 1: 'reader' is not a role"),
                           ("worker:", "line 1: '' is not a tube pattern"),
                           ("admin:x", "line 1: admin takes no tube patterns")):
        (tmp_path / "tokens").write_text("someone %s %s\n" % (hashed, roles))
        status, err = start_fails(*tls, "--auth-tokens", tmp_path / "tokens")
        assert status == 78 and message in err.splitlines()[-1] and "Traceback" not in err, err


def test_sighup_gives_new_connections_new_roles(pki, tmp_path):
    path = write_tokens(tmp_path / "tokens", {"prod": TOKENS["prod"]})
    s = tls_server(pki.server, "--auth-tokens", path)
    s.ctx = client_context(pki.ca.cert)
    try:
        with login(s, "prod") as kept:
            talk(kept, b"use other\r\n", b"NOT_PERMITTED\r\n")
            write_tokens(tmp_path / "tokens", {"prod": (TOKENS["prod"][0], "producer:other")})
            s.signal(signal.SIGHUP)
            wait_for_log(s, "tokens reloaded from %s: 1" % path, 1)
            # the connection in keeps the roles it came in with
            talk(kept, b"use other\r\nuse jobs-x\r\n", b"NOT_PERMITTED\r\nUSING jobs-x\r\n")
            with login(s, "prod") as t:
                talk(t, b"use other\r\nuse jobs-x\r\n", b"USING other\r\nNOT_PERMITTED\r\n")
    finally:
        s.stop()


class FakeTransport:
    def __init__(self):
        self.written = []

    def write(self, data):
        self.written.append(data)

    def is_closing(self):
        return False

    def get_write_buffer_size(self):
        return 0


class FakeCore:
    job_tube = staticmethod({}.get)
    strict = False


class FakeConn:
    caught_up = True

    def __init__(self):
        self.fed = b""

    def feed(self, data):
        self.fed += data


# call_soon and hold_reading for a filter whose test holds nothing back
LOOP = (lambda fn: pytest.fail("nothing was held"), lambda hold: pytest.fail("nothing was held"))


def test_parted_replies_are_one_reply_however_they_are_cut():
    # reserve-batch's jobs and list-tube's rows belong to one reply each: a
    # refusal behind them comes after the last part, not after the first
    replies = [b"RESERVED_BATCH 2\r\nRESERVED 4 3\r\na\r\n\r\nRESERVED 5 1\r\nb\r\n",
               b"RESERVED_BATCH 0\r\n", b"USING jobs-x\r\n", b"LISTED 2 0\r\n4 0 1 0 3\r\n5 0 1 0 1\r\n"]
    engine_out = b"".join(replies)
    expected = b"NOT_PERMITTED\r\n".join(replies) + b"NOT_PERMITTED\r\n"
    for cut in range(1, len(engine_out)):
        transport, conn = FakeTransport(), FakeConn()
        flt = RoleFilter(parse_roles(["worker", "monitor:jobs-*"]), "t", "a", FakeCore(), 100, *LOOP)
        write, writelines = flt.writers(conn, transport.write, transport)
        flt.feed(b"reserve-batch 2\r\nkick 1\r\nreserve-batch 5 1\r\nkick 1\r\nuse jobs-x\r\nkick 1\r\n"
                 b"list-tube ready 0 2\r\nkick 1\r\n")
        assert conn.fed == b"reserve-batch 2 0\r\nreserve-batch 5 1\r\nuse jobs-x\r\nlist-tube ready 0 2\r\n"
        write(engine_out[:cut])
        writelines([engine_out[cut:cut + 3], engine_out[cut + 3:]])
        assert b"".join(transport.written) == expected, cut


def test_list_tube_cursors_go_through_as_written():
    transport, conn = FakeTransport(), FakeConn()
    flt = RoleFilter(parse_roles(["monitor"]), "t", "a", FakeCore(), 100, *LOOP)
    flt.writers(conn, transport.write, transport)
    flt.feed(b"list-tube delayed 17.42 3\r\nlist-tube buried 0.9 1\r\nlist-tube reserved 0 1000\r\n")
    assert conn.fed == (b"list-tube delayed 17.42 3\r\nlist-tube buried 0.9 1\r\n"
                        b"list-tube reserved 0 1000\r\n")


def test_extensions_by_role(guarded):
    job = put_plain(guarded, "jobs-x", b"batched")
    with login(guarded, "mon") as t:
        talk(t, b"list-tube ready 0 1\r\n", b"NOT_PERMITTED\r\n")      # on default
        # the row: id, priority, age, time left, size
        reply = ask(t, b"use jobs-x\r\nlist-tube ready 0 1\r\n", b" 7\r\n")
        assert re.fullmatch(rb"USING jobs-x\r\nLISTED 1 0\r\n%d \d+ \d+ 0 7\r\n" % job, reply), reply
        talk(t, b"use elsewhere\r\nflush-tube jobs-x\r\n", b"NOT_PERMITTED\r\n" * 2)
    with login(guarded, "work") as t:
        talk(t, b"watch jobs-x\r\nignore default\r\nreserve-batch 5\r\nflush-buried jobs-x\r\n"
             b"delete-batch %d\r\n" % job,
             b"WATCHING 2\r\nWATCHING 1\r\nRESERVED_BATCH 1\r\nRESERVED %d 7\r\nbatched\r\n"
             b"NOT_PERMITTED\r\nNOT_PERMITTED\r\n" % job)
        talk(t, b"delete %d\r\n" % job, b"DELETED\r\n")


def test_keys_and_retry_limits_by_role(guarded):
    with login(guarded, "prod") as t:
        reply = ask(t, b"use jobs-k\r\nput 0 0 60 1 idp:k\r\na\r\nput 0 0 60 1 idp:k\r\nb\r\n",
                    b" READY\r\n")
        job = int(reply.split(b"\r\n")[1].split()[1])
        assert reply == b"USING jobs-k\r\nINSERTED %d\r\nINSERTED %d READY\r\n" % (job, job)
        talk(t, b"retry-limit\r\nretry-limit 3\r\n", b"NOT_PERMITTED\r\n" * 2)
    with login(guarded, "mon") as t:
        talk(t, b"use jobs-k\r\nretry-limit\r\nretry-limit 3 dead\r\nretry-limit default\r\n",
             b"USING jobs-k\r\nRETRY_LIMIT 0\r\n" + b"NOT_PERMITTED\r\n" * 2)
    with login(guarded, "boss") as t:
        talk(t, b"use jobs-k\r\nretry-limit 3 dead\r\n", b"USING jobs-k\r\nRETRY_LIMIT 3 dead\r\n")


def test_schedules_by_role(guarded):
    # listing is a monitor's (as stats); the rest an admin's, a schedule's body
    # swallowed with its refusal
    with login(guarded, "prod") as t:
        talk(t, b"use jobs-s\r\nschedule s 0 60 fire 2 every 60\r\nhi\r\nlist-schedules\r\n"
             b"fire-schedule s\r\nunschedule s\r\npause-schedule s\r\nresume-schedule s\r\n",
             b"USING jobs-s\r\n" + b"NOT_PERMITTED\r\n" * 6)
    with login(guarded, "boss") as t:
        talk(t, b"use jobs-s\r\nschedule s 0 60 fire 2 every 3600\r\nhi\r\nschedule x 0 0 fire 1 every\r\n"
             b"a\r\n", b"USING jobs-s\r\nSCHEDULED\r\nBAD_FORMAT\r\n")
    with login(guarded, "mon") as t:
        reply = ask(t, b"list-schedules\r\n", b"body-bytes: 2\n\r\n")
        assert b"- name: s\n  tube: jobs-s\n" in reply
        talk(t, b"fire-schedule s\r\n", b"NOT_PERMITTED\r\n")
    with login(guarded, "boss") as t:
        reply = ask(t, b"fire-schedule s\r\npause-schedule s\r\nresume-schedule s\r\nunschedule s\r\n",
                    b"UNSCHEDULED\r\n")
        assert re.fullmatch(rb"FIRED \d+\r\nPAUSED\r\nRESUMED\r\nUNSCHEDULED\r\n", reply), reply


def test_move_job_and_reprioritize_job_are_an_admins(guarded):
    # even on a job of the client's own tubes, to a tube of its own: only an
    # admin moves jobs between tubes or changes their priority
    job = put_plain(guarded, "jobs-mv", b"a")
    for name in ("prod", "work", "mon", "both"):
        with login(guarded, name) as t:
            talk(t, b"move-job %d jobs-mv2\r\nreprioritize-job %d 1\r\n" % (job, job),
                 b"NOT_PERMITTED\r\n" * 2)
    with login(guarded, "boss") as t:
        talk(t, b"move-job %d jobs-mv2\r\nreprioritize-job %d 1\r\n" % (job, job),
             b"MOVED\r\nREPRIORITIZED\r\n")
    with client(guarded.port) as c:
        stats = c.stats_job(job)
        assert (stats["tube"], stats["pri"]) == ("jobs-mv2", 1)
        c.delete(job)


def test_answers_wait_for_the_engine_however_its_replies_are_cut():
    # the engine's replies (bodies holding CRLFs, a big one by writelines) cut
    # at every byte: the refusals behind them come out right after each
    replies = [b"WATCHING 2\r\n", b"RESERVED 7 6\r\na\r\nb\r\n\r\n", b"OK 3\r\n---\r\n", b"FOUND 9 2\r\nOK\r\n"]
    engine_out = b"".join(replies)
    expected = (b"WATCHING 2\r\nNOT_PERMITTED\r\nRESERVED 7 6\r\na\r\nb\r\n\r\nNOT_PERMITTED\r\n"
                b"OK 3\r\n---\r\nFOUND 9 2\r\nOK\r\nNOT_PERMITTED\r\n")
    for cut in range(1, len(engine_out)):
        transport, conn = FakeTransport(), FakeConn()
        flt = RoleFilter(parse_roles(["worker"]), "t", "a", FakeCore(), 100, *LOOP)
        write, writelines = flt.writers(conn, transport.write, transport)
        flt.feed(b"watch w\r\nkick 1\r\nreserve\r\nkick 1\r\nlist-tubes-watched\r\nlist-tubes-watched\r\n"
                 b"kick 1\r\n")
        assert conn.fed == b"watch w\r\nreserve\r\nlist-tubes-watched\r\nlist-tubes-watched\r\n"
        assert transport.written == []
        write(engine_out[:cut])
        writelines([engine_out[cut:cut + 3], engine_out[cut + 3:]])
        assert b"".join(transport.written) == expected, cut
        flt.feed(b"kick 1\r\n")                  # nothing waits: answered at once
        assert transport.written[-1] == b"NOT_PERMITTED\r\n"


def test_put_edges_through_the_filter(guarded):
    big = b"x" * 70000                       # over -z's default 65535
    mistakes = (b"use jobs-e\r\nput 0 0 60 2\r\nabcd\r\nput 0 0 60 %d\r\n%s\r\nput 0 0 60 1 junk\r\n"
                % (len(big), big))
    answers = b"USING jobs-e\r\nEXPECTED_CRLF\r\nUNKNOWN_COMMAND\r\nJOB_TOO_BIG\r\nBAD_FORMAT\r\n"
    with socket.create_connection((HOST, guarded.port)) as plain:      # as the engine answers them
        talk(plain, mistakes, answers)
    with login(guarded, "prod") as t:
        talk(t, mistakes, answers)
        # a body in pieces, with a refusal pipelined behind it
        t.sendall(b"put 0 0 60 10\r\nkick")
        time.sleep(0.1)
        t.sendall(b" 1\r\n")
        time.sleep(0.1)
        reply = ask(t, b"ab\r\nkick 1\r\n", b"NOT_PERMITTED\r\n")
        job = int(reply.split()[1])
        assert reply == b"INSERTED %d\r\nNOT_PERMITTED\r\n" % job
    with client(guarded.port) as c:
        assert c.peek(job) == b"kick 1\r\nab"


def test_a_big_reply_then_a_refusal(guarded):
    body = b"\r\n".join(b"line %d" % i for i in range(3000))      # a reply in chunks of its own
    job = put_plain(guarded, "jobs-big", body)
    with login(guarded, "mon") as t:
        talk(t, b"peek %d\r\nkick 1\r\npeek %d\r\n" % (job, job),
             b"FOUND %d %d\r\n%s\r\nNOT_PERMITTED\r\nFOUND %d %d\r\n%s\r\n" % (job, len(body), body, job,
                                                                          len(body), body))


def test_old_tokens_files_are_admins_and_traced(pki, tmp_path):
    path = tmp_path / "tokens"
    path.write_text("".join("%s %s\n" % (name, hashlib.sha256(TOKENS[name][0].encode()).hexdigest())
                            for name in ("old", "work")))
    s = tls_server(pki.server, "-VV", "--auth-tokens", str(path))
    s.ctx = client_context(pki.ca.cert)
    try:
        with login(s, "work") as t:             # no roles on its line: an admin
            talk(t, b"pause-tube default 0\r\nkick 1\r\n", b"PAUSED\r\nKICKED 0\r\n")
    finally:
        s.stop()
    assert "authenticated as work (admin)" in s.log


def test_restricted_connections_are_traced(pki, tmp_path):
    s = tls_server(pki.server, "-VV", "--auth-tokens", write_tokens(tmp_path / "tokens"))
    s.ctx = client_context(pki.ca.cert)
    try:
        with login(s, "mon") as t:
            talk(t, b"kick 1\r\nlist-tube-used\r\n", b"NOT_PERMITTED\r\nUSING default\r\n")
    finally:
        s.stop()
    assert "authenticated as mon (monitor:jobs-*)" in s.log
    assert "'kick 1\\r\\nlist-tube-used\\r\\n'" in s.log and "'NOT_PERMITTED\\r\\n'" in s.log, s.log


def test_the_client_raises_not_permitted(guarded):
    tls = tls_context(guarded.ca)
    with Client(("localhost", guarded.tls_port), tls=tls, token=TOKENS["prod"][0]) as c:
        c.use("jobs-client")
        assert c.put(b"ok") > 0
        with pytest.raises(ServerError, match="NOT_PERMITTED .the token's roles") as raised:
            c.stats()
        assert raised.value.reply == b"NOT_PERMITTED"


def test_metrics_wants_a_monitor_or_an_admin(pki, tmp_path):
    from tests.security.test_auth import https_get
    mport = testing.free_port()
    s = Server("fastbean", "--metrics", "%s:%d" % (HOST, mport), "--metrics-tls", "--metrics-auth",
               "--tls-cert", pki.server[0], "--tls-key", pki.server[1],
               "--auth-tokens", write_tokens(tmp_path / "tokens")).start()
    ctx = client_context(pki.ca.cert)
    try:
        wait_listening(mport, s.proc, lambda: s.log)
        for name, status in (("mon", 200), ("old", 200), ("boss", 200), ("prod", 403), ("work", 403)):
            assert https_get(mport, "/metrics", ctx, "Bearer " + TOKENS[name][0])[0] == status, name
    finally:
        s.stop()
    assert "prod (127.0.0.1) may not read /metrics" in s.log


class GateServer:
    """What AuthConnProtocol asks of the server, around a real engine."""

    class loop:
        @staticmethod
        def call_later(delay, callback):
            return GateServer.Timer()

        @staticmethod
        def call_soon(callback):
            callback()

    class Timer:
        def cancel(self):
            pass

    class config:
        max_job_size = 65535
        auth_timeout = 10.0
        auth_by_certificate = False

    verbosity = 0

    def __init__(self, auth):
        self.auth = auth
        self.core = Core(version=b"test")

    def admit(self, proto, address=None):
        return True

    def authenticated(self, proto):
        pass


class GateTransport(FakeTransport):
    def get_extra_info(self, name):
        return ("127.0.0.1", 1) if name == "peername" else None

    def writelines(self, chunks):
        self.written.append(b"".join(chunks))

    def close(self):
        pass


def test_an_admin_reads_straight_into_the_engine(tmp_path):
    # once in, an admin's reads go to the engine's own feed and its replies to
    # the transport's write: nothing of the roles on its path
    server = GateServer(TokenAuth(write_tokens(tmp_path / "tokens")))
    for name, restricted in (("boss", False), ("old", False), ("prod", True)):
        proto = AuthConnProtocol(server)
        transport = GateTransport()
        proto.handshaken(transport)
        proto.data_received(b"auth %s\r\nlist-tube-used\r\n" % TOKENS[name][0].encode())
        assert b"".join(transport.written) == b"AUTHENTICATED\r\nUSING default\r\n"
        if restricted:
            assert proto.data_received == proto._filter.feed
        else:
            assert proto._filter is None and proto.data_received == proto._conn.feed


# -- a client whose roles allow every standard command answered as by the engine --

SESSION_LINES = st.sampled_from([
    b"put 0 0 60 3\r\nabc\r\n", b"put 5 0 1 0\r\n\r\n", b"put 0 0 60 2\r\nabcd\r\n",
    b"put 0 0 60 100\r\n" + b"x" * 100 + b"\r\n", b"put 0 0 60 2 junk\r\nhi\r\n", b"put 0 0\r\n",
    b"put 0 0 60 4\r\nkick\r\n", b"use a\r\n", b"use b\r\n", b"use -bad\r\n", b"watch a\r\n",
    b"watch b\r\n", b"ignore default\r\n", b"ignore a\r\n", b"ignore b\r\n", b"reserve-with-timeout 0\r\n",
    b"reserve-with-timeout -1x\r\n", b"delete 1\r\n", b"delete 2\r\n", b"release 1 0 0\r\n",
    b"release 2 1 0\r\n", b"bury 1 0\r\n", b"bury 3 0\r\n", b"touch 2\r\n", b"peek 1\r\n", b"peek 3\r\n",
    b"peek-ready\r\n", b"peek-delayed\r\n", b"peek-buried\r\n", b"reserve-job 2\r\n", b"reserve-job 9\r\n",
    b"list-tubes\r\n", b"list-tube-used\r\n", b"list-tubes-watched\r\n", b"nonsense\r\n", b"\r\n",
    b"delete x\r\n", b"y" * 300 + b"\r\n", b"stats-job 99\r\n", b"stats-tube nothing\r\n",
    b"reserve-batch 2\r\n", b"reserve-batch 3 0\r\n", b"reserve-batch 0\r\n",
    b"put 0 0 60 2 idp:k\r\nhi\r\n", b"put 1 0 60 2 idp:k:5\r\nhi\r\n", b"put 0 0 60 2 idp:\r\nhi\r\n",
    b"retry-limit\r\n",
])


@settings(max_examples=200 * FUZZ, deadline=None)
@given(lines=st.lists(SESSION_LINES, max_size=30), cuts=st.lists(st.integers(1, 400), max_size=8))
def test_allowed_commands_are_answered_as_the_engine_answers_them(lines, cuts):
    stream = b"".join(lines)
    plain = EngineClient(Core(version=b"test", max_job_size=64))
    for _ in range(2):                  # jobs 1 and 2 in tube a
        plain.call(b"use a\r\nput 0 0 60 1\r\nj\r\nuse default\r\n")
    plain.take()
    expected = plain.call(stream)

    core = Core(version=b"test", max_job_size=64)
    setup = EngineClient(core)
    for _ in range(2):
        setup.call(b"use a\r\nput 0 0 60 1\r\nj\r\nuse default\r\n")
    transport = FakeTransport()
    flt = RoleFilter(parse_roles(["producer", "worker", "monitor"]), "t", "a", core, 64, *LOOP)
    conn = core.connect(lambda on: None, lambda: None)
    conn.attach(*flt.writers(conn, transport.write, transport), lambda: None)
    start = 0
    for cut in sorted(set(cuts)) + [len(stream)]:
        if start < cut <= len(stream):
            flt.feed(stream[start:cut])
            start = cut
    assert b"".join(transport.written) == expected


@pytest.mark.parametrize("how", ["close", "close-notify"])
def test_commands_behind_a_blocked_reserve_do_not_run_after_the_client_goes(guarded, how):
    # Issue 35, defect 4, through the role filter (tests/security/test_tls.py has it
    # on a bare TLS connection): nothing queued behind the reserve runs once
    # the client's stream has ended.
    def put_to_out():
        with client(guarded.port) as c:
            r = c.cmd(b"stats-tube out")
            return 0 if r == b"NOT_FOUND" else int(re.search(rb"\ntotal-jobs: (\d+)\n", c.body(int(r.split()[1])))[1])

    with client(guarded.port) as c:         # the reserve must block: "in" emptied
        c.cmd(b"watch in")
        c.cmd(b"ignore default")
        while (job := c.job(b"reserve-with-timeout 0")) is not None:
            c.cmd(b"delete %d" % job[0], b"DELETED")
    before = put_to_out()
    t = login(guarded, "both")
    talk(t, b"watch in\r\nignore default\r\nreserve\r\nuse out\r\nput 0 0 60 1\r\nx\r\n",
         b"WATCHING 2\r\nWATCHING 1\r\n")
    conns = current_connections(guarded)
    hang_up(t, how)
    deadline = time.monotonic() + 10
    while current_connections(guarded) != conns - 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert put_to_out() == before
