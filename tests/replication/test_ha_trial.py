"""`make ha-trial` (tools/ha_trial.py): three NATS servers and three nodes on
loopback in one command; a primary is found and named, a kill -9 of it is
survived by the job put on it, and Ctrl-C stops every process it started."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from tests.support.natscluster import NATS_SERVER

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(not os.path.exists(NATS_SERVER), reason="needs nats-server")]
TRIAL = os.path.join(ROOT, "tools", "ha_trial.py")


def test_trial_survives_a_killed_primary(tmp_path):
    p = subprocess.run([sys.executable, TRIAL, "--check", "--free-ports", "--lease-ttl", "2",
                        "--nats-server", NATS_SERVER, "--dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"check: node-\w took over with job \d+: ok", p.stdout), p.stdout


def test_trial_names_the_primary_and_ctrl_c_stops_everything(tmp_path):
    p = subprocess.Popen([sys.executable, TRIAL, "--free-ports", "--nats-server", NATS_SERVER, "--dir", str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        deadline = time.monotonic() + 120
        while not lines or "Ctrl-C stops it all" not in lines[-1]:
            line = p.stdout.readline()
            assert line and time.monotonic() < deadline, "".join(lines) + p.stderr.read()
            lines.append(line)
        out = "".join(lines)
        roles = re.findall(r"(node-\w)\s+pid (\d+)\s+beanstalk 127\.0\.0\.1:\d+ .* (\S+)\n", out)
        assert len(roles) == 3 and [r[2] for r in roles].count("primary") == 1, out
        pids = [int(r[1]) for r in roles]
        assert "NATS cluster: nats://127.0.0.1:" in out and "nats-server: v" in out, out
    finally:
        p.send_signal(signal.SIGINT)
        assert p.wait(60) == 0, p.stderr.read()
    for pid in pids:                       # every node stopped (and reaped)
        assert not os.path.exists("/proc/%d" % pid) or \
            open("/proc/%d/stat" % pid).read().split()[2] == "Z", pid
