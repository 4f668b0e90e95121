"""fastbean-worker as its users run it: a process (python -m fastbean.worker,
what the fastbean-worker script runs) on a module of handlers, against real
fastbean and beanstalkd processes; and Worker in-process. Every wait is a
bounded poll on a condition, never a timing."""
import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from fastbean.client import Client, NotFound
from fastbean.worker import RetryPolicy, Worker
from tests.support import ROOT
from tests.support.servers import Server

pytestmark = pytest.mark.timeout(180)

HANDLERS = '''
import asyncio, logging, os, time

log = logging.getLogger("fastbean.app")
MARKS = os.environ.get("MARKS", ".")


def started(job):
    log.info("start %(id)d", {"id": job.id, "body": job.body.decode()}, extra={"event": "handler-start"})


def ok(job):
    started(job)


def fail(job):
    started(job)
    raise RuntimeError("no luck with %s" % job.body.decode())


def sleepy(job):
    """body: seconds to sleep"""
    started(job)
    time.sleep(float(job.body))


def once_then_ok(job):
    """hangs the first time it sees a body (a worker killed mid-job), then works"""
    started(job)
    mark = os.path.join(MARKS, "seen-%s" % job.body.decode())
    if not os.path.exists(mark):
        open(mark, "w").close()
        time.sleep(600)


def brief(job):
    started(job)
    time.sleep(0.02)


async def coro(job):
    started(job)
    await asyncio.sleep(0)
'''


@pytest.fixture
def app(tmp_path):
    (tmp_path / "handlers.py").write_text(HANDLERS)
    (tmp_path / "marks").mkdir()
    return tmp_path


class WorkerProcess:
    """python -m fastbean.worker in a directory, its stderr (JSON logs) in a file."""

    def __init__(self, directory, target, server, *args):
        self.log_path = os.path.join(str(directory), "worker-%d.log" % time.monotonic_ns())
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   MARKS=os.path.join(str(directory), "marks"))
        with open(self.log_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fastbean.worker", target,
                 *(["-p", str(server.port)] if server is not None else []), *args],
                cwd=str(directory), env=env, stdout=subprocess.DEVNULL, stderr=err)

    def events(self, name=None):
        out = []
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                if name is None or doc.get("event") == name:
                    out.append(doc)
        return out

    def text(self):
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def wait_event(self, name, count=1, timeout=30.0):
        wait_for(lambda: len(self.events(name)) >= count, timeout,
                 lambda: "%d %s events; the log:\n%s" % (len(self.events(name)), name, self.text()[-3000:]))
        return self.events(name)

    def signal(self, sig):
        os.kill(self.proc.pid, sig)

    def wait(self, timeout=60.0):
        return self.proc.wait(timeout)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


def wait_for(condition, timeout=30.0, why=lambda: ""):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("gave up waiting after %gs: %s" % (timeout, why()))
        time.sleep(0.02)


@pytest.fixture
def workers():
    started = []

    def start(*args):
        w = WorkerProcess(*args)
        started.append(w)
        return w
    yield start
    for w in started:
        w.kill()


@pytest.fixture
def fastbean_node():
    s = Server("fastbean").start()
    yield s
    s.stop()


def put_all(server, tube, bodies, **kw):
    with Client(server.address) as c:
        c.use(tube)
        return [c.put(b, **kw) for b in bodies]


def tube_stats(server, tube):
    with Client(server.address) as c:
        try:
            return c.stats_tube(tube)
        except NotFound:
            return {}


def empty(server, tube):
    st = tube_stats(server, tube)
    return not st or all(st["current-jobs-" + k] == 0 for k in ("ready", "reserved", "delayed", "buried"))


@pytest.mark.parametrize("kind", ["fastbean", "beanstalkd"])
def test_returning_deletes_every_job(app, workers, kind):
    with Server(kind) as s:
        s.start()
        ids = put_all(s, "work", [b"j%d" % k for k in range(40)])
        w = workers(app, "handlers:ok", s, "--tube", "work", "--concurrency", "4")
        wait_for(lambda: empty(s, "work"), why=w.text)
        done = w.wait_event("job-done", 40)
        assert sorted(e["id"] for e in done) == ids
        assert all(e["tube"] == "work" and e["level"] == "info" for e in done)
        assert tube_stats(s, "work")["cmd-delete"] == 40
        # beanstalkd has no reserve-batch: the worker says so and reserves one at a time
        assert bool(w.events("worker-no-batch")) == (kind == "beanstalkd")


def test_a_coroutine_handler_and_several_tubes(app, workers, fastbean_node):
    a = put_all(fastbean_node, "a", [b"x"] * 5)
    b = put_all(fastbean_node, "b", [b"y"] * 5)
    w = workers(app, "handlers:coro", fastbean_node, "-t", "a", "-t", "b", "-c", "3")
    done = w.wait_event("job-done", 10)
    assert {e["id"]: e["tube"] for e in done} == {**{i: "a" for i in a}, **{i: "b" for i in b}}


def test_raising_releases_with_backoff_then_buries(app, workers, fastbean_node):
    (jid,) = put_all(fastbean_node, "flaky", [b"f"])
    w = workers(app, "handlers:fail", fastbean_node, "-t", "flaky", "--attempts", "3",
                "--backoff-base", "1", "--backoff-max", "1")
    w.wait_event("job-buried")
    with Client(fastbean_node.address) as c:
        st = c.stats_job(jid)
    assert (st["state"], st["reserves"], st["releases"], st["buries"]) == ("buried", 3, 2, 1)
    assert [e["event"] for e in w.events() if e.get("id") == jid and e["event"].startswith("job-")] == \
        ["job-released", "job-released", "job-buried"]
    assert "RuntimeError: no luck with f" in w.events("job-buried")[0]["error"]


def test_a_server_retry_limit_decides_when_asked(app, workers, fastbean_node):
    with Client(fastbean_node.address) as c:
        c.use("limited")
        c.retry_limit(2)
        jid = c.put(b"f")
    w = workers(app, "handlers:fail", fastbean_node, "-t", "limited", "--server-retry-limit",
                "--backoff-base", "0")
    w.wait_event("job-released", 2)
    with Client(fastbean_node.address) as c:
        wait_for(lambda: c.stats_job(jid)["state"] == "buried", why=w.text)
        assert c.fastbean_stats()["jobs-retry-buried"] == 1
    assert not w.events("job-buried")


def test_backoff_delays_stay_under_their_cap():
    policy = RetryPolicy(attempts=10, base=2, factor=3, max_delay=100)
    for attempt in range(1, 10):
        cap = min(100, 2 * 3 ** (attempt - 1))
        delays = {policy.delay(attempt) for _ in range(200)}
        assert min(delays) >= 0 and max(delays) <= cap + 1     # whole seconds, rounded up
    assert len({policy.delay(5) for _ in range(200)}) > 5        # jittered


def test_a_job_near_its_ttr_is_touched(app, workers, fastbean_node):
    (jid,) = put_all(fastbean_node, "long", [b"5"], ttr=2)
    w = workers(app, "handlers:sleepy", fastbean_node, "-t", "long")
    w.wait_event("job-done", timeout=60)
    with Client(fastbean_node.address) as c:
        assert c.stats()["job-timeouts"] == 0
        with pytest.raises(NotFound):
            c.stats_job(jid)
    assert len(w.events("handler-start")) == 1


def test_sigterm_finishes_within_the_grace_and_gives_back_the_rest(app, workers, fastbean_node):
    quick, slow = put_all(fastbean_node, "grace", [b"1", b"600"])
    w = workers(app, "handlers:sleepy", fastbean_node, "-t", "grace", "-c", "2", "--grace", "3")
    w.wait_event("handler-start", 2)
    w.signal(signal.SIGTERM)
    later = put_all(fastbean_node, "grace", [b"0"])[0]
    assert w.wait(60) == 0
    with Client(fastbean_node.address) as c:
        with pytest.raises(NotFound):
            c.stats_job(quick)                      # finished in the grace period: deleted
        st = c.stats_job(slow)
        assert (st["state"], st["releases"], st["reserves"]) == ("ready", 0, 1)    # given back
        assert c.stats_job(later)["reserves"] == 0  # nothing reserved after SIGTERM
    assert w.events("worker-released")[0]["count"] == 1


def test_sigint_twice_exits_at_once(app, workers, fastbean_node):
    put_all(fastbean_node, "stuck", [b"600"])
    w = workers(app, "handlers:sleepy", fastbean_node, "-t", "stuck", "--grace", "600")
    w.wait_event("handler-start")
    w.signal(signal.SIGINT)
    w.wait_event("worker-stop")
    w.signal(signal.SIGINT)
    assert w.wait(30) == 130


def test_metrics_endpoint(app, workers, fastbean_node):
    put_all(fastbean_node, "m", [b"x"] * 7)
    w = workers(app, "handlers:ok", fastbean_node, "-t", "m", "--metrics-port", "0")
    port = w.wait_event("worker-metrics")[0]["port"]
    w.wait_event("job-done", 7)

    def scrape():
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            return r.read().decode()
    text = scrape()
    assert 'fastbean_worker_jobs_total{outcome="deleted"} 7\n' in text
    assert "fastbean_worker_jobs_reserved_total 7\n" in text
    assert "fastbean_worker_job_seconds_count 7\n" in text
    assert "# TYPE fastbean_worker_job_seconds histogram\n" in text


def test_usage_errors(app):
    env = dict(os.environ, PYTHONPATH=ROOT)
    for args, says in ([["handlers:ok"], "no tube"], [["handlers:nothing", "-t", "x"], "cannot load"],
                       [["handlers", "-t", "x"], "MODULE:CALLABLE"],
                       [["handlers:ok", "--tube=-x"], "cannot start with"]):
        p = subprocess.run([sys.executable, "-m", "fastbean.worker", *args], cwd=str(app), env=env,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and says in p.stderr, (args, p.stderr)


def test_a_worker_over_several_nodes(app, tmp_path):
    from fastbean.client import Pool
    with Server("fastbean") as a, Server("fastbean") as b:
        a.start()
        b.start()
        tubes = ["spread-%d" % k for k in range(12)]
        with Pool([a.address, b.address]) as pool:
            jobs = [pool.put(t, b"x") for t in tubes]
            assert {j.node for j in jobs} == {0, 1}
        args = ["--node", "127.0.0.1:%d" % a.port, "--node", "127.0.0.1:%d" % b.port]
        for t in tubes:
            args += ["-t", t]
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        log = tmp_path / "pool-worker.log"
        with open(log, "wb") as err:
            p = subprocess.Popen([sys.executable, "-m", "fastbean.worker", "handlers:ok", "-c", "2", *args],
                                 cwd=str(app), env=env, stderr=err, stdout=subprocess.DEVNULL)
        try:
            wait_for(lambda: all(empty(a, t) and empty(b, t) for t in tubes), why=log.read_text)
            done = [json.loads(x) for x in log.read_text().splitlines() if '"job-done"' in x]
            assert sorted(e["tube"] for e in done) == sorted(tubes)
        finally:
            p.kill()
            p.wait()


def test_a_worker_over_tls_with_a_token(app, workers, tmp_path):
    from tests.security.test_auth import tokens_file
    from tests.security.test_tls import tls_server
    from tests.support.certs import Pki
    pki = Pki(str(tmp_path))
    token = "w-00112233445566778899aabbccddeeff"
    (tmp_path / "token").write_text(token + "\n")
    s = tls_server(pki.server, "--auth-tokens", tokens_file(tmp_path / "tokens", {"w": token}), ca=pki.ca.cert)
    try:
        (jid,) = put_all(s, "secure", [b"x"])          # through the plain port
        w = workers(app, "handlers:ok", s, "-t", "secure", "-p", str(s.tls_port), "--tls-ca", pki.ca.cert,
                    "--tls-cert", pki.client[0], "--tls-key", pki.client[1], "--tls-server-name", "localhost",
                    "--auth-token-file", str(tmp_path / "token"))
        assert [e["id"] for e in w.wait_event("job-done")] == [jid]
    finally:
        s.stop()


# -- what the audit asks: kill -9 of the worker, and of the node

def test_kill_9_of_the_worker_mid_job_loses_nothing(app, workers, fastbean_node):
    (jid,) = put_all(fastbean_node, "crash", [b"only"], ttr=2)
    first = workers(app, "handlers:once_then_ok", fastbean_node, "-t", "crash")
    first.wait_event("handler-start")
    first.kill()
    # the job comes back (at once: the connection closed; else after its TTR) and runs again
    second = workers(app, "handlers:once_then_ok", fastbean_node, "-t", "crash")
    done = second.wait_event("job-done", timeout=60)
    assert [e["id"] for e in done] == [jid]
    assert empty(fastbean_node, "crash")
    with Client(fastbean_node.address) as c:
        assert c.stats_tube("crash")["total-jobs"] == 1


def test_kill_9_of_the_node_runs_no_deleted_job_again(app, workers, tmp_path):
    """With -b DIR -f 0, the node is killed while the worker deletes jobs,
    and started again on its binlog: the worker reconnects, every job put is
    done, and none runs after the worker saw its delete succeed."""
    binlog = tmp_path / "binlog"
    binlog.mkdir()
    with Server("fastbean", "-b", str(binlog), "-f", "0") as s:
        s.start()
        ids = put_all(s, "audit", [b"job-%d" % k for k in range(400)])
        w = workers(app, "handlers:brief", s, "-t", "audit", "-c", "8")
        w.wait_event("job-done", 60)
        s.kill()
        s.start()
        wait_for(lambda: empty(s, "audit"), 120, w.text)
        audit_runs(w, ids, s)


def audit_runs(w, ids, server):
    """Every job put ran, none after the worker saw its delete succeed, the
    crash came while it worked, and the server holds none of them."""
    w.wait_event("worker-reconnected")
    events = [e for e in w.events() if e["event"] in ("handler-start", "job-done", "worker-reconnected")]
    after = events[[e["event"] for e in events].index("worker-reconnected"):]
    assert any(e["event"] == "job-done" for e in after)         # the crash came mid-run
    events = [e for e in events if e["event"] != "worker-reconnected"]
    done_at = {}
    for n, e in enumerate(events):
        if e["event"] == "job-done":
            assert e["id"] not in done_at, "job %d deleted twice" % e["id"]
            done_at[e["id"]] = n
    started = {}
    for n, e in enumerate(events):
        if e["event"] == "handler-start":
            started.setdefault(e["id"], []).append(n)
            assert n < done_at.get(e["id"], n + 1), "job %d ran after its delete" % e["id"]
    assert sorted(started) == ids                       # every job ran
    with Client(server.address) as c:
        assert c.stats_tube("audit")["total-jobs"] <= len(ids)   # no job made twice
        for jid in ids:
            with pytest.raises(NotFound):
                c.stats_job(jid)


@pytest.mark.timeout(300)
def test_kill_9_of_the_primary_runs_no_deleted_job_again(app, workers, tmp_path):
    """The same with --replicate: the worker is given the HA group's
    addresses; the primary is killed while it works, a standby takes over,
    and the worker goes on with it."""
    from tests.support.hanodes import Node, find_primary
    from tests.support.natscluster import NatsCluster
    cluster = NatsCluster(tmp_path / "nats")
    nodes = []
    try:
        nodes = [Node(name, cluster.urls, tmp_path, "--lease-ttl", "2") for name in ("a", "b")]
        primary = find_primary(nodes)
        ids = put_all(primary, "audit", [b"job-%d" % k for k in range(400)])
        group = ",".join("127.0.0.1:%d" % n.port for n in nodes)
        w = workers(app, "handlers:brief", None, "--node", group, "-t", "audit", "-c", "8")
        w.wait_event("job-done", 60)
        primary.kill()
        successor = find_primary(nodes, exclude=(primary,))
        wait_for(lambda: empty(successor, "audit"), 120, w.text)
        audit_runs(w, ids, successor)
    finally:
        for n in nodes:
            n.stop()
        cluster.stop()


# -- in-process, as a benchmark runs it

def test_worker_in_process_with_a_coroutine_handler(fastbean_node):
    seen = []

    async def handler(job):
        st = await job.astats()
        await job.atouch()
        seen.append((job.id, job.body, job.tube, st["state"], time.monotonic()))

    worker = Worker(handler, ["inproc"], address=fastbean_node.address, concurrency=4)
    thread = threading.Thread(target=lambda: asyncio.run(worker.run()))
    thread.start()
    try:
        assert worker.ready.wait(30)
        ids = put_all(fastbean_node, "inproc", [b"a", b"b", b"c"])
        wait_for(lambda: len(seen) == 3)
        assert sorted((i, b, t, s) for i, b, t, s, _ in seen) == \
            [(ids[0], b"a", "inproc", "reserved"), (ids[1], b"b", "inproc", "reserved"),
             (ids[2], b"c", "inproc", "reserved")]
        wait_for(lambda: worker.metrics.outcomes["deleted"] == 3)
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()
    assert empty(fastbean_node, "inproc")


def test_worker_in_process_with_a_thread_handler(fastbean_node):
    seen = []

    def handler(job):
        seen.append(job.stats()["tube"])
        job.touch()
        if job.body == b"bad":
            raise ValueError("bad")

    worker = Worker(handler, ["threads"], address=fastbean_node.address, concurrency=2,
                    retry=RetryPolicy(attempts=1))
    thread = threading.Thread(target=lambda: asyncio.run(worker.run()))
    thread.start()
    try:
        assert worker.ready.wait(30)
        put_all(fastbean_node, "threads", [b"good", b"bad"])
        wait_for(lambda: worker.metrics.outcomes["deleted"] == 1 and worker.metrics.outcomes["buried"] == 1)
    finally:
        worker.stop()
        thread.join(30)
    assert seen == ["threads", "threads"]


def test_the_console_script_is_declared():
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["scripts"]["fastbean-worker"] == "fastbean.worker:main"
    p = subprocess.run([sys.executable, "-m", "fastbean.worker", "--help"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=ROOT), timeout=60)
    assert p.returncode == 0 and "--auth-token-file" in p.stdout and "--concurrency" in p.stdout
