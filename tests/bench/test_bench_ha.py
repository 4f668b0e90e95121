"""benchmarks.ha, briefly: the three servers measured in turn, the
replicated primary's standby lag sampled, CPU steal recorded; and the lag
computed from samples as the docstring says."""
import json

import pytest

from benchmarks import ha

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
