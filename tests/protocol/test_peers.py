"""The peer corpus in ../shared/conformance: scenarios another team wrote while
reimplementing beanstalkd, each run on the real beanstalkd and on fastbean side
by side, replies compared step by step (`make peers` runs it by hand)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT as SUPPORT_ROOT

ROOT = Path(SUPPORT_ROOT)
PEERS = ROOT.parent / "shared" / "conformance" / "peers.py"
SERVER = "%s -m fastbean -l 127.0.0.1 -p {port}" % sys.executable

# Deliberate differences, each in the README's compatibility notes: beanstalkd
# adds one to a buried job's `buries` on every restart.
DIFFERENT = ["binlog_buries_counter_replay_quirk", "binlog_crash_after_bury_ack",
             "binlog_multiple_restarts_in_a_row"]

pytestmark = pytest.mark.timeout(900)

if not PEERS.exists():
    if os.environ.get("CI"):
        raise RuntimeError("the peer corpus is missing: %s" % PEERS)
    pytest.skip("no peer corpus beside this checkout", allow_module_level=True)


def peers(*args):
    return subprocess.run([sys.executable, str(PEERS), "--server-cmd", SERVER, "--no-doctest",
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=850)


def test_peer_corpus_passes():
    p = peers(*[a for name in DIFFERENT for a in ("--exclude", name)])
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert " 0 failed" in p.stdout


@pytest.mark.parametrize("name", DIFFERENT)
def test_known_differences_are_still_the_documented_ones(name):
    # If one of these starts passing, the README's compatibility notes are stale.
    p = peers("--only", name, "--retries", "0", "--verbose")
    assert p.returncode != 0, p.stdout
    diffs = [line.strip() for line in p.stdout.splitlines() if line.strip().startswith("diff:")]
    assert diffs and all(d.startswith("diff: buries: ") for d in diffs), p.stdout
