"""The package's parts import one another one way only (the layering the
README's architecture section draws), checked from the sources: every
import in every module, at its top or inside a function, compiled ones
included."""
import ast
import os
import re

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fastbean")

# part -> the parts it may import. The leaves (config, errors, logs, wal,
# sockets) import only leaves. The admin tool and the testing package run
# against servers over sockets: they never import the engine or the server.
LEAVES = {"config", "errors", "logs", "wal", "sockets", "version"}
MAY_IMPORT = {
    "leaf": LEAVES,
    "engine": {"config"},
    "binlog": LEAVES | {"engine", "binlog"},
    "replication": LEAVES | {"engine", "binlog", "replication"},
    "server": LEAVES | {"engine", "binlog", "replication", "server"},
    "cli": LEAVES | {"server"},
    "ctl": {"config", "errors", "ctl", "version"},
    "testing": {"config", "errors", "testing", "version"},
}
# third-party packages only one part may import
ONLY_IN = {"nats": {"replication/link.py"}, "uvloop": {"server/server.py"}}


def part_of(path):
    """The part a source file (relative to fastbean/) belongs to."""
    top = path.split("/")[0]
    if top in ("engine", "binlog", "replication", "server", "ctl", "testing"):
        return top
    name = os.path.splitext(top)[0]
    if name in ("cli", "__main__"):
        return "cli"
    if name == "__init__":
        return "leaf"               # the version only
    return "leaf"


def target_part(module):
    """The part an imported fastbean module belongs to (None: not fastbean)."""
    if module == "fastbean":
        return "version"
    if not module.startswith("fastbean."):
        return None
    return module.split(".")[1]


def python_imports(source):
    """(module, names) of every import statement, wherever it is."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module, tuple(a.name for a in node.names)


CYTHON_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+c?import|c?import\s+([\w.]+))", re.M)


def cython_imports(source):
    for m in CYTHON_IMPORT.finditer(source):
        yield m.group(1) or m.group(2), ()


def sources():
    for folder, _, names in os.walk(ROOT):
        for name in names:
            if name.endswith((".py", ".pyx", ".pxd", ".pxi")):
                path = os.path.join(folder, name)
                yield os.path.relpath(path, ROOT).replace(os.sep, "/"), path


def violations(files):
    """Every import that breaks a rule, as text; `files` yields (relative
    path, source)."""
    bad = []
    for rel, source in files:
        found = python_imports(source) if rel.endswith(".py") else cython_imports(source)
        part = part_of(rel)
        for module, names in found:
            top = module.split(".")[0]
            if top in ONLY_IN and rel not in ONLY_IN[top]:
                bad.append("%s imports %s, which only %s may" % (rel, module, ", ".join(sorted(ONLY_IN[top]))))
            targets = [target_part(module)]
            if module == "fastbean":        # from fastbean import __version__, sockets, ...
                targets = ["version" if n == "__version__" else target_part("fastbean." + n) for n in names]
            for target in targets:
                if target is None or target == part:
                    continue
                if target not in MAY_IMPORT[part]:
                    bad.append("%s (%s) imports %s (%s)" % (rel, part, module, target))
    return bad


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_parts_import_one_way():
    files = [(rel, read(path)) for rel, path in sources()]
    assert len(files) > 40
    assert violations(files) == []


@pytest.mark.parametrize("rel, source, broken", [
    ("ctl/commands.py", "from fastbean.engine.core import Core\n", "ctl/commands.py (ctl) imports"),
    ("testing/__init__.py", "def f():\n    from fastbean.server import server\n", "testing/__init__.py (testing)"),
    ("engine/queue.pxi", "from fastbean.binlog.threads cimport X\n", "engine/queue.pxi (engine)"),
    ("binlog/files.py", "import nats\n", "binlog/files.py imports nats"),
    ("config.py", "from fastbean.binlog import Binlog\n", "config.py (leaf)"),
])
def test_the_rule_catches_what_it_must(rel, source, broken):
    # The checker itself: each of these breaks the layering.
    found = violations([(rel, source)])
    assert found and found[0].startswith(broken), found


def test_every_part_is_named():
    # a new folder must be given its place in MAY_IMPORT
    folders = {name for name in os.listdir(ROOT)
               if os.path.isdir(os.path.join(ROOT, name)) and not name.startswith(("_", "."))}
    assert folders - {"include"} <= set(MAY_IMPORT), folders
