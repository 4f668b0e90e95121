"""benchmarks.tls, briefly: every path it compares (fastbean plain, fastbean's
TLS listener through a client stunnel, beanstalkd behind stunnel) carries the
load generator's jobs without an error, so the figures it prints are of
working paths."""
import pytest

from benchmarks import tls
from benchmarks.harness import build_loadgen
from tests.support.certs import Pki

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("path", tls.PATHS)
def test_every_path_carries_jobs(path, tmp_path):
    build_loadgen()
    pki = Pki(str(tmp_path))
    res = tls.measure(path, ("cycle c2 d1", "roundtrip", 2, 1), pki, str(tmp_path), 0.5)
    assert res["errors"] == 0, res["first_error"]
    assert res["transactions"] > 100
    # the TLS paths go through their tunnels, which do the TLS work
    assert (res["tunnel_cpu"] > 0) == (path in ("tls", "stunnel"))
