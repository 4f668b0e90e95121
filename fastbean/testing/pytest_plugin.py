"""The pytest plugin: a session's fastbean server, reset for each test, with a clock tests move.

Loaded through the pytest11 entry point; nothing starts until a test asks
for a fixture, so installing fastbean costs other test suites nothing.
"""
from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from typing import Any

import pytest

from fastbean.errors import ServerStartError
from fastbean.testing import Clock, Server, server


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fastbean", "fastbean server for tests (fixtures fastbean, fastbean_tasks, "
                                        "fastbean_clock, fastbean_server)")
    group.addoption("--fastbean-binlog", metavar="DIR", default=None,
                    help="keep the test server's binlog in DIR (ini: fastbean_binlog)")
    group.addoption("--fastbean-args", metavar="ARGS", default=None,
                    help="extra flags for the test server, as one shell-quoted string "
                         "(ini: fastbean_args)")
    group.addoption("--fastbean-unix-socket", action="store_true", default=None,
                    help="serve on a UNIX socket instead of a loopback port "
                         "(ini: fastbean_unix_socket)")
    group.addoption("--fastbean-tls-cert", metavar="FILE", default=None,
                    help="serve over TLS only, with this certificate (PEM); the fixtures' "
                         "client() trusts exactly it (ini: fastbean_tls_cert)")
    group.addoption("--fastbean-tls-key", metavar="FILE", default=None,
                    help="the certificate's key (default: in the certificate file) "
                         "(ini: fastbean_tls_key)")
    parser.addini("fastbean_binlog", "the test server's binlog directory, relative to the "
                                     "rootdir (default: no binlog)", default="")
    parser.addini("fastbean_args", "extra flags for the test server", type="args", default=[])
    parser.addini("fastbean_unix_socket", "serve on a UNIX socket", type="bool", default=False)
    parser.addini("fastbean_tls_cert", "serve over TLS with this certificate, relative to the "
                                       "rootdir (default: no TLS)", default="")
    parser.addini("fastbean_tls_key", "the TLS certificate's key, relative to the rootdir", default="")


def _path_option(config: pytest.Config, name: str) -> str | None:
    """A file named on the command line (as it is) or in the ini file (from the rootdir)."""
    path: str | None = config.getoption(name)
    if path is None:
        path = config.getini(name)
        if not path:
            return None
        path = os.path.join(str(config.rootpath), path)
    return os.path.abspath(path)


def _binlog_dir(config: pytest.Config) -> str | None:
    path: str | None = config.getoption("fastbean_binlog")
    if path is None:
        path = config.getini("fastbean_binlog")
        if not path:
            return None
        path = os.path.join(str(config.rootpath), path)
    worker = getattr(config, "workerinput", {}).get("workerid")
    if worker:
        path = os.path.join(path, worker)     # pytest-xdist: one binlog (and lock) per worker
    return os.path.abspath(path)


@pytest.fixture(scope="session")
def fastbean_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """The session's fastbean server (started with --testing): host, port, url,
    address, pid, clock, reset(). Not reset between tests: ask for `fastbean`."""
    config = request.config
    text = config.getoption("fastbean_args")
    args: list[str] = shlex.split(text) if text is not None else config.getini("fastbean_args")
    unix = config.getoption("fastbean_unix_socket")
    if unix is None:
        unix = config.getini("fastbean_unix_socket")
    failure: str | None = None
    try:
        srv = server(*args, unix_socket=bool(unix), binlog_dir=_binlog_dir(config), testing=True,
                     tls_cert=_path_option(config, "fastbean_tls_cert"),
                     tls_key=_path_option(config, "fastbean_tls_key"))
    except (ServerStartError, ValueError) as e:
        failure = str(e)        # reported outside the except block: one message, no chain
    if failure is not None:
        pytest.fail("the fastbean test server could not start: %s" % failure, pytrace=False)
    with srv:
        yield srv


@pytest.fixture
def fastbean(fastbean_server: Server) -> Server:
    """The session's server, emptied for this test: no jobs, tubes, pauses,
    reservations or other connections, counters at zero, clock at real time."""
    fastbean_server.reset()
    return fastbean_server


@pytest.fixture
def fastbean_clock(fastbean: Server) -> Clock:
    """The clock of the (emptied) server: advance(seconds) moves it forward."""
    return fastbean.clock


@pytest.fixture
def fastbean_tasks() -> Iterator[Any]:
    """Every fastbean.Tasks task sent during the test runs at once, in this
    process, with no server (fastbean.tasks.inline()): arguments go through
    JSON, exceptions propagate, `.delay()` returns the value in Sent.value.
    The fixture is the record: `calls`, and `called(task)` for one task's."""
    from fastbean.tasks import inline
    with inline() as record:
        yield record
