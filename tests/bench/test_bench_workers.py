"""benchmarks.workers, briefly: a tiny run of each system it can start here
carries every job once, from the producer to a handler, and the report has
every field the docs' table shows; no timing is asserted. RQ and Celery come
with the bench extra, which CI does not install: without them only fastbean
runs (the rq and celery cases skip). Bad arguments give one line, no
traceback."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from benchmarks import workers
from tests.support import ROOT
from tests.support.servers import REDIS_SERVER

pytestmark = pytest.mark.timeout(300)

RUN_KEYS = {"jobs", "wall_s", "jobs_per_s", "p50_ms", "p99_ms", "cpu_ms_per_job", "cpu_s", "put_per_s", "steal",
            "load1", "others_cores", "system", "workload", "concurrency", "round", "ready_s"}


def available(system):
    if system == "fastbean":
        return True
    return os.path.exists(REDIS_SERVER) and all(importlib.util.find_spec(m) for m in (system, "redis"))


@pytest.mark.parametrize("system", ["fastbean", "rq", "celery"])
def test_a_tiny_run_has_the_reports_shape(system, tmp_path, capsys):
    if not available(system):
        pytest.skip("%s is not installed (the bench extra)" % system)
    out = tmp_path / "workers.json"
    systems = "fastbean" if system == "fastbean" else "fastbean," + system
    assert workers.main(["--jobs", "30", "--sleep-jobs", "6", "--concurrency", "1,3", "--rounds", "1",
                         "--systems", systems, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    names = systems.split(",")
    assert doc["sizes"] == {"noop": 30, "sleep": 6} and doc["systems"] == names
    assert len(doc["runs"]) == len(names) * 2 * 2
    for run in doc["runs"]:
        assert set(run) == RUN_KEYS, set(run) ^ RUN_KEYS
        assert run["jobs"] == (30 if run["workload"] == "noop" else 6)
        assert run["jobs_per_s"] > 0 and 0 <= run["p50_ms"] <= run["p99_ms"]
        assert set(run["cpu_s"]) == {"server", "workers", "producer"}
        assert run["cpu_ms_per_job"] > 0 and 0 <= run["steal"] <= 1
    assert [(r["workload"], r["concurrency"]) for r in doc["summary"]] == [
        ("noop", 1), ("noop", 3), ("sleep", 1), ("sleep", 3)]
    for row in doc["summary"]:
        assert set(row["median"]) == set(names)
        others = [s for s in names if s != "fastbean"]
        assert set(row["ratios"]) == set(others)
        for sp in row["ratios"].values():
            assert sp is None or (sp["min"] <= sp["median"] <= sp["max"] and sp["rounds"] == 1)
    table = capsys.readouterr().out
    assert "noop c1" in table and "sleep c3" in table and "server / workers / producer" in table
    # --report prints the same tables from the saved file, and runs nothing
    assert workers.main(["--report", str(out)]) == 0
    assert table.startswith(capsys.readouterr().out)
    # nothing left behind: the records on /dev/shm, the processes
    assert not [n for n in os.listdir(workers.SHM or "/tmp") if n.startswith("wbench-")]


@pytest.mark.parametrize("args", [["--jobs", "0"], ["--concurrency", "1,x"], ["--systems", "sidekiq"],
                                  ["--workloads", "cpu"], ["--rounds"], ["--nope"],
                                  ["--report", "/nonexistent/workers.json"]])
def test_bad_arguments_give_one_line(args):
    r = subprocess.run([sys.executable, "-m", "benchmarks.workers", *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2
    assert r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr
