"""benchmarks.ha, briefly: the three servers measured in turn, the
replicated primary's standby lag sampled, CPU steal and CPU per transaction
recorded; the lag computed from samples as the docstring says; and the
delay proxy behind --rtt-ms, which must hold bytes, not change them."""
import json
import socket
import subprocess
import time

import pytest

from benchmarks import ha
from benchmarks.harness import build_tool
from tests.support.servers import Server, free_port

pytestmark = pytest.mark.timeout(300)


def test_one_round_of_one_case(tmp_path, capsys):
    results = tmp_path / "ha.json"
    assert ha.main(["--reps", "1", "--seconds", "0.5", "--case", "put:8:4", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "put c8 d4" in out and "standby lag max" in out
    with open(results) as f:
        doc = json.load(f)
    runs = doc["runs"]
    assert set(runs) == {"put c8 d4 | %s" % kind for kind in ha.KINDS}
    for kind in ha.KINDS:
        (r,) = runs["put c8 d4 | %s" % kind]
        assert r["ops_per_sec"] > 0 and r["errors"] == 0 and 0 <= r["steal"] <= 1
    (rep,) = runs["put c8 d4 | fastbean replicated"]
    assert rep["lag_max_s"] >= rep["lag_p99_s"] >= 0
    assert rep["tx_per_message"] > 0
    assert set(rep["cpu_us_per_tx"]) == {"nats", "primary", "standby", "loadgen", "other"}
    assert rep["cpu_us_per_tx"]["primary"] > 0 and rep["cpu_us_per_tx"]["nats"] > 0
    assert 0 < rep["cpu_busy"] <= 1.05      # /proc/stat and the wall clock are read apart
    (local,) = runs["put c8 d4 | fastbean -f0"]
    assert set(local["cpu_us_per_tx"]) == {"server", "loadgen", "other"}
    assert "CPU per transaction" in out and "ceiling" in out


def test_replicated_through_the_delay_proxy(tmp_path, capsys):
    results = tmp_path / "ha.json"
    assert ha.main(["--reps", "1", "--seconds", "0.5", "--case", "put:4:1", "--rtt-ms", "1",
                    "--results", str(results)]) == 0
    with open(results) as f:
        doc = json.load(f)
    assert doc["rtt_ms"] == 1
    (rep,) = doc["runs"]["put c4 d1 | fastbean replicated"]
    assert rep["ops_per_sec"] > 0 and rep["errors"] == 0
    # /proc counts CPU in clock ticks (10 ms): the proxy's share of half a second may round to 0
    assert rep["cpu_us_per_tx"]["delayproxy"] >= 0


def test_the_lag_is_the_age_of_the_first_message_the_standby_lacks():
    sampler = ha.LagSampler(None, None)
    sampler.samples = [(0.0, 10, 10), (0.1, 12, 10), (0.2, 15, 11), (0.3, 15, 15), (0.4, 16, 15)]
    # at 0.1 the standby lacks 11, stored by 0.1; at 0.2 it lacks 12, stored by 0.1
    assert sampler.lags() == pytest.approx([0.0, 0.0, 0.1, 0.0, 0.0])


def test_a_bad_case_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        ha.main(["--case", "put:many:1"])
    assert e.value.code == 2
    assert "--case: WORKLOAD:CLIENTS:DEPTH" in capsys.readouterr().err


@pytest.fixture
def proxied():
    """A fastbean, and delayproxy holding each direction 20 ms in front of it."""
    with Server("fastbean").start() as server:
        port = free_port()
        proc = subprocess.Popen([build_tool("delayproxy"), "-d", "20000", "%d:%d" % (port, server.port)],
                                stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "ready"
            yield port, server
        finally:
            proc.kill()
            proc.wait()


def test_the_proxy_holds_each_direction_and_passes_bytes_intact(proxied):
    port, server = proxied
    body = bytes(range(256)) * 234           # 59,904 bytes (under -z): several reads and writes
    with socket.create_connection(("127.0.0.1", port)) as s:
        t0 = time.monotonic()
        s.sendall(b"put 0 0 10 %d\r\n" % len(body) + body + b"\r\n")
        reply = s.recv(100)
        # held 20 ms each way: a lower bound the proxy guarantees, not a timing
        assert time.monotonic() - t0 >= 0.040
        assert reply.startswith(b"INSERTED ")
        jid = int(reply.split()[1])
        s.sendall(b"peek %d\r\n" % jid)
        got = b""
        want = b"FOUND %d %d\r\n" % (jid, len(body)) + body + b"\r\n"
        while len(got) < len(want):
            chunk = s.recv(1 << 16)
            assert chunk
            got += chunk
        assert got == want


def test_the_proxy_closes_the_far_side_with_the_near_one(proxied):
    port, server = proxied
    with server.client() as c:
        before = c.yaml(b"stats")["current-connections"]
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"list-tubes\r\n")
        assert s.recv(100).startswith(b"OK ")
        assert c.yaml(b"stats")["current-connections"] == before + 1
        s.close()
        deadline = time.monotonic() + 10
        while c.yaml(b"stats")["current-connections"] != before:
            assert time.monotonic() < deadline, "the proxy kept its upstream connection open"
            time.sleep(0.02)


def test_the_proxy_refuses_bad_arguments():
    for args in ([], ["-d", "10"], ["-d", "-1", "1:2"], ["-d", "10", "1:x"], ["-d", "10", "70000:1"]):
        r = subprocess.run([build_tool("delayproxy")] + args, capture_output=True, text=True, timeout=10)
        assert r.returncode == 2 and r.stderr.startswith("usage: delayproxy"), args
