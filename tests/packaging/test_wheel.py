"""Packaging: the sdist, and from it the manylinux2014 wheel for this Python,
compiled by Zig's C compiler against glibc 2.17, tagged by auditwheel and
tried in a fresh virtualenv (tools/wheels.py, which `make wheels` runs for
every supported Python and platform). Needs PyPI for the build and the
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

from tests.support import ROOT

pytestmark = [pytest.mark.timeout(900), pytest.mark.wheel]

MACHINE = platform.machine()


def tracked(prefix):
    out = subprocess.run(["git", "ls-files", prefix], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_manylinux2014_wheel_from_sdist_for_this_python(tmp_path):
    for tool in ("ziglang", "auditwheel"):
        pytest.importorskip(tool, reason="the release tools come with the dev extra")
    from elftools.elf.elffile import ELFFile

    out = tmp_path / "dist"
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "wheels.py"), "--out", str(out),
                          "--platform", "manylinux2014_" + MACHINE, sys.executable],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    # the server started from the installed wheel, a greenstalk round trip, the plugin example of docs/python.md
    assert re.search(r"server \+ greenstalk round trip on uvloop, plugin example \(\d+ passed", run.stdout), \
        run.stdout[-2000:]

    (sdist,) = glob.glob(str(out / "fastbean-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for need in tracked("fastbean") + ["benchmarks/loadgen.c", "tests/support/servers.py", "tools/wheelcheck.py",
                                       "README.md", "MANIFEST.in"]:
        assert need in names, need
    assert not [n for n in names if n.startswith("fastbean/") and n.endswith((".c", ".so"))]

    tag = "cp%d%d" % sys.version_info[:2]
    (wheel,) = glob.glob(str(out / "*.whl"))
    assert re.fullmatch(r"fastbean-\d[\w.+]*-{0}-{0}-manylinux2014_{1}\.manylinux_2_17_{1}\.whl".format(
        tag, MACHINE), os.path.basename(wheel)), wheel
    show = subprocess.run([sys.executable, "-m", "auditwheel", "show", wheel], capture_output=True, text=True,
                          check=True).stdout
    assert re.search(r'platform\s+tag:\s+"manylinux_2_17_%s"' % MACHINE, show), show
    pyx = {n[:-len(".pyx")] for n in names if n.startswith("fastbean/") and n.endswith(".pyx")}
    with zipfile.ZipFile(wheel) as z:
        files = z.namelist()
        entry_points = z.read(next(f for f in files if f.endswith(".dist-info/entry_points.txt")))
        compiled = [f for f in files if f.endswith(".so")]
        assert {f.split(".", 1)[0] for f in compiled} == pyx
        for name in compiled:
            z.extract(name, tmp_path)
            with open(tmp_path / name, "rb") as f:
                sections = {s.name for s in ELFFile(f).iter_sections()}
            assert ".symtab" not in sections and not [s for s in sections if s.startswith(".debug")], name
    assert not [f for f in files if f.endswith(".c")]
    assert [f for f in files if f.endswith(".dist-info/licenses/LICENSE")], "no LICENSE in the wheel"
    for need in ("LICENSE", "CHANGELOG.md", "CONTRIBUTING.md", "contrib/systemd/fastbean.service"):
        assert need in names, need
    assert b"[pytest11]\nfastbean = fastbean.testing.pytest_plugin" in entry_points
