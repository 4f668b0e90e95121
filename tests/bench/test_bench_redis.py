"""The load generator's Redis side (loadgen -r list|stream, which benchmarks.redis
drives): each workload against a real redis-server, briefly. Exact counts, and
what is left in Redis afterwards, check that the RESP replies were parsed, not
only that the program ran."""
import os

import pytest

from benchmarks.harness import build_loadgen, loadgen
from tests.support.servers import REDIS_SERVER, RedisServer, redis_call

pytestmark = pytest.mark.timeout(120)

PREFILL = 3000


@pytest.fixture(scope="module", autouse=True)
def tools():
    if not os.path.exists(REDIS_SERVER):
        pytest.fail("redis-server is required (apt-get install redis-server)")
    build_loadgen()


@pytest.fixture
def redis():
    with RedisServer().start() as r:
        yield r


def ok(res):
    assert res["errors"] == 0, res["first_error"]
    assert res["transactions"] > 0
    return res


@pytest.mark.parametrize("pattern", ["list", "stream"])
def test_reserve_drains_exactly_the_prefill(redis, pattern):
    put = ok(loadgen(redis.port, "put", conns=4, depth=8, seconds=0, total=PREFILL, tube="q", redis=pattern))
    assert put["transactions"] == put["commands"] == PREFILL
    if pattern == "list":
        assert redis_call(redis.port, "LLEN", "q") == PREFILL
    else:
        assert redis_call(redis.port, "XLEN", "q") == PREFILL

    got = ok(loadgen(redis.port, "reserve", conns=3, depth=2, seconds=0, tube="q", redis=pattern))
    # each connection stops at its first empty take, the one that found nothing
    assert got["transactions"] == PREFILL and got["timeouts"] >= 3
    acks_per_take = 1 if pattern == "list" else 2              # LREM; XACK and XDEL
    assert got["commands"] == PREFILL * (1 + acks_per_take) + got["timeouts"]
    if pattern == "list":
        assert redis_call(redis.port, "LLEN", "q") == 0
        assert redis_call(redis.port, "LLEN", "q:processing") == 0
    else:
        assert redis_call(redis.port, "XLEN", "q") == 0
        assert redis_call(redis.port, "XPENDING", "q", "g")[0] == 0


@pytest.mark.parametrize("pattern", ["list", "stream"])
@pytest.mark.parametrize("workload, conns, depth", [("put", 4, 1), ("roundtrip", 2, 1), ("roundtrip", 2, 4),
                                                    ("mixed", 4, 4)])
def test_workloads_complete_without_errors(redis, pattern, workload, conns, depth):
    res = ok(loadgen(redis.port, workload, conns=conns, depth=depth, seconds=0.2, tube="q", redis=pattern))
    assert res["p50_us"] > 0 and res["p99_us"] >= res["p50_us"]
    if workload == "roundtrip":
        # put, take, ack (the stream's ack is two commands), each connection on a key of
        # its own holding at most the transactions still in flight (Redis drops empty lists)
        per_txn = 3 if pattern == "list" else 4
        assert res["commands"] >= per_txn * res["transactions"]
        keys = [k for k in redis_call(redis.port, "KEYS", "q.*") if not k.endswith(b":processing")]
        assert len(keys) == conns if pattern == "stream" else len(keys) <= conns
        for key in keys:
            assert redis_call(redis.port, "XLEN" if pattern == "stream" else "LLEN", key) <= depth


def test_error_replies_are_counted(redis):
    # a key of the wrong type: every RPUSH gets an error, and the run still ends
    redis_call(redis.port, "SET", "q", "not a list")
    res = loadgen(redis.port, "put", conns=2, depth=4, seconds=0, total=20, tube="q", redis="list")
    assert res["errors"] == 20 and res["transactions"] == 0
    assert res["first_error"].startswith("WRONGTYPE")


def test_beanstalk_only_flags_are_refused():
    with pytest.raises(RuntimeError):
        loadgen(1, "put", seconds=0.1, delay=5, redis="list")
