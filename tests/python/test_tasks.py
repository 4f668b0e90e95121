"""fastbean.Tasks end to end: an app module sends JSON jobs, `fastbean-worker
app:app` (python -m fastbean.worker) runs them against a real server; unique
keys, delays and run-at times; and the inline mode with its pytest fixture."""
import datetime
import importlib
import json
import os
import sys

import pytest

from fastbean.client import Client, NotFound
from fastbean.tasks import Tasks, inline
from tests.python.test_pytest_plugin import plugin_args
from tests.python.test_worker import ROOT, WorkerProcess, wait_for
from tests.support.servers import Server

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.timeout(120)

APP = '''
import asyncio, os, pathlib

import fastbean

app = fastbean.Tasks(os.environ["BEAN"], tube="mail")
OUT = pathlib.Path(os.environ["OUT"])


@app.task
def send_email(to, subject=""):
    with open(OUT / "sent", "a") as f:
        f.write("%s|%s\\n" % (to, subject))


@app.task(tube="reports", unique=True, ttr=30)
def report(day):
    with open(OUT / "reports", "a") as f:
        f.write(day + "\\n")


@app.task(tube="reports", retries=1)
def broken():
    raise RuntimeError("always")


@app.task(name="tally", bind=True)
async def tally(job, n):
    await asyncio.sleep(0)
    with open(OUT / "tally", "a") as f:
        f.write("%d %d\\n" % (job.id, n))
'''


@pytest.fixture
def node():
    s = Server("fastbean").start()
    yield s
    s.stop()


@pytest.fixture
def app(tmp_path, node, monkeypatch):
    (tmp_path / "taskapp.py").write_text(APP)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("BEAN", "127.0.0.1:%d" % node.port)
    monkeypatch.setenv("OUT", str(out))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("taskapp", None)
    module = importlib.import_module("taskapp")
    yield module
    module.app.close()
    sys.modules.pop("taskapp", None)


def lines(path):
    return path.read_text().splitlines() if path.exists() else []


def test_tasks_end_to_end(app, node, tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert app.app.tubes == ["mail", "reports"]
    assert app.send_email.name == "taskapp.send_email" and app.send_email.tube == "mail"
    sent = app.send_email.delay("ada@example.com", subject="hi")
    with Client(node.address) as c:
        body = json.loads(c.peek(sent.id))
        assert body == {"task": "taskapp.send_email", "args": ["ada@example.com"], "kwargs": {"subject": "hi"}}
        st = c.stats_job(sent.id)
        assert (st["tube"], st["pri"], st["ttr"]) == ("mail", 1024, 60)
    first = app.report.delay("2026-11-28")
    again = app.report.delay("2026-11-28")
    assert first.existing is None and (again.id, again.existing) == (first.id, "ready")
    other = app.report.delay("2026-11-29")
    assert other.id != first.id
    later = app.send_email.delay_for(3600, "bob@example.com")
    at = app.send_email.apply_at(datetime.datetime.now() + datetime.timedelta(hours=2), "eve@example.com")
    with Client(node.address) as c:
        assert c.stats_job(later.id)["state"] == "delayed" and 3590 <= c.stats_job(later.id)["delay"] <= 3600
        assert 7100 <= c.stats_job(at.id)["delay"] <= 7200
    broken = app.broken.delay()
    tallied = app.tally.delay(7)

    # the worker imports the app's module from here; only for this test
    monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    w = WorkerProcess(tmp_path, "taskapp:app", node, "-c", "4", "--backoff-base", "0")
    # the app's own address: no -l or -p needed (WorkerProcess gives -p, the same port)
    try:
        wait_for(lambda: len(lines(out / "sent")) == 1 and len(lines(out / "reports")) == 2
                 and len(lines(out / "tally")) == 1, why=w.text)
        assert lines(out / "sent") == ["ada@example.com|hi"]
        assert sorted(lines(out / "reports")) == ["2026-11-28", "2026-11-29"]
        assert lines(out / "tally") == ["%d 7" % tallied.id]
        with Client(node.address) as c:
            wait_for(lambda: c.stats_job(broken.id)["state"] == "buried", why=w.text)
            assert c.stats_job(broken.id)["reserves"] == 2          # retries=1: two attempts
            assert c.stats_job(later.id)["state"] == "delayed"
            with pytest.raises(NotFound):
                c.stats_job(sent.id)
    finally:
        w.kill()


def test_the_worker_finds_the_apps_server_by_itself(app, node, tmp_path):
    import subprocess
    app.send_email.delay("carol@example.com")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(tmp_path / "w.log", "wb") as err:
        p = subprocess.Popen([sys.executable, "-m", "fastbean.worker", "taskapp:app"], cwd=str(tmp_path),
                             env=env, stderr=err, stdout=subprocess.DEVNULL)
    try:
        wait_for(lambda: lines(tmp_path / "out" / "sent") == ["carol@example.com|"],
                 why=lambda: (tmp_path / "w.log").read_text())
    finally:
        p.kill()
        p.wait()


def test_inline_runs_tasks_here():
    app = Tasks()                                   # no server at all

    @app.task
    def add(a, b):
        return a + b

    @app.task
    async def double(x):
        return 2 * x

    with inline() as record:
        assert add.delay(1, 2).value == 3
        assert double.delay_for(60, 4).value == 8
        assert [c.task for c in record.calls] == [add.name, double.name]
        assert record.called(add)[0].args == (1, 2)
        with pytest.raises(TypeError, match="JSON"):
            add.delay(object(), 1)
    with pytest.raises(ValueError, match="no server"):
        add.delay(1, 2)
    assert Tasks(eager=True).task(lambda: 5).delay().value == 5


def test_unique_keys_are_ones_the_server_takes():
    app = Tasks(eager=True)

    @app.task(unique_key=lambda user: "welcome mail for %s" % user)
    def welcome(user):
        pass

    @app.task(unique=True)
    def plain(x):
        pass

    key = welcome.key_for(["ada"], {})
    assert " " not in key and len(key) <= 200
    assert plain.key_for([1], {}) == plain.key_for([1], {}) != plain.key_for([2], {})


def test_the_fastbean_tasks_fixture(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    pytester.makepyfile(mail="""
import fastbean

app = fastbean.Tasks(("127.0.0.1", 1), tube="mail")   # nothing listens there


@app.task
def send(to):
    return "sent to " + to


def sign_up(user):
    send.delay(user + "@example.com")
""", test_mail="""
import mail


def test_sign_up_sends_a_mail(fastbean_tasks):
    mail.sign_up("ada")
    (call,) = fastbean_tasks.called(mail.send)
    assert call.args == ("ada@example.com",) and call.value == "sent to ada@example.com"
""")
    result = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
