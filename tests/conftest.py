"""Fixtures shared by the test files: real servers, started per test and stopped by PID,
and a disk that fails fdatasync."""
import os
import subprocess

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


FAILING_FDATASYNC = r"""
/* LD_PRELOAD shim: fdatasync fails with EIO while the file named by
 * FASTBEAN_TEST_EIO exists, as a dying disk's would. With FASTBEAN_TEST_EIO_ONCE
 * set, only one call fails, after 300 ms, and removes the file. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
int fdatasync(int fd)
{
    const char *flag = getenv("FASTBEAN_TEST_EIO");
    if (flag && getenv("FASTBEAN_TEST_EIO_ONCE")) {
        if (unlink(flag) == 0) {
            usleep(300000);
            errno = EIO;
            return -1;
        }
    } else if (flag && access(flag, F_OK) == 0) {
        errno = EIO;
        return -1;
    }
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}
"""


@pytest.fixture
def failing_fsync(tmp_path, monkeypatch):
    """Servers started from now on fail fdatasync while the returned file exists."""
    src, shim, flag = tmp_path / "shim.c", tmp_path / "shim.so", tmp_path / "eio"
    src.write_text(FAILING_FDATASYNC)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(shim), str(src), "-ldl"], check=True)
    # after whatever is preloaded already (make asan's runtime must stay first)
    preload = " ".join(filter(None, [os.environ.get("LD_PRELOAD"), str(shim)]))
    monkeypatch.setenv("LD_PRELOAD", preload)
    monkeypatch.setenv("FASTBEAN_TEST_EIO", str(flag))
    return flag
