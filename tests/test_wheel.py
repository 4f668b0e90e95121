"""Packaging: the sdist, a wheel built from it for this Python, repaired by
auditwheel and checked in a fresh virtualenv (tools/wheels.py, which `make
wheels` runs for every supported Python). Needs PyPI for the build and the
virtualenv's installs."""
import glob
import os
import platform
import re
import subprocess
import sys
import tarfile
import zipfile

import pytest

pytestmark = [pytest.mark.timeout(900), pytest.mark.wheel]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_wheel_from_sdist_for_this_python(tmp_path):
    out = tmp_path / "dist"
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "wheels.py"), "--out",
                          str(out), sys.executable], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert re.search(r"README example \(\d+ passed", run.stdout), run.stdout[-2000:]

    (sdist,) = glob.glob(str(out / "fastbean-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for need in ("fastbean/engine/core.pyx", "fastbean/engine/core.pxd", "fastbean/engine/testing.pxi",
                 "fastbean/include/arena.h", "fastbean/binlog/threads.pyx", "benchmarks/loadgen.c", "tests/servers.py",
                 "tools/wheelcheck.py", "README.md", "MANIFEST.in"):
        assert need in names, need
    assert not [n for n in names if n.startswith("fastbean/") and n.endswith((".c", ".so"))]

    tag = "cp%d%d" % sys.version_info[:2]
    (wheel,) = glob.glob(str(out / "*.whl"))
    assert re.fullmatch(r"fastbean-[\d.]+-%s-%s-manylinux_\d+_\d+_%s\.whl" % (
        tag, tag, platform.machine()), os.path.basename(wheel)), wheel
    with zipfile.ZipFile(wheel) as z:
        files = z.namelist()
        entry_points = z.read(next(f for f in files if f.endswith(".dist-info/entry_points.txt")))
    assert not [f for f in files if f.endswith(".c")]
    assert b"[pytest11]\nfastbean = fastbean.testing.pytest_plugin" in entry_points
