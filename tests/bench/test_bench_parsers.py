"""benchmarks.parsers, briefly: builds named on the command line are loaded
apart (the same build twice too, an A/A run), timed on every input, and
their ratios to the first build printed; a directory without a build is one
line, not a traceback."""
import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

from benchmarks import parsers

pytestmark = pytest.mark.timeout(120)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_two_builds_are_timed_apart(tmp_path, capsys):
    # the tree's build, and a copy of it in a directory of its own: an A/A run
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(parsers.find_so(ROOT), copy)
    results = tmp_path / "parsers.json"
    assert parsers.main(["--rounds", "3", "--runs", "2", "--results", str(results), ROOT, str(copy)]) == 0
    out = capsys.readouterr().out
    for name in parsers.INPUTS:
        assert name in out
    assert out.count(str(copy)) == len(parsers.INPUTS)
    with open(results) as f:
        doc = json.load(f)
    assert [b["dir"] for b in doc["builds"]] == [ROOT, str(copy)]
    for name, runs in doc["cases"].items():
        assert len(runs) == 2, name
        for run in runs:
            assert len(run["us"]) == 2 and min(run["us"]) > 0
            assert 0 <= run["steal"] <= 1


def test_builds_do_not_share_a_module(tmp_path):
    so = parsers.find_so(ROOT)
    a, b = parsers.load(so, str(tmp_path)), parsers.load(so, str(tmp_path))
    assert a is not b and a.Parser is not b.Parser
    assert a.Parser().parse(parsers.SHORT) == b.Parser().parse(parsers.SHORT)


def test_the_build_found_is_this_pythons(tmp_path):
    # a checkout built for several Pythons holds a parser for each
    (tmp_path / "parser.cpython-310-x86_64-linux-gnu.so").write_bytes(b"not this one")
    mine = shutil.copy(parsers.find_so(ROOT), tmp_path)
    assert parsers.find_so(str(tmp_path)) == mine


def test_a_file_that_is_no_build_is_one_line(tmp_path):
    so = tmp_path / os.path.basename(parsers.find_so(ROOT))
    so.write_bytes(b"not an extension")
    r = subprocess.run([sys.executable, "-m", "benchmarks.parsers", "--runs", "1", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("python -m benchmarks.parsers: %s does not load as a parser: " % so)


def test_a_directory_without_a_build_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "benchmarks.parsers", "--runs", "1", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [
        "python -m benchmarks.parsers: no parser*.so in %s (run make build there)" % tmp_path]
    assert glob.glob(str(tmp_path / "*")) == []
