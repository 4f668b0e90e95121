"""benchmarks.limits, briefly: the disk's fdatasync rate, a three-replica
JetStream stream's publish rate and the node's durable puts are measured,
every case, and what a round left out for CPU steal is said rather than
averaged in."""
import json
import os

import pytest

from benchmarks import limits

pytestmark = pytest.mark.timeout(180)


def test_every_case_is_measured(tmp_path, capsys):
    disk, results = tmp_path / "disk", tmp_path / "limits.json"
    disk.mkdir()
    assert limits.main(["--rounds", "1", "--seconds", "0.3", "--dir", str(disk), "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert out.count("in flight") == len(limits.JS_CASES)
    assert out.count("records a sync") == len(limits.DISK_CASES) + len(limits.NODE_CASES)
    with open(results) as f:
        doc = json.load(f)
    for case in doc["disk"]:
        (r,) = case["rounds"]
        assert r["syncs_per_s"] > 0 and r["p99_ms"] >= r["p50_ms"] > 0
        assert r["records_per_s"] == pytest.approx(r["syncs_per_s"] * case["group"])
    for case in doc["jetstream"]:
        (r,) = case["rounds"]
        assert r["msgs_per_s"] > 0 and r["p99_ms"] >= r["p50_ms"] > 0
    by_policy = {case["policy"]: case["rounds"][0] for case in doc["node"]}
    assert set(by_policy) == set(limits.NODE_CASES)
    for r in by_policy.values():
        assert r["puts_per_s"] > 0 and r["syncs_per_s"] > 0 and r["records_per_sync"] >= 1
    # -f 0 syncs for every few puts; -f 50 once every 50 ms, many puts a sync
    assert by_policy["50"]["records_per_sync"] > by_policy["0"]["records_per_sync"]
    assert os.listdir(disk) == []           # the test file and the node's binlog went


def test_a_round_with_steal_is_left_out_and_said():
    rounds = [{"steal": 0.0, "x": 1.0}, {"steal": limits.STEAL_LIMIT + 0.01, "x": 100.0}, {"steal": 0.0, "x": 3.0}]
    assert limits.kept(rounds, "x") == (2.0, 1.0, 3.0, 1)
    assert limits.kept(rounds[1:2], "x") == (None, None, None, 1)
