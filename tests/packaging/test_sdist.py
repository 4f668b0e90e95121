"""The sdist: every source and what its own tests need (contrib/, docs/), the
LICENSE, the changelog and the contributing guide; nothing built; metadata
that twine accepts; and, unpacked, it builds and passes its own tests."""
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(600)

TOP = {"LICENSE", "CHANGELOG.md", "CONTRIBUTING.md", "README.md", "MANIFEST.in", "Makefile", "pyproject.toml",
       "setup.py"}
# the folders whose tracked files all go in
FOLDERS = ("fastbean/", "tests/", "benchmarks/", "tools/", "contrib/", "docs/")
# what setuptools and setuptools-scm add
GENERATED = {"PKG-INFO", "setup.cfg", "fastbean/_version.py"}


def members(sdist):
    """name (without the top folder) -> the member's first 4 bytes (None for a directory)."""
    out = {}
    with tarfile.open(sdist) as tar:
        for m in tar.getmembers():
            name = m.name.split("/", 1)[1] if "/" in m.name else ""
            if name and m.isfile():
                out[name] = tar.extractfile(m).read(4)
    return out


def tracked():
    if not os.path.isdir(os.path.join(ROOT, ".git")) and not os.path.isfile(os.path.join(ROOT, ".git")):
        return None         # an unpacked sdist testing itself
    p = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    return set(p.stdout.split()) if p.returncode == 0 else None


def test_sdist_holds_every_source_and_nothing_built(sdist):
    files = members(sdist)
    names = set(files)
    assert TOP <= names, TOP - names
    for need in ("contrib/systemd/fastbean.service", "contrib/systemd/fastbean.socket",
                 "contrib/haproxy/haproxy.cfg", "docs/releasing.md", "benchmarks/loadgen.c",
                 "fastbean/engine/core.pyx", "fastbean/include/arena.h", "tests/operations/test_systemd.py"):
        assert need in names, need
    built = [n for n, head in files.items()
             if head == b"\x7fELF" or n.startswith(("build/", "benchmarks/build/", "dist/"))
             or n.endswith((".so", ".o", ".a", ".pyc")) or "__pycache__" in n
             or (n.startswith("fastbean/") and n.endswith((".c", ".html"))
                 and not n.startswith("fastbean/console/templates/"))]
    assert built == []
    git = tracked()
    if git is not None:
        want = {n for n in git if n.startswith(FOLDERS) or n in TOP}
        assert want - names == set(), "tracked files missing from the sdist"
        extra = {n for n in names - git - GENERATED if not n.startswith("fastbean.egg-info/")}
        assert extra == set(), "files in the sdist that git does not track"


def test_sdist_metadata_passes_twine_check(sdist):
    pytest.importorskip("twine", reason="twine comes with the dev extra")
    p = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", sdist], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        info = tar.extractfile(top + "/PKG-INFO").read().decode()
    assert "License-Expression: MIT\n" in info and "License-File: LICENSE\n" in info
    assert "Project-URL: " in info and "Classifier: Development Status" in info
    # the lint and release tools are not what the tests need
    test_extra = [line for line in info.splitlines() if line.endswith('extra == "test"')]
    assert test_extra and not [line for line in test_extra if any(
        tool in line for tool in ("ruff", "mypy", "cython-lint", "twine", "auditwheel", "ziglang"))]
    assert 'Requires-Dist: ruff>=0.4; extra == "dev"' in info


def test_unpacked_sdist_builds_and_passes_its_own_tests(sdist, tmp_path):
    import setuptools
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip("an in-place build needs setuptools >= 77 (the dev extra)")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path)
    (tree,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    p = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "-q"], cwd=tree,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    # the tests import the unpacked tree's fastbean, not this one
    p = subprocess.run([sys.executable, "-c", "import fastbean.engine.core as c; print(c.__file__)"],
                       cwd=tree, capture_output=True, text=True)
    assert p.stdout.startswith(str(tree)), p.stdout + p.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "FASTBEAN_"))}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--basetemp", str(tmp_path / "tmp"),
                        "tests/operations/test_systemd.py", "tests/operations/test_startup.py",
                        "tests/operations/test_lifecycle.py", "tests/operations/test_logs.py",
                        "-k", "not nats and not read_only and not signals_sent and not number_flags "
                              "and not json_events"],
                       cwd=tree, env=env, capture_output=True, text=True, timeout=540)
    assert p.returncode == 0, p.stdout[-5000:] + p.stderr[-3000:]
    assert " passed" in p.stdout and "error" not in p.stdout.splitlines()[-1]
    shutil.rmtree(tree)
