"""The README's install on Debian or Ubuntu's own Python: a virtualenv of
/usr/bin/python3 at /opt/fastbean (here under a scratch root), the sdist
installed into it, a job served from its `bin/fastbean`; and the systemd
unit, as shipped, verified against that root, whose ExecStart it names."""
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.servers import client, free_port, wait_listening

pytestmark = pytest.mark.timeout(600)

DEBIAN_PYTHON = "/usr/bin/python3"
PREFIX = "/opt/fastbean"                  # where the README puts it, and the unit runs it from
CONTRIB = Path(ROOT) / "contrib" / "systemd"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze") or "/usr/bin/systemd-analyze"


def readme_install_command():
    text = (Path(ROOT) / "README.md").read_text()
    setup = text[text.index("## Set-up"):text.index("## Command line")]
    return re.findall(r"```sh\n(.*?)\n```", setup, re.S)[0]


def test_readme_install_and_the_unit_agree():
    cmd = readme_install_command()
    assert "%s -m venv %s " % (DEBIAN_PYTHON, PREFIX) in cmd
    assert "%s/bin/pip install -q . " % PREFIX in cmd and "python3-venv" in cmd
    assert cmd.endswith("%s/bin/fastbean -l 127.0.0.1 -p 11300" % PREFIX)
    service = (CONTRIB / "fastbean.service").read_text()
    (execstart,) = [line for line in service.splitlines() if line.startswith("ExecStart=")]
    assert execstart.split()[0] == "ExecStart=%s/bin/fastbean" % PREFIX
    assert "ProtectHome=yes" in service        # why the virtualenv is not under /root or /home


@pytest.mark.skipif(not os.path.exists(DEBIAN_PYTHON), reason="no distribution Python at /usr/bin/python3")
def test_install_with_the_distributions_python_and_verify_the_unit(sdist, tmp_path):
    root = tmp_path / "root"
    venv = Path(str(root) + PREFIX)
    venv.parent.mkdir(parents=True)
    p = subprocess.run([DEBIAN_PYTHON, "-m", "venv", str(venv)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr           # python3-venv (the README's apt line)
    cfg = (venv / "pyvenv.cfg").read_text()
    assert re.search(r"^home = /usr/bin$", cfg, re.M), cfg  # not a Python under /root or /home
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    p = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", sdist],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]

    fastbean = venv / "bin" / "fastbean"
    p = subprocess.run([str(fastbean), "--version"], capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert p.returncode == 0 and p.stdout.startswith("fastbean "), p.stderr
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import fastbean.engine.core as c, uvloop; print(c.__file__)"],
                           capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert where.stdout.startswith(str(venv)) and where.stdout.strip().endswith(".so"), where.stderr
    # the wheel pip built carries the licence
    (dist_info,) = venv.glob("lib/python3*/site-packages/fastbean-*.dist-info")
    assert (dist_info / "licenses" / "LICENSE").read_text().startswith("MIT License")
    assert "License-Expression: MIT" in (dist_info / "METADATA").read_text()
    # --help names the docs installed with the package, which are there
    helped = subprocess.run([str(fastbean), "--help"], capture_output=True, text=True, env=env)
    assert "%s/share/doc/fastbean/index.md" % venv in helped.stdout, helped.stdout[-300:]
    for page in ("index.md", "configuration.md", "operations/metrics.md", "console/overview-desktop-light.png"):
        assert (venv / "share" / "doc" / "fastbean" / page).is_file(), page
    # man finds the pages from the bin/ on PATH
    for page in ("fastbean", "fastbean-ctl"):
        found = subprocess.run(["man", "-w", page], capture_output=True, text=True,
                               env=dict(env, PATH="%s/bin:/usr/bin:/bin" % venv, MANPATH=""))
        assert found.stdout.strip() == "%s/share/man/man1/%s.1" % (venv, page), found.stdout + found.stderr

    port = free_port()
    server = subprocess.Popen([str(fastbean), "-l", "127.0.0.1", "-p", str(port)], env=env, cwd=str(tmp_path),
                              stderr=subprocess.PIPE, text=True)
    try:
        wait_listening(port, server)
        with client(port) as c:
            jid = c.put(b"installed")
            assert c.job(b"reserve-with-timeout 0") == (jid, b"installed")
            c.cmd(b"delete %d" % jid, b"DELETED")
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(10) == 0
    assert "serving 0 jobs" in server.stderr.read()

    # the units as shipped, in that root: ExecStart must name its fastbean
    units = root / "etc" / "systemd" / "system"
    units.mkdir(parents=True)
    for name in ("fastbean.service", "fastbean.socket"):
        shutil.copy(CONTRIB / name, units / name)
    # the distribution's own units, which ours are ordered against
    shutil.copytree("/usr/lib/systemd/system", root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    verify = [SYSTEMD_ANALYZE, "verify", "--man=no", "--root", str(root),
              "/etc/systemd/system/fastbean.service", "/etc/systemd/system/fastbean.socket"]
    p = subprocess.run(verify, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout == "" and p.stderr == "", p.stdout + p.stderr
    # and it can fail: without the install, the unit names nothing
    fastbean.rename(fastbean.with_name("elsewhere"))
    p = subprocess.run(verify, capture_output=True, text=True)
    assert p.returncode != 0 and "/opt/fastbean/bin/fastbean is not executable" in p.stderr, p.stderr
