"""The documentation: the site builds from docs/ with every warning an error
(a broken link to a page or to a heading included), and the README stays a
front page that PyPI renders."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.servers import Server

pytestmark = pytest.mark.timeout(300)

DOCS = Path(ROOT) / "docs"
README = (Path(ROOT) / "README.md").read_text()


def test_the_site_builds_without_a_warning(tmp_path):
    pytest.importorskip("sphinx", reason="Sphinx comes with the dev extra")
    # -W: warnings are errors; -n: every reference must resolve; --keep-going: all of them at once
    p = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html",
                        str(DOCS), str(tmp_path / "html")], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "html" / "migrating.html").exists()


def test_a_broken_link_fails_the_build(tmp_path):
    # the check above must be able to fail: the same sources with one bad anchor
    pytest.importorskip("sphinx", reason="Sphinx comes with the dev extra")
    src = tmp_path / "docs"
    subprocess.run(["cp", "-r", str(DOCS), str(src)], check=True)
    (tmp_path / "CHANGELOG.md").write_text((Path(ROOT) / "CHANGELOG.md").read_text())
    with open(src / "migrating.md", "a") as f:
        f.write("\nSee [nothing](durability.md#no-such-heading).\n")
    p = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-n", "-q", "-b", "html", str(src),
                        str(tmp_path / "html")], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode != 0 and "no-such-heading" in p.stderr


def test_the_readme_is_a_front_page():
    assert len(README.splitlines()) <= 300
    # PyPI shows the README alone: no images, which would need an address of their own
    assert not re.search(r"!\[[^\]]*\]\(", README)
    for heading in ("## Set-up", "## Quick start", "## Command line", "## Documentation"):
        assert heading in README


def test_every_page_the_readme_names_exists():
    links = re.findall(r"\]\((docs/[^)#]*)(?:#[^)]*)?\)", README)
    assert len(links) >= 10
    missing = [link for link in links if not (Path(ROOT) / link).exists()]
    assert missing == []


def test_every_page_is_in_the_site():
    # a page on disk but in no table of contents would be a page no reader finds
    # (Sphinx warns too; this names the page without building)
    index = (DOCS / "index.md").read_text()
    listed = set(re.findall(r"^([\w/-]+)$", index, re.M))
    pages = {str(p.relative_to(DOCS))[:-3] for p in DOCS.rglob("*.md")} - {"index"}
    assert pages <= listed, pages - listed


def test_the_quick_start_runs(tmp_path):
    # the README's first client, as a reader would paste it, against a real server
    quick = README[README.index("## Quick start"):]
    (code,) = re.findall(r"```python\n(.*?)```", quick[:quick.index("\n## ", 1)], re.S)
    server = Server("fastbean").start()
    try:
        script = tmp_path / "quick.py"
        script.write_text(code.replace("11300", str(server.port)))
        p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert p.stdout == 'sending {"to": "ada@example.com"}\n'
        with server.client() as c:
            assert c.stats()["total-jobs"] == 1 and c.stats()["current-jobs-ready"] == 0
    finally:
        server.stop()


def test_every_copy_of_the_test_command_is_the_readme_s():
    # CI runs .ci/run, which repeats the README's test command; the install
    # page shows it too: a package added to one and not the others is a CI
    # that tests something else than what a contributor runs
    command = [line for line in README.splitlines()
               if line.startswith("apt-get") and line.endswith("&& python3 -m pytest -q")]
    assert len(command) == 1, command
    copies = {}
    for path in [Path(ROOT) / ".ci" / "run"] + sorted((Path(ROOT) / "docs").glob("**/*.md")):
        for line in path.read_text().splitlines():
            if line.startswith("apt-get") and line.endswith("python3 -m pytest -q"):
                copies[str(path.relative_to(ROOT))] = line
    assert ".ci/run" in copies and "docs/install.md" in copies, sorted(copies)
    assert {name: line for name, line in copies.items() if line != command[0]} == {}
