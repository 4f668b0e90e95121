"""The release pipeline, checked offline: cibuildwheel's configuration
(pyproject.toml) selects exactly the wheels tools/wheels.py (`make wheels`)
builds, for the same images and with the same check (tools/wheelcheck.py);
the release workflow builds them with the cibuildwheel checked here and
publishes them by trusted publishing on tags only; every workflow passes
GitHub's workflow schema and zizmor. The tools come with the dev extra."""
import glob
import importlib.util
import os
import re
import subprocess
import sys
import sysconfig

import pytest

from tests.conftest import ROOT

WORKFLOWS = sorted(glob.glob(os.path.join(ROOT, ".github", "workflows", "*.yml")))
RELEASE = os.path.join(ROOT, ".github", "workflows", "release.yml")

# an unpacked sdist has neither .git nor .github (MANIFEST.in)
pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, ".git")), reason="not a git checkout")


def tool(name):
    """A console script of the dev extra, beside this Python's."""
    path = os.path.join(sysconfig.get_path("scripts"), name)
    if not os.path.exists(path):
        pytest.skip("%s comes with the dev extra" % name)
    return path


def wheels_tool():
    spec = importlib.util.spec_from_file_location("wheels", os.path.join(ROOT, "tools", "wheels.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_wheels_set(arch=None):
    wheels = wheels_tool()
    return {wheels.build_identifier(v, p) for v in wheels.supported_versions() for p in wheels.PLATFORMS.values()
            if arch in (None, p.arch)}


def cibuildwheel_set(**env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")}
    p = subprocess.run([tool("cibuildwheel"), "--print-build-identifiers", "--platform", "linux", ROOT],
                       env=dict(clean, **env), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return set(p.stdout.split())


def cibuildwheel_config():
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11 reads TOML")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["tool"]["cibuildwheel"]


def read(path):
    with open(path) as f:
        return f.read()


def test_cibuildwheel_builds_exactly_what_make_wheels_builds():
    want = make_wheels_set()
    assert len(want) == 24 and "cp39-musllinux_aarch64" in want and "cp314-manylinux_x86_64" in want
    assert cibuildwheel_set() == want
    # the workflow's matrix: one runner per architecture, together the whole set
    for arch in ("x86_64", "aarch64"):
        assert cibuildwheel_set(CIBW_ARCHS_LINUX=arch) == make_wheels_set(arch)


def test_wheels_list_mode_prints_the_set():
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "wheels.py"), "--list"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert {line.split()[0] for line in p.stdout.splitlines()} == make_wheels_set()


def test_cibuildwheel_uses_make_wheels_images_and_check():
    config = cibuildwheel_config()
    wheels = wheels_tool()
    for platform in wheels.PLATFORMS.values():
        family = "musllinux" if platform.musl else "manylinux"
        image = config["%s-%s-image" % (family, platform.arch)]
        assert platform.name == "%s_%s" % (image, platform.arch), (platform.name, image)
    assert config["test-requires"] == wheels.CHECK_REQUIRES
    assert config["test-command"] == "python {project}/tools/wheelcheck.py {project}/docs/python.md"
    # stripped, as tools/wheels.py links them
    assert config["environment"]["LDFLAGS"] == "-s"


def test_release_workflow_builds_with_the_cibuildwheel_checked_here():
    from importlib.metadata import version
    text = read(RELEASE)
    (action,) = re.findall(r"uses: pypa/cibuildwheel@v([\d.]+)", text)
    assert action == version("cibuildwheel"), "the dev extra's cibuildwheel must be the workflow's"
    assert '"cibuildwheel==%s;' % action in read(os.path.join(ROOT, "pyproject.toml"))
    (count,) = re.findall(r"WHEELS: (\d+)", text)
    assert int(count) == len(make_wheels_set())
    assert re.search(r"CIBW_ARCHS_LINUX: \$\{\{ matrix.arch \}\}", text)
    assert "arch: x86_64\n" in text and "arch: aarch64\n" in text


def test_release_workflow_publishes_by_trusted_publishing_on_tags_only():
    text = read(RELEASE)
    assert re.search(r"^on:\n  push:\n    tags: \[\"v\*\"\]\n  workflow_dispatch:\n", text, re.M)
    assert re.search(r"^permissions:\n  contents: read\n", text, re.M)
    publish = text[text.index("\n  publish:\n"):]
    assert "    if: github.event_name == 'push' && github.ref_type == 'tag'\n" in publish
    assert "    environment:\n      name: pypi\n" in publish
    assert "    permissions:\n      id-token: write\n" in publish
    assert re.search(r"uses: pypa/gh-action-pypi-publish@v[\d.]+\n", publish)
    assert "password" not in publish and "secrets." not in text
    # the only job that may get an OIDC token
    assert text.count("id-token: write") == 1
    # setuptools-scm needs the tags; the sdist must carry the tag's version
    assert "fetch-depth: 0" in text and 'dist/fastbean-${TAG#v}.tar.gz' in text


def test_workflows_match_githubs_schema():
    assert RELEASE in WORKFLOWS
    p = subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *WORKFLOWS],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def test_workflows_pass_zizmor():
    p = subprocess.run([tool("zizmor"), "--offline", "--no-progress", "--config",
                        os.path.join(ROOT, ".github", "zizmor.yml"), *WORKFLOWS],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
