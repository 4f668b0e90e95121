"""Fixtures shared by the test files: real servers, started per test and stopped by PID."""
import pytest

from tests.servers import KINDS, Server


@pytest.fixture(params=KINDS)
def server(request):
    """beanstalkd, then fastbean: the test runs against both."""
    s = Server.start(request.param)
    yield s
    s.stop()


@pytest.fixture
def fastbean_server(request):
    """fastbean alone; parametrize it indirectly with a tuple of extra arguments."""
    s = Server.start("fastbean", *getattr(request, "param", ()))
    yield s
    s.stop()
