"""benchmarks.perrequest, briefly: at depth 1 every server reads each request
once and answers it in one write, so the counts it reports per put must be
one read and one write (or send), whatever the machine's load; a count off
that means the counting is wrong, not the server. (How many epoll calls come
with them depends on the machine's load, and is not checked.)"""
import shutil
import subprocess

import pytest

from benchmarks import perrequest
from benchmarks.harness import build_loadgen

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module", autouse=True)
def tools():
    if shutil.which("perf") is None:
        pytest.skip("perf is not installed (Debian: linux-perf)")
    probe = subprocess.run(["perf", "stat", "-e", "raw_syscalls:sys_enter", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("perf may not count syscall tracepoints here")
    build_loadgen()


@pytest.mark.parametrize("kind", ["fastbean", "nullserver", "uvnull"])
def test_a_put_at_depth_1_is_one_read_and_one_write(kind):
    res = perrequest.measure(kind, "put", 4, 5000)
    per = res["per"]
    assert res["transactions"] == 5000
    assert 0.99 <= per.get("read", 0) <= 1.02, per
    assert 0.99 <= per.get("write", 0) + per.get("sendto", 0) <= 1.02, per
    assert per["syscalls"] >= 2, per        # epoll's share depends on the load and busy polling
    assert res["cpu_us"] > 0


def test_reserve_counts_a_reserve_and_a_delete():
    res = perrequest.measure("fastbean", "reserve", 4, 3000)
    per = res["per"]
    assert 1.98 <= per.get("read", 0) <= 2.04, per
    assert 1.98 <= per.get("sendto", 0) + per.get("write", 0) <= 2.04, per
