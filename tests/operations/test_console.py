"""The web console at the HTTP level (--console): its flags, every page
against a node holding jobs in every state, bad input, CSRF, the headers
every response carries, the actions of an admin and the refusals of a
monitor, sign-in, the event stream, and https."""
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from fastbean.cli import BadValue, Usage, parse_args
from tests.support.consolekit import TOKENS, Node, wait_for
from tests.support.servers import HOST, free_port

pytestmark = pytest.mark.timeout(120)

HEADERS = {"Content-Security-Policy": "default-src 'self'", "X-Frame-Options": "DENY",
           "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"}


@pytest.fixture(scope="module")
def node():
    n = Node().start()
    n.ids = n.fill()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    n = Node(tokens_dir=tmp_path_factory.mktemp("console-tokens")).start()
    n.ids = n.fill()
    c = n.client()
    c.use("secret")
    n.secret = c.put(b"not for monitors")
    c.close()
    yield n
    n.stop()




# -- flags ---------------------------------------------------------------------------------

def test_console_flags():
    assert parse_args(["--console", "8080"]).console_host == "127.0.0.1"
    config = parse_args(["--console", "[::1]:8080"])
    assert (config.console_host, config.console_port) == ("::1", 8080)
    assert parse_args([]).console_port is None
    for bad in ("web", "127.0.0.1:0", "127.0.0.1:70000", ":"):
        with pytest.raises(BadValue, match="--console"):
            parse_args(["--console", bad])
    with pytest.raises(BadValue, match="--auth-tokens"):
        parse_args(["--console", ":8080"])
    with pytest.raises(BadValue, match="--auth-tokens"):
        parse_args(["--console", "10.1.2.3:8080"])
    with pytest.raises(Usage, match="--console-tls needs --console"):
        parse_args(["--console-tls"])
    with pytest.raises(Usage, match="--console-tls needs --tls-cert"):
        parse_args(["--console", "8080", "--console-tls"])


def test_every_interface_without_tokens_is_refused_in_one_line():
    p = subprocess.run([sys.executable, "-m", "fastbean", "-p", str(free_port()), "--console", ":%d" % free_port()],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 5
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--auth-tokens" in lines[0], p.stderr


# -- pages ---------------------------------------------------------------------------------

PAGES = ("/", "/tubes", "/tubes?sort=ready&dir=desc", "/tubes?q=mail", "/search", "/connections", "/dead",
         "/cluster", "/history.json", "/schedules")


@pytest.mark.parametrize("path", PAGES)
def test_page_answers_with_strict_headers(node, path):
    r = node.http().get(path)
    assert r.status == 200, r.text
    for name, value in HEADERS.items():
        assert value in r.headers.get(name, ""), name
    assert "'unsafe-inline'" not in r.headers["Content-Security-Policy"]


def test_overview_shows_the_queue(node):
    text = node.http().get("/").text
    for word in ("Overview", "uptime", "current-jobs-buried", "chart-rates", "binlog"):
        assert word in text
    cookie = node.http().get("/").headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie


def test_tubes_list_filters_sorts_and_pages(node):
    c = node.client()
    for i in range(250):
        c.use("bulk-%03d" % i)
        c.put(b"x")
    c.close()
    http = node.http()
    r = http.get("/tubes?q=bulk-&sort=name&dir=desc")
    assert r.status == 200
    assert "bulk-249" in r.text and "bulk-100" not in r.text and "page 1 of 3" in r.text
    r = http.get("/tubes?q=bulk-&sort=name&dir=desc&page=3")
    assert "bulk-000" in r.text and "bulk-249" not in r.text
    r = http.get("/tubes?sort=buried&dir=desc")
    assert r.text.index(">emails<") < r.text.index(">bulk-000<")


@pytest.mark.parametrize("state", ["ready", "delayed", "reserved", "buried"])
def test_a_tubes_jobs_by_state(node, state):
    r = node.http().get("/tubes/emails?state=%s" % state)
    assert r.status == 200, r.text
    for job_id in node.ids[state]:
        assert '/jobs/%d"' % job_id in r.text
    if state == "reserved":
        assert "connection" in r.text


def test_a_tubes_jobs_are_paged(node):
    r = node.http().get("/tubes/emails?state=ready&count=2")
    assert r.status == 200
    assert 'rel="next"' in r.text
    ids = node.ids["ready"]
    assert '/jobs/%d"' % ids[2] not in r.text
    nxt = r.text.split('rel="next"')[0].rsplit('href="', 1)[1].split('"')[0].replace("&amp;", "&")
    r = node.http().get(nxt)
    assert '/jobs/%d"' % ids[2] in r.text


def test_a_job_every_field_and_body(node):
    job_id = node.ids["ready"][0]
    r = node.http().get("/jobs/%d" % job_id)
    assert r.status == 200, r.text
    for field in ("tube", "state", "pri", "age", "delay", "ttr", "time-left", "file", "reserves", "timeouts",
                  "releases", "buries", "kicks"):
        assert "<th>%s</th>" % field in r.text
    assert "body-json" in r.text and "&#34;ann@example.com&#34;" in r.text
    assert "body-hex" in r.text and "7b 22 74 6f" in r.text


def test_search_finds_by_body_and_by_id(node):
    http = node.http()
    job_id = node.ids["buried"][0]
    r = http.get("/search?q=bad+job")
    assert r.status == 200

    def done():
        s = http.get("/search.json?q=bad+job").json()
        return s if s["state"] != "running" else None

    s = wait_for(done, what="the search's end")
    assert [row["id"] for row in s["rows"]] == [job_id]
    http.get("/search?q=%d" % job_id)
    s = wait_for(lambda: (lambda s: s if s["state"] != "running" else None)(
        http.get("/search.json?q=%d" % job_id).json()))
    assert job_id in [row["id"] for row in s["rows"]]
    http.get("/search?q=re:%5Eann%7Cbad")
    s = wait_for(lambda: (lambda s: s if s["state"] != "running" else None)(
        http.get("/search.json?q=re:%5Eann%7Cbad").json()))
    assert [row["id"] for row in s["rows"]] == [job_id]


BAD = [("/jobs/abc", 400), ("/jobs/0", 400), ("/jobs/99999999", 404), ("/jobs/" + "9" * 40, 400),
       ("/tubes/bad%20name", 400), ("/tubes/-x", 400), ("/tubes?page=x", 400), ("/tubes?sort=nope", 400),
       ("/tubes/emails?state=lost", 400), ("/tubes?q=" + "a" * 5000, 414), ("/search?q=re:(", 400),
       ("/search?q=x&limit=0", 400), ("/nope", 404)]


@pytest.mark.parametrize("path,status", BAD)
def test_bad_input_gets_a_short_4xx(node, path, status):
    r = node.http().get(path)
    assert r.status == status, r.text
    assert "Traceback" not in r.text and 'id="reason"' in r.text


def test_forged_post_is_refused(node):
    http = node.http()
    for fields in ({}, {"csrf": "forged"}, {"csrf": node.http().get("/").csrf()}):
        r = http.post("/tubes/emails/pause", dict(fields, seconds="60"), csrf=False)
        assert r.status == 403, r.text
        assert "CSRF" in r.text
    r = http.post("/tubes/emails/pause", {"seconds": "60"}, headers={"Origin": "http://evil.example"})
    assert r.status == 403
    c = node.client()
    assert c.stats_tube("emails")["pause"] == 0


def test_events_stream_a_sample_a_second(node):
    with urllib.request.urlopen(node.url + "/events", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        line = r.readline()
        while not line.startswith(b"data: "):
            line = r.readline()
    sample = json.loads(line[6:])
    for key in ("t", "puts", "reserves", "deletes", "timeouts", "buries", "ready", "buried", "connections",
                "memory"):
        assert key in sample


# -- actions -------------------------------------------------------------------------------

def test_tube_actions_as_admin(node):
    http = node.http()
    c = node.client()
    r = http.post("/tubes/emails/pause", {"seconds": "120"})
    assert r.status == 200 and "PAUSED" in r.text
    assert c.stats_tube("emails")["pause"] == 120
    r = http.post("/tubes/emails/resume")
    assert c.stats_tube("emails")["pause"] == 0
    r = http.post("/tubes/emails/retry-limit", {"count": "3", "dead": "emails-dead"})
    assert "RETRY_LIMIT 3 emails-dead" in r.text
    c.use("emails")
    assert c.retry_limit() == (3, "emails-dead")
    http.post("/tubes/emails/retry-limit", {"default": "1"})
    assert c.retry_limit() == (0, None)
    c.use("kicked")
    for _ in range(3):
        c.put(b"k")
    for _ in range(3):
        job_id, _ = c.job(b"reserve-with-timeout 0") if False else (None, None)
    c.close()
    w = node.client()
    w.watch("kicked")
    for _ in range(3):
        job_id, _ = w.job(b"reserve-with-timeout 1")
        w.cmd(b"bury %d 0" % job_id, b"BURIED")
    r = http.post("/tubes/kicked/kick", {"count": "2"})
    assert "KICKED 2" in r.text
    assert w.stats_tube("kicked")["current-jobs-buried"] == 1
    r = http.post("/tubes/kicked/flush-buried")
    assert "FLUSHED 1" in r.text
    r = http.post("/tubes/kicked/flush-tube")
    assert "FLUSHED 2" in r.text
    w.close()
    assert '"console-action"' in node.log() and '"client": "local"' in node.log()


def test_job_actions_as_admin(node):
    http = node.http()
    c = node.client()
    c.use("acts")
    job_id = c.put(b"act on me", pri=5)
    r = http.post("/jobs/%d/copy" % job_id, {"tube": "acts-copy"})
    assert r.status == 200 and "INSERTED" in r.text
    assert c.stats_tube("acts-copy")["current-jobs-ready"] == 1
    c.watch("acts")
    got, _ = c.job(b"reserve-job %d" % job_id)
    c.cmd(b"bury %d 5" % got, b"BURIED")
    r = http.post("/jobs/%d/kick" % job_id)
    assert "KICKED" in r.text and c.stats_job(job_id)["state"] == "ready"
    r = http.post("/jobs/%d/delete" % job_id)
    assert r.status == 200 and "DELETED" in r.text
    assert http.get("/jobs/%d" % job_id).status == 404
    c.close()


def test_move_and_reprioritize_as_admin(node):
    http = node.http()
    c = node.client()
    c.use("acts")
    job_id = c.put(b"move me", pri=5)
    r = http.post("/jobs/%d/priority" % job_id, {"pri": "7"})
    assert r.status == 200 and "REPRIORITIZED" in r.text
    assert c.stats_job(job_id)["pri"] == 7
    r = http.post("/jobs/%d/move" % job_id, {"tube": "acts-moved"})
    assert r.status == 200 and "MOVED" in r.text
    assert c.stats_job(job_id)["tube"] == "acts-moved"
    c.close()


# -- signed in -----------------------------------------------------------------------------

def test_sign_in_is_needed_and_checked(guarded):
    http = guarded.http()
    r = http.get("/tubes")
    assert "/signin?next=" in r.url and r.url.endswith("tubes") and "Token" in r.text
    assert http.post("/tubes/emails/pause", {"seconds": "1", "csrf": "x"}, csrf=False).status == 401
    r = http.post("/signin", {"token": "wrong"}, csrf=False)
    assert r.status == 401
    r = http.signin("prod")
    assert r.status == 403 and "monitor" in r.text
    r = http.signin("mon")
    assert r.status == 200 and "mon" in r.text
    for elsewhere in ("//evil.example/", "/\\evil.example/", "https://evil.example/"):
        r = guarded.http().post("/signin", {"token": TOKENS["mon"][0], "next": elsewhere}, csrf=False)
        assert r.url == guarded.url + "/", elsewhere


def test_sigterm_with_open_streams_stops_cleanly(tmp_path):
    n = Node().start()
    try:
        stream = urllib.request.urlopen(n.url + "/events", timeout=10)
        assert stream.readline().startswith(b"data: ")
        n.server.proc.send_signal(signal.SIGTERM)
        assert n.server.proc.wait(30) == 0
        stream.close()
    finally:
        n.stop()


def test_monitor_sees_its_tubes_only(guarded):
    http = guarded.http()
    http.signin("mon")
    text = http.get("/tubes").text
    assert ">emails<" in text and ">secret<" not in text and ">default<" not in text
    assert http.get("/tubes/secret").status == 404
    assert http.get("/jobs/%d" % guarded.secret).status == 404
    assert http.get("/jobs/%d" % guarded.ids["ready"][0]).status == 200
    admin = guarded.http()
    admin.signin("boss")
    assert ">secret<" in admin.get("/tubes").text


def test_monitor_is_refused_every_action(guarded):
    http = guarded.http()
    http.signin("mon")
    page = http.get("/tubes/emails")
    assert "tube-actions" not in page.text and "(read-only)" in page.text
    csrf = page.csrf()
    c = guarded.client()
    for path, fields in (("/tubes/emails/pause", {"seconds": "60"}), ("/tubes/emails/kick", {"count": "5"}),
                         ("/tubes/emails/flush-buried", {}), ("/tubes/emails/flush-tube", {}),
                         ("/tubes/emails/retry-limit", {"count": "2"})):
        r = http.post(path, dict(fields, csrf=csrf), csrf=False)
        assert r.status == 403, (path, r.text)
        assert "may not" in r.text
    job_id = guarded.ids["ready"][1]
    for action, fields in (("delete", {}), ("kick", {}), ("copy", {})):
        r = http.post("/jobs/%d/%s" % (job_id, action), dict(fields, csrf=csrf), csrf=False)
        assert r.status == 403, (action, r.text)
    assert c.stats_job(job_id)["tube"] == "emails"
    s = c.stats_tube("emails")
    assert s["pause"] == 0 and s["current-jobs-buried"] == 1 and s["current-jobs-ready"] == 3
    assert '"permission-denied"' in guarded.log()


def test_monitor_may_not_move_or_reprioritize(guarded):
    http = guarded.http()
    http.signin("mon")
    csrf = http.get("/").csrf()
    job_id = guarded.ids["ready"][2]
    for action, fields in (("priority", {"pri": "1"}), ("move", {"tube": "emails-2"})):
        r = http.post("/jobs/%d/%s" % (job_id, action), dict(fields, csrf=csrf), csrf=False)
        assert r.status == 403 and "may not" in r.text, (action, r.text)
    info = guarded.client().stats_job(job_id)
    assert info["tube"] == "emails" and info["pri"] != 1


def test_admin_acts_when_signed_in(guarded):
    http = guarded.http()
    http.signin("boss")
    r = http.post("/tubes/secret/pause", {"seconds": "30"})
    assert r.status == 200 and "PAUSED" in r.text, r.text
    assert guarded.client().stats_tube("secret")["pause"] == 30
    log = [json.loads(line) for line in guarded.log().splitlines() if '"console-action"' in line]
    assert any(e["client"] == "boss" and e["action"] == "pause" for e in log)
    r = http.post("/signout")
    assert "/signin" in r.url
    assert "/signin?next=" in http.get("/").url


def test_console_over_https(tmp_path):
    n = Node(tls=True, tokens_dir=tmp_path).start()
    try:
        http = n.http()
        r = http.signin("boss")
        assert r.status == 200
        cookie = [c for c in http.jar if c.name == "fastbean_console"][0]
        assert cookie.secure
        with socket.create_connection((HOST, n.console_port)) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert not s.recv(100).startswith(b"HTTP/1.1 200")
    finally:
        n.stop()



# -- the other pages -----------------------------------------------------------------------

def test_connections_answer_who_holds_and_who_waits(node):
    waiter = node.client()
    waiter.watch("idle-tube")
    waiter.cmd(b"ignore default")
    waiter.send(b"reserve-with-timeout 60\r\n")
    try:
        held = node.ids["reserved"][0]

        def shown():
            text = node.http().get("/connections").text
            return text if "in reserve" in text else None

        text = wait_for(shown, what="the waiting client")
        assert '/jobs/%d"' % held in text and "idle-tube" in text and "emails" in text
        r = node.http().get("/tubes/emails?state=reserved")
        assert "127.0.0.1:" in r.text       # the holder's address
    finally:
        waiter.close()


def test_schedules_page_shows_enabled_and_paused(guarded):
    c = guarded.client()
    c.use("emails")
    c.schedule("digest", b"d", "0 7 * * * Europe/Amsterdam")
    c.schedule("hourly", b"h", "@hourly")
    c.pause_schedule("hourly")
    c.use("secret")
    c.schedule("hidden", b"s", "every 3600")
    c.close()
    try:
        mon = guarded.http()
        mon.signin("mon")
        text = mon.get("/schedules").text
        assert ">digest<" in text and "0 7 * * * Europe/Amsterdam" in text and ">enabled<" in text
        assert ">hidden<" not in text                   # not in the monitor's tubes
        admin = guarded.http()
        admin.signin("boss")
        text = admin.get("/schedules").text
        assert ">hidden<" in text and ">paused<" in text and "UTC" in text
    finally:
        c = guarded.client()
        for name in ("digest", "hourly", "hidden"):
            c.unschedule(name)
        c.close()


def test_cluster_page_without_replication(node):
    r = node.http().get("/cluster")
    assert r.status == 200 and 'id="not-replicated"' in r.text


def test_ten_thousand_tubes_page_and_sort(node):
    with socket.create_connection((HOST, node.server.port)) as s:
        f = s.makefile("rb")
        s.sendall(b"".join(b"use t%05d\r\nput %d 0 60 1\r\nx\r\n" % (i, i) for i in range(10000)))
        for _ in range(20000):
            f.readline()
    http = node.http()
    r = http.get("/tubes?q=t0&sort=ready&dir=desc")
    assert r.status == 200 and "page 1 of 100" in r.text
    r = http.get("/tubes?q=t09999")
    assert ">t09999<" in r.text and "page 1 of 1" in r.text


def test_a_new_search_ends_the_old_one(node):
    c = node.client()
    c.use("cancel-hay")
    with socket.create_connection((HOST, node.server.port)) as s:
        f = s.makefile("rb")
        s.sendall(b"use cancel-hay\r\n" + b"put 0 0 60 4\r\nhay!\r\n" * 50000)
        for _ in range(50001):
            f.readline()
    http = node.http()
    query = "q=re:(h%2Ba%2B)%2Bx%7Czz&tube=cancel-hay"
    http.get("/search?" + query)
    r = http.post("/search/cancel", {"back": "/search?" + query})
    assert r.status == 200 and "search-summary" in r.text
    s = http.get("/search.json?" + query).json()
    assert s["state"] in ("cancelled", "done") and s["rows"] == []
    http.get("/search?q=hay&tube=cancel-hay&limit=5")
    s = wait_for(lambda: (lambda s: s if s["state"] != "running" else None)(
        http.get("/search.json?q=hay&tube=cancel-hay&limit=5").json()))
    assert s["state"] == "limit" and len(s["rows"]) == 5
    assert http.get("/search.json?" + query).status == 404
    c.cmd(b"flush-tube cancel-hay")
    c.close()


def test_a_pathological_regular_expression_never_holds_the_loop(node):
    # (x+x+)+y on 20 kB of x backtracks for ages: the match runs in the
    # console's thread, so the node answers while the search is still on it.
    c = node.client()
    c.use("rx-hay")
    for _ in range(3):
        c.put(b"x" * 20000)
    http = node.http()
    query = "q=re:(x%2Bx%2B)%2By&tube=rx-hay"
    assert http.get("/search?" + query).status == 200
    for _ in range(50):
        assert c.stats_tube("rx-hay")["current-jobs-ready"] == 3
    s = http.get("/search.json?" + query).json()
    assert s["state"] == "running" and s["rows"] == [], s
    http.post("/search/cancel", {"back": "/search?" + query})
    assert http.get("/search.json?" + query).json()["state"] == "cancelled"
    c.cmd(b"flush-tube rx-hay")
    c.close()


def test_search_runs_in_slices_and_keeps_its_bounds():
    """A search over an engine that never finishes: it yields to the loop
    between slices, ends on its budget, and a cancel ends it at once."""
    import asyncio

    from fastbean.console import search

    class Endless:
        scanned, total, done = 0, 10 ** 9, False

        def step(self, budget):
            self.scanned += budget
            return []

    class Reader:
        core = None

        def scan(self, **kwargs):
            return Endless()

    async def run():
        ticks = 0
        found = search.Search(Reader(), lambda tube: True, "needle").start(asyncio.get_running_loop())
        for _ in range(20):
            await asyncio.sleep(0)
            ticks += 1
        assert found.running and found.scanned > 0
        found.cancel()
        await asyncio.sleep(0)
        assert found.state == "cancelled" and found.task.done()
        old, search.BUDGET = search.BUDGET, 0.05
        try:
            found = search.Search(Reader(), lambda tube: True, "needle").start(asyncio.get_running_loop())
            await asyncio.wait_for(found.task, 10)
        finally:
            search.BUDGET = old
        assert found.state == "budget"
        return ticks

    assert asyncio.run(run()) == 20

    class Bodies(Endless):
        def step(self, budget):
            self.scanned += 1
            return [(self.scanned, b"x" * 20000)]

    class BodyReader(Reader):
        def scan(self, **kwargs):
            return Bodies()

    async def out_of_time():
        # the 30 s budget is the match's timeout: a match that never ends ends the search
        old, search.BUDGET = search.BUDGET, 0.3
        try:
            found = search.Search(BodyReader(), lambda tube: True, "re:(x+x+)+y").start(
                asyncio.get_running_loop())
            await asyncio.wait_for(found.task, 10)
        finally:
            search.BUDGET = old
        return found

    found = asyncio.run(out_of_time())
    assert found.state == "budget" and found.matches == [] and found.scanned == 0
    with pytest.raises(search.BadQuery):
        search.Search(Reader(), None, "re:(")
    with pytest.raises(search.BadQuery):
        search.Search(Reader(), None, "x" * 2000)


def test_dead_letters_requeue_to_their_tube(node):
    c = node.client()
    c.use("flaky")
    c.retry_limit(1, "flaky-dead")
    ids = [c.put(b"flaky %d" % i) for i in range(3)]
    c.watch("flaky")
    for _ in ids:
        job_id, _ = c.job(b"reserve-with-timeout 1")
        c.cmd(b"release %d 0 0" % job_id, b"RELEASED")
    assert c.stats_tube("flaky-dead")["current-jobs-ready"] == 3
    http = node.http()
    r = http.get("/dead")
    assert "flaky-dead" in r.text
    r = http.get("/dead?tube=flaky-dead")
    assert r.text.count('href="/tubes/flaky"') == 3
    r = http.post("/dead/requeue", {"tube": "flaky-dead", "job": [str(ids[0])]})
    assert "requeued 1 job" in r.text
    assert c.stats_job(ids[0])["tube"] == "flaky"
    r = http.post("/dead/requeue", {"tube": "flaky-dead", "all": "1"})
    assert "requeued 2 jobs" in r.text
    assert c.stats_tube("flaky")["current-jobs-ready"] == 3
    c.close()


def test_a_node_without_the_console_loads_neither_library():
    code = ("import sys; import fastbean.cli, fastbean.server.server; "
            "print(sorted(m for m in ('aiohttp', 'jinja2', 'regex', 'fastbean.console') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "[]", p.stderr


def test_search_slices_shrink_when_jobs_are_slow_to_look_at():
    """Big bodies make a slice of many jobs long: the next slices hold fewer."""
    import asyncio

    from fastbean.console import search

    budgets = []

    class Slow:
        scanned, total, done = 0, 10 ** 9, False

        def step(self, budget):
            budgets.append(budget)
            time.sleep(budget * 1e-5)       # 10 us a job
            self.scanned += budget
            self.done = len(budgets) >= 14
            return []

    class Reader:
        core = None

        def scan(self, **kwargs):
            return Slow()

    async def run():
        found = search.Search(Reader(), lambda tube: True, "needle").start(asyncio.get_running_loop())
        await asyncio.wait_for(found.task, 30)

    asyncio.run(run())
    assert budgets[0] == search.SLICE
    assert max(budgets[-3:]) * 1e-5 <= 4 * search.SLICE_TIME, budgets
