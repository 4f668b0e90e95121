"""Fixtures shared by the test files: real servers, started per test and stopped by PID,
a disk that fails fdatasync, and one whose fdatasync waits for the test."""
import os
import subprocess

import pytest

from tests.support.servers import KINDS, Server

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pytest_report_header(config):
    """Which nats-server the replication tests run (tests/support/natscluster.py)."""
    from tests.support.natscluster import NATS_SERVER, nats_server_version
    if not os.path.exists(NATS_SERVER):
        return "nats-server: none (%s missing; the replication tests skip)" % NATS_SERVER
    return "%s (%s; FASTBEAN_NATS_SERVER=debian for Debian's)" % (nats_server_version(NATS_SERVER), NATS_SERVER)


@pytest.fixture(scope="session")
def sdist(tmp_path_factory):
    """The sdist of a copy of this tree, built once a run (test_sdist.py,
    test_install.py). The copy keeps what a working tree holds besides the
    sources (the in-place build's .so and generated C), plus the benchmarks'
    compiled load generator and an object file, which must stay out."""
    import glob
    import shutil
    import sys

    import setuptools
    work = tmp_path_factory.mktemp("sdist")
    src = work / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", ".mypy_cache", ".ruff_cache", ".hypothesis", ".pytest_cache",
        ".venv", "__pycache__"))
    (src / "benchmarks" / "build").mkdir(exist_ok=True)
    shutil.copy(shutil.which("true") or "/bin/true", src / "benchmarks" / "build" / "loadgen")
    (src / "fastbean" / "engine" / "stray.o").write_bytes(b"\x7fELF")
    # without isolation where the environment can build it (setuptools >= 77,
    # the dev extra), so that no download is needed
    isolation = [] if int(setuptools.__version__.split(".")[0]) < 77 else ["--no-isolation"]
    p = subprocess.run([sys.executable, "-m", "build", "--sdist", *isolation, "--outdir", str(work), str(src)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (path,) = glob.glob(str(work / "fastbean-*.tar.gz"))
    return path


@pytest.fixture(params=KINDS)
def server(request):
    """beanstalkd, then fastbean: the test runs against both."""
    s = Server(request.param).start()
    yield s
    s.stop()


@pytest.fixture
def fastbean_server(request):
    """fastbean alone; parametrize it indirectly with a tuple of extra arguments."""
    s = Server("fastbean", *getattr(request, "param", ())).start()
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


GATED_FDATASYNC = r"""
/* LD_PRELOAD shim: fdatasync of a file named FASTBEAN_TEST_GATE_NAME (any
 * file when it is empty) waits while the file named by FASTBEAN_TEST_GATE
 * exists, as a disk that has not answered yet, and then
 * FASTBEAN_TEST_GATE_DELAY_US more, as a slow disk. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int fdatasync(int fd)
{
    const char *gate = getenv("FASTBEAN_TEST_GATE");
    const char *name = getenv("FASTBEAN_TEST_GATE_NAME");
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    path[n > 0 ? n : 0] = 0;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    const char *delay = getenv("FASTBEAN_TEST_GATE_DELAY_US");
    if (gate && (!name || !*name || strcmp(base, name) == 0)) {
        while (access(gate, F_OK) == 0)
            usleep(1000);
        if (delay)
            usleep(atoi(delay));
    }
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}
"""


def _preload(tmp_path, monkeypatch, name, source):
    # Servers started from now on run with this shim preloaded, after whatever
    # is preloaded already (make asan's runtime must stay first).
    src, shim = tmp_path / (name + ".c"), tmp_path / (name + ".so")
    src.write_text(source)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(shim), str(src), "-ldl"], check=True)
    preload = " ".join(filter(None, [os.environ.get("LD_PRELOAD"), str(shim)]))
    monkeypatch.setenv("LD_PRELOAD", preload)


@pytest.fixture
def failing_fsync(tmp_path, monkeypatch):
    """Servers started from now on fail fdatasync while the returned file exists."""
    flag = tmp_path / "eio"
    _preload(tmp_path, monkeypatch, "eio-shim", FAILING_FDATASYNC)
    monkeypatch.setenv("FASTBEAN_TEST_EIO", str(flag))
    return flag


@pytest.fixture
def gated_fsync(tmp_path, monkeypatch):
    """gate(name=""): servers started from now on hold every fdatasync of the
    file called name (of any file, by default) while the returned file exists
    (and FASTBEAN_TEST_GATE_DELAY_US more, if that is set)."""
    _preload(tmp_path, monkeypatch, "gate-shim", GATED_FDATASYNC)

    def gate(name=""):
        flag = tmp_path / "gate"
        flag.write_text("")
        monkeypatch.setenv("FASTBEAN_TEST_GATE", str(flag))
        monkeypatch.setenv("FASTBEAN_TEST_GATE_NAME", name)
        return flag
    return gate
