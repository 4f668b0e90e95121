"""--strict: every protocol extension off, so fastbean answers as beanstalkd 1.12.

The extension lines are sent to beanstalkd and to fastbean --strict and the
replies compared byte for byte; without --strict the same lines are fastbean's
extensions (docs/protocol-extensions.md)."""
import pytest

from fastbean.cli import USAGE, Usage, parse_args
from tests.support.servers import Server

pytestmark = pytest.mark.timeout(60)

# Lines of every extension, well and badly formed.
EXTENSION_LINES = [
    b"fastbean-stats", b"fastbean-stats ", b"fastbean-statsx", b"fastbean-stats 1",
    b"flush-tube default", b"flush-tube", b"flush-tube ", b"flush-tube -x",
    b"flush-tube " + b"a" * 201, b"flush-tubes default", b"flush-buried default",
    b"flush-buried", b"flush-buried -x", b"flush-buried default extra",
    b"list-tube ready 0 10", b"list-tube buried 0.1 1", b"list-tube ", b"list-tube x 0 1",
    b"list-tube ready 0 0",
    b"reserve-batch 5", b"reserve-batch 5 1", b"reserve-batch", b"reserve-batch 0",
    b"delete-batch 1 2", b"delete-batch", b"delete-batch x",
    b"delete-each 1 2", b"delete-each", b"retry-limit", b"retry-limit 3", b"retry-limit 3 dead",
    b"retry-limit default", b"retry-limit x",
    b"move-job 1 other", b"move-job 1", b"move-job 1 -x", b"move-jobs", b"reprioritize-job 1 5",
    b"reprioritize-job 1", b"reprioritize-job 1 x", b"reprioritize-jobx",
]
# beanstalkd reads a line that starts with "reserve" and is no reserve as a bad one
BAD_FORMAT_LINES = {b"reserve-batch 5", b"reserve-batch 5 1", b"reserve-batch", b"reserve-batch 0"}


def _replies(server, lines):
    with server.client() as c:
        j = c.put(b"kept")
        out = [c.cmd(line) for line in lines]
        out.append(c.cmd(b"peek %d" % j))
    return out


@pytest.fixture(scope="module")
def beanstalkd_replies():
    s = Server("beanstalkd").start()
    try:
        return _replies(s, EXTENSION_LINES)
    finally:
        s.stop()


def test_strict_answers_extensions_as_beanstalkd(beanstalkd_replies):
    with Server("fastbean", "--strict") as s:
        s.start()
        assert _replies(s, EXTENSION_LINES) == beanstalkd_replies
    assert beanstalkd_replies[:-1] == [
        b"BAD_FORMAT" if line in BAD_FORMAT_LINES else b"UNKNOWN_COMMAND" for line in EXTENSION_LINES]


def test_without_strict_the_extensions_answer():
    with Server("fastbean") as s:
        s.start()
        with s.client() as c:
            assert "memory-used" in c.yaml(b"fastbean-stats")
        replies = _replies(s, [b"fastbean-statsx", b"fastbean-stats 1"])
    assert replies[:2] == [b"BAD_FORMAT", b"BAD_FORMAT"]


def test_strict_on_the_command_line():
    assert parse_args(["--strict"]).strict is True
    assert parse_args([]).strict is False
    with pytest.raises(Usage):
        parse_args(["--strict=1"])
    assert "--strict" in USAGE
