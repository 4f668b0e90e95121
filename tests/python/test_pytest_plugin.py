"""The pytest plugin as its users meet it: pytester runs test files that use its
fixtures with greenstalk and pystalk, the clock included, and checks that each
test finds the server empty, that its options work and that a server that
cannot start fails the tests with its cause."""
import importlib.metadata
import os
import re
import sys

import pytest

from tests.support import ROOT

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.timeout(120)

sys.path.insert(0, os.path.join(ROOT, "tools"))
from wheelcheck import readme_files  # noqa: E402


def plugin_args():
    # Installed (pip install -e . in CI, or a wheel), pytest loads the plugin
    # through its entry point; in a bare checkout it has to be named.
    eps = importlib.metadata.entry_points()
    group = eps.select(group="pytest11") if hasattr(eps, "select") else eps.get("pytest11", [])
    if any(ep.value == "fastbean.testing.pytest_plugin" for ep in group):
        return []
    return ["-p", "fastbean.testing.pytest_plugin"]


@pytest.fixture
def run(pytester, monkeypatch):
    # the server the inner tests start is this tree's fastbean
    monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def run(*args):
        return pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", *args)
    return run


def test_greenstalk_pystalk_and_the_clock(pytester, run):
    pytester.makepyfile(test_clients="""
        import greenstalk
        import pystalk

        def test_address_forms(fastbean):
            assert fastbean.address == (fastbean.host, fastbean.port)
            assert fastbean.url == "beanstalk://%s:%d" % (fastbean.host, fastbean.port)

        def test_greenstalk(fastbean):
            with greenstalk.Client(fastbean.address, use="g", watch="g") as c:
                jid = c.put("hello")
                job = c.reserve(timeout=0)
                assert (job.id, job.body) == (jid, "hello")
                c.delete(job)

        def test_pystalk(fastbean):
            client = pystalk.BeanstalkClient(fastbean.host, fastbean.port, auto_decode=True)
            client.use("p")
            client.watch("p")
            status, jid = client.put_job("from pystalk")
            assert status == b"INSERTED"
            job = client.reserve_job(timeout=0)
            assert (job.job_id, job.job_data) == (jid, "from pystalk")
            client.delete_job(job.job_id)
            assert client.stats()["total-jobs"] == 1

        def test_an_hour_delay_without_waiting(fastbean, fastbean_clock):
            with greenstalk.Client(fastbean.address) as c:
                c.put("in an hour", delay=3600)
                try:
                    c.reserve(timeout=0)
                    raise AssertionError("reserved early")
                except greenstalk.TimedOutError:
                    pass
                assert fastbean_clock.advance(3600) == 3600.0
                assert c.reserve(timeout=0).body == "in an hour"

        def test_ttr_expiry_puts_the_job_back(fastbean, fastbean_clock):
            client = pystalk.BeanstalkClient(fastbean.host, fastbean.port)
            client.put_job("slow work", ttr=300)
            job = client.reserve_job(timeout=0)
            fastbean_clock.advance(299)
            assert client.stats_job(job.job_id)["state"] == "reserved"
            fastbean_clock.advance(1)
            stats = client.stats_job(job.job_id)
            assert stats["state"] == "ready" and stats["timeouts"] == 1

        def test_deadline_soon_and_reserve_timeout(fastbean, fastbean_clock):
            with greenstalk.Client(fastbean.address) as c:
                c.put("x", ttr=10)
                c.reserve(timeout=0)
                fastbean_clock.advance(9)
                try:
                    c.reserve(timeout=100)
                    raise AssertionError("no DEADLINE_SOON")
                except greenstalk.DeadlineSoonError:
                    pass

        def test_pause_follows_the_clock(fastbean, fastbean_clock):
            with greenstalk.Client(fastbean.address) as c:
                c.put("paused")
                c.pause_tube("default", 600)
                fastbean_clock.advance(599)
                assert c.stats_tube("default")["pause-time-left"] in (0, 1)
                fastbean_clock.advance(1)
                assert c.reserve(timeout=0).body == "paused"
    """)
    result = run("-v")
    result.assert_outcomes(passed=7)


def test_each_test_finds_the_server_empty(pytester, run):
    pytester.makepyfile(test_isolation="""
        import greenstalk

        left_open = []
        pids = []

        def test_a_leaves_everything_behind(fastbean, fastbean_clock):
            pids.append(fastbean.pid)
            c = greenstalk.Client(fastbean.address, use="leftover", watch="leftover")
            left_open.append(c)                      # never closed by this test
            c.put("ready")
            c.put("delayed", delay=100)
            c.put("buried")
            c.bury(c.reserve(timeout=0))
            c.put("held")
            c.reserve(timeout=0)                     # stays reserved
            c.pause_tube("leftover", 1000)
            c.pause_tube("default", 1000)
            fastbean_clock.advance(50)
            assert c.stats()["current-jobs-reserved"] == 1

        def test_b_sees_none_of_it(fastbean, fastbean_clock):
            pids.append(fastbean.pid)
            assert pids[0] == pids[1]                # one server for the session
            with greenstalk.Client(fastbean.address) as c:
                stats = c.stats()
                for key in ("current-jobs-ready", "current-jobs-delayed", "current-jobs-buried",
                            "current-jobs-reserved", "total-jobs", "cmd-put", "cmd-reserve",
                            "cmd-pause-tube", "job-timeouts", "current-producers",
                            "current-workers", "current-waiting"):
                    assert stats[key] == 0, key
                assert stats["current-connections"] == 1 and stats["total-connections"] == 1
                assert c.tubes() == ["default"]
                assert c.stats_tube("default")["pause"] == 0
                assert fastbean_clock.offset == 0.0
                try:
                    c.peek(1)
                    raise AssertionError("job 1 is still there")
                except greenstalk.NotFoundError:
                    pass
            # the connection test a left open was closed by the reset
            try:
                left_open[0].stats()
                raise AssertionError("the old connection still works")
            except (ConnectionError, OSError):
                pass
    """)
    run("-v").assert_outcomes(passed=2)


def test_readme_example(pytester, run):
    files = readme_files(open(os.path.join(ROOT, "docs", "python.md")).read())
    assert set(files) == {"worker.py", "test_worker.py"}
    pytester.makepyfile(**{name[:-3]: body for name, body in files.items()})
    run().assert_outcomes(passed=3)


def test_options_extra_flags_binlog_and_unix_socket(pytester, run, tmp_path):
    pytester.makepyfile(test_opts="""
        import os
        import greenstalk

        def test_flags_reach_the_server(fastbean):
            with greenstalk.Client(fastbean.address) as c:
                try:
                    c.put("x" * 11)
                    raise AssertionError("-z 10 was not applied")
                except greenstalk.JobTooBigError:
                    pass

        def test_where(fastbean):
            with greenstalk.Client(fastbean.address) as c:
                c.put("durable")
                assert c.stats()["binlog-current-index"] >= 1
            print("ADDRESS", fastbean.address, "BINLOG", fastbean.binlog_dir)
    """)
    binlog = tmp_path / "binlog"
    result = run("-s", "--fastbean-args=-z 10", "--fastbean-binlog", str(binlog))
    result.assert_outcomes(passed=2)
    assert any(p.name.startswith("binlog.") for p in binlog.iterdir())

    pytester.makeini("""
        [pytest]
        fastbean_args = -z 10
        fastbean_binlog = ini-binlog
        fastbean_unix_socket = true
    """)
    result = run("-s")
    result.assert_outcomes(passed=2)
    result.stdout.re_match_lines([r".*ADDRESS /\S+\.sock BINLOG %s$" % re.escape(
        str(pytester.path / "ini-binlog"))])
    assert any(p.name.startswith("binlog.") for p in (pytester.path / "ini-binlog").iterdir())


def test_a_tls_test_server(pytester, run, tmp_path):
    from tests.support.certs import self_signed
    cert, key = self_signed(str(tmp_path), "test-server")
    pytester.makepyfile(test_tls="""
        import ssl

        def test_a_client_over_tls(fastbean, fastbean_clock):
            with fastbean.client() as c:
                assert isinstance(c.sock, ssl.SSLSocket)
                c.put(b"over tls", delay=60)
            fastbean_clock.advance(60)
            with fastbean.client() as c:
                assert c.stats()["current-jobs-ready"] == 1

        def test_reset_between_tests_and_no_plain_port(fastbean):
            with fastbean.client() as c:
                assert c.stats()["current-jobs-ready"] == 0
            import socket
            with socket.create_connection(fastbean.address) as plain:
                plain.sendall(b"stats\\r\\n")
                data = plain.recv(100)
                while data:             # closed, after a TLS alert at most
                    assert b"OK" not in data
                    data = plain.recv(100)
    """)
    run("--fastbean-tls-cert", cert, "--fastbean-tls-key", key).assert_outcomes(passed=2)
    os.rename(cert, str(pytester.path / "cert.pem"))
    os.rename(key, str(pytester.path / "key.pem"))
    pytester.makeini("""
        [pytest]
        fastbean_tls_cert = cert.pem
        fastbean_tls_key = key.pem
    """)
    run().assert_outcomes(passed=2)


def test_a_server_that_cannot_start_fails_with_its_cause(pytester, run):
    pytester.makepyfile(test_start="""
        def test_one(fastbean):
            pass

        def test_two(fastbean_clock):
            pass
    """)
    result = run("--fastbean-args=--no-such-flag")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*the fastbean test server could not start*exited with status 5*",
                                 "*unknown option: --no-such-flag*"])


def test_nothing_starts_unless_asked(pytester, run):
    # a flag the server would refuse: a test suite that never asks for the
    # fixtures is not affected by the plugin at all
    pytester.makepyfile(test_plain="""
        def test_plain():
            assert True
    """)
    run("--fastbean-args=--no-such-flag").assert_outcomes(passed=1)
    result = run("--help")
    result.stdout.fnmatch_lines(["*--fastbean-binlog=DIR*", "*--fastbean-args=ARGS*"])
