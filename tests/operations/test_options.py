"""The option table (fastbean/options.py) is what parses the flags, prints
--help and writes the man page: the README's and docs/configuration.md's
flag tables, and the man pages in the tree, must say what it says."""
import re
from pathlib import Path

import pytest

from fastbean.options import BY_FLAG, OPTIONS, USAGE
from tests.support import ROOT as SUPPORT_ROOT

ROOT = Path(SUPPORT_ROOT)
TABLES = {name: (ROOT / name).read_text() for name in ("README.md", "docs/configuration.md")}


def flag_rows(text):
    """{flag: default column} of every row of a markdown flag table."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| (`-[^|]*) \|.*\| ([^|]*) \|$", line)
        if m:
            for flag in re.findall(r"`(--?[\w-]+)[^`]*`", m.group(1)):
                rows[flag] = m.group(2).strip()
    return rows


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_flag_tables_name_only_real_flags_with_their_defaults(name):
    rows = flag_rows(TABLES[name])
    assert len(rows) > 20
    assert set(rows) <= set(BY_FLAG), set(rows) - set(BY_FLAG)
    for flag, default in rows.items():
        assert default == (BY_FLAG[flag].documented or ""), (name, flag)


def test_every_option_is_documented_and_in_the_help():
    text = TABLES["docs/configuration.md"]
    for option in OPTIONS:
        assert "`%s" % option.flag in text, option.flag
        assert " %s" % option.synopsis() in USAGE


def test_prose_that_gives_a_default_gives_the_table_s():
    # such as docs/install.md's "(`--lease-ttl`, 10 s by default" when it was 15
    pages = sorted(ROOT.glob("docs/**/*.md")) + [ROOT / "README.md"]
    checked = 0
    for option in OPTIONS:
        if not option.documented or not re.fullmatch(r"\d+", option.documented):
            continue
        said = re.compile(r"`%s[^`]*`[^.;`]{0,30}?\(?(?:default:? )?(\d+)(?: s| ms| µs)? (?:by default|default)\b"
                          % re.escape(option.flag) + r"|`%s[^`]*`[^.;`]{0,30}?\(default:? (\d+)"
                          % re.escape(option.flag))
        for page in pages:
            for m in said.finditer(page.read_text()):
                checked += 1
                assert (m.group(1) or m.group(2)) == option.documented, (page.name, m.group(0))
    assert checked >= 3


@pytest.mark.parametrize("page", ["fastbean.1", "fastbean-ctl.1"])
def test_the_man_pages_in_the_tree_are_what_the_parsers_write(page):
    from fastbean.manpages import PAGES
    assert (ROOT / "man" / page).read_text() == PAGES[page](), (
        "man/%s is stale: python -m fastbean.manpages man" % page)


def test_the_man_pages_read_cleanly():
    # man's own check: no troff warnings, every option in the page
    import shutil
    import subprocess
    assert shutil.which("man"), "man-db is in the README's test command"
    for page in ("fastbean.1", "fastbean-ctl.1"):
        p = subprocess.run(["man", "--warnings", "-l", str(ROOT / "man" / page)], capture_output=True,
                           text=True, env={"MANWIDTH": "100", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
        assert p.returncode == 0 and p.stderr == "", p.stderr
        if page == "fastbean.1":
            for option in OPTIONS:
                assert option.flag in p.stdout, option.flag
