"""Rules of the source tree that a refactor must not break unnoticed
(asyncpg's tests/test__sourcecode.py idea). No build needed: the files are read.

The package's parts import one another one way only (the second half).

The engine (fastbean/engine) is one extension module: core.pyx includes the
.pxi files in order, and Cython lets any of them call any other. The rules:
- structure files (STRUCTURE) use nothing defined in the policy files;
- the include order is the dependency order: a file uses only what the
  files included before it define, but for ALLOWED_BACK_EDGES;
- a name that starts with an underscore is its file's own;
- each file opens with a header that matches the code: '# Offers:' names
  what other engine files use of it, '# Python:' what core.pyi shows of it,
  '# Uses:' the files it uses, in include order.
"Use" means any mention: a call, a constant, a function passed as a pointer.

Run this file directly to print who uses what.
"""
import ast
import glob
import os
import re

import pytest

from tests.support import ROOT

ENGINE = os.path.join(ROOT, "fastbean", "engine")

# Included first, in this order; the rest are policy.
STRUCTURE = ("clock", "hooks", "vec", "heap", "table", "mem", "wal", "tube", "job")

# (user, used) -> why `user` may use a file included after it. Keep it short.
ALLOWED_BACK_EDGES = {
    ("conn", "queue"): "conn_release hands a leaving connection's reserved jobs back to ready "
                       "(job_unlink, job_make_ready), while queue moves answer waiting connections "
                       "through conn.pxi; beanstalkd's conn.c and prot.c are tied the same way",
}


# -- reading Cython source -------------------------------------------------------------

_STRING_START = re.compile(r"""[bBrRuUfFcC]{0,2}('''|\"\"\"|'|")""")


def code_only(text):
    """text with its comments and string literals blanked, newlines kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "#":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif ch.isalnum() or ch == "_":
            m = _STRING_START.match(text, i)
            if m:                               # a prefixed literal: b"...", c'\r'
                i = _skip_string(text, i, m, out)
                continue
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            out.append(text[i:j])
            i = j
        elif ch in "'\"":
            i = _skip_string(text, i, _STRING_START.match(text, i), out)
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _skip_string(text, i, m, out):
    quote, j, n = m.group(1), m.end(), len(text)
    while j < n:
        if text[j] == "\\":
            j += 2
        elif text.startswith(quote, j):
            j += len(quote)
            break
        elif len(quote) == 1 and text[j] == "\n":
            break
        else:
            j += 1
    out.append(re.sub(r"[^\n]", " ", text[i:j]))
    return j


_FUNC = re.compile(r"^c?p?def\s+[^=\n(:]*?\b(\w+)\s*\(", re.M)
_CLASS = re.compile(r"^cdef\s+class\s+(\w+)", re.M)
_STRUCT = re.compile(r"^ctypedef\s+struct\s+(\w+)", re.M)
_CVAR = re.compile(r"^cdef\s+(?!class\b|enum\b|extern\b|struct\b)[\w\s*]*?\b(\w+)\s*(?:=|\[|$)", re.M)
_PYVAR = re.compile(r"^([A-Za-z_]\w*)\s*=", re.M)
_BLOCK = re.compile(r"^cdef\s+(?:enum|extern)\b[^\n]*:[ \t]*$", re.M)
_NAME = re.compile(r"(?<![\w.])([A-Za-z_]\w*)")


def definitions(code):
    """The names `code` (from code_only) defines at module level: functions,
    classes, structs, variables, enum members and extern declarations."""
    names = set()
    for rx in (_FUNC, _CLASS, _STRUCT, _CVAR, _PYVAR):
        names.update(m.group(1) for m in rx.finditer(code))
    for m in _BLOCK.finditer(code):
        # one name per line at the block's first indentation level
        indent = None
        for line in code[m.end():].split("\n")[1:]:
            if not line.strip():
                continue
            width = len(line) - len(line.lstrip())
            if width == 0:
                break
            indent = indent or width
            words = re.split(r"[(\[=:]", line)[0].split()
            if width == indent and words:
                names.add(words[-1])
    return names


def mentions(code):
    """Every identifier `code` mentions, attributes (x.name) left out."""
    return set(_NAME.findall(code))


def header(text):
    """{'Offers'|'Python'|'Uses': [names]} from a file's opening comment;
    a field goes on over lines that start with '#   '."""
    fields, key = {}, None
    for line in text.split("\n"):
        if not line.startswith("#"):
            break
        m = re.match(r"# (Offers|Python|Uses):(.*)$", line)
        if m:
            key = m.group(1)
            fields[key] = m.group(2)
        elif key and line.startswith("#   "):
            fields[key] += " " + line[1:]
        else:
            key = None
    out = {}
    for key, value in fields.items():
        value = value.strip().rstrip(".")
        out[key] = [] if value in ("", "nothing") else [v.strip() for v in value.split(",")]
    return out


# -- the rules, on any set of files ---------------------------------------------------

class Tree:
    """files: {stem: source} in include order; top: the includer's source
    (core.pyx), read after every file; python: the names core.pyi shows."""

    def __init__(self, files, top="", python=()):
        self.files = dict(files)
        self.order = list(files)
        self.defined_in = {}
        for stem in self.order:
            for name in definitions(code_only(files[stem])):
                self.defined_in.setdefault(name, stem)
        self.python = set(python)
        self.uses = {}          # reader -> {stem it uses: names}
        for reader, text in list(files.items()) + [("core.pyx", top)]:
            mine = {}
            for name in mentions(code_only(text)):
                owner = self.defined_in.get(name)
                if owner is not None and owner != reader:
                    mine.setdefault(owner, set()).add(name)
            self.uses[reader] = mine

    def structure_violations(self, structure):
        out = []
        for stem in structure:
            for other, names in sorted(self.uses[stem].items()):
                if other not in structure:
                    out.append("%s.pxi (structure) uses %s.pxi (policy): %s"
                               % (stem, other, ", ".join(sorted(names))))
        return out

    def order_violations(self, allowed=()):
        rank = {stem: i for i, stem in enumerate(self.order)}
        out = []
        for stem in self.order:
            for other, names in sorted(self.uses[stem].items()):
                if rank[other] > rank[stem] and (stem, other) not in allowed:
                    out.append("%s.pxi uses %s.pxi, which is included after it: %s"
                               % (stem, other, ", ".join(sorted(names))))
        return out

    def private_violations(self):
        out = []
        for reader, others in sorted(self.uses.items()):
            for other, names in sorted(others.items()):
                private = sorted(n for n in names if n.startswith("_"))
                if private:
                    out.append("%s uses %s.pxi's own %s" % (reader, other, ", ".join(private)))
        return out

    def header_violations(self):
        offered = {stem: set() for stem in self.order}
        for others in self.uses.values():
            for other, names in others.items():
                offered[other] |= names
        out = []
        for stem in self.order:
            h = header(self.files[stem])
            if "Offers" not in h or "Uses" not in h:
                out.append("%s.pxi: its opening comment has no '# Offers:' or no '# Uses:' line" % stem)
                continue
            mine = {n for n, s in self.defined_in.items() if s == stem}
            for key, want in (("Offers", offered[stem]), ("Python", mine & self.python)):
                said = set(h.get(key, []))
                if said != want:
                    out.append("%s.pxi %s: add %s, drop %s"
                               % (stem, key, sorted(want - said), sorted(said - want)))
            really = [other for other in self.order if other in self.uses[stem]]
            if h["Uses"] != really:
                out.append("%s.pxi Uses: says %s, the code uses %s (in include order)"
                           % (stem, h["Uses"], really))
        return out


def engine_tree():
    with open(os.path.join(ENGINE, "core.pyx")) as f:
        top = f.read()
    with open(os.path.join(ENGINE, "core.pyi")) as f:
        python = re.findall(r"^(?:def |class )?([A-Za-z_]\w*)\b", f.read(), re.M)
    files = {}
    for stem in re.findall(r'^include\s+"(\w+)\.pxi"', top, re.M):
        with open(os.path.join(ENGINE, stem + ".pxi")) as f:
            files[stem] = f.read()
    return Tree(files, top, python)


# -- the engine's rules --------------------------------------------------------------------

def test_engine_includes_every_pxi_once_structure_first():
    tree = engine_tree()
    assert sorted(tree.order) == sorted(f[:-4] for f in os.listdir(ENGINE) if f.endswith(".pxi"))
    assert len(set(tree.order)) == len(tree.order)
    assert tree.order[:len(STRUCTURE)] == list(STRUCTURE)


def test_engine_structure_calls_no_policy():
    assert engine_tree().structure_violations(STRUCTURE) == []


def test_engine_include_order_is_dependency_order():
    tree = engine_tree()
    assert tree.order_violations(ALLOWED_BACK_EDGES) == []
    for user, used in ALLOWED_BACK_EDGES:
        assert used in tree.uses[user], "ALLOWED_BACK_EDGES: %s no longer uses %s" % (user, used)


def test_engine_private_names_stay_in_their_file():
    assert engine_tree().private_violations() == []


def test_engine_headers_match_the_code():
    assert engine_tree().header_violations() == []


# -- the checker can fail ---------------------------------------------------------------

def test_the_engine_rules_catch_a_broken_pair():
    base = ("# A structure.\n#\n# Offers: base_put.\n# Uses: nothing.\n\n"
            "cdef int SEC = 1\n\n\n"
            "cdef int base_put(int x):\n    return policy_go(x) + _own(x)   # policy_go: not allowed\n\n\n"
            "cdef int _own(int x):\n    return x\n")
    policy = ("# A policy.\n#\n# Offers: policy_go.\n# Uses: base.\n\n"
              "cdef int policy_go(int x):\n    return base_put(x) * SEC + _own(x)\n")
    tree = Tree({"base": base, "policy": policy})
    assert tree.uses["base"] == {"policy": {"policy_go"}}
    assert tree.uses["policy"] == {"base": {"base_put", "SEC", "_own"}}
    assert tree.structure_violations(("base",)) == [
        "base.pxi (structure) uses policy.pxi (policy): policy_go"]
    assert tree.order_violations() == [
        "base.pxi uses policy.pxi, which is included after it: policy_go"]
    assert tree.order_violations({("base", "policy")}) == []
    assert tree.private_violations() == ["policy uses base.pxi's own _own"]
    assert tree.header_violations() == [
        "base.pxi Offers: add ['SEC', '_own'], drop []",
        "base.pxi Uses: says [], the code uses ['policy'] (in include order)"]
    # comments, strings and attributes are not uses
    quiet = Tree({"base": base, "policy": "# Offers: x.\n# Uses: nothing.\n\n"
                  "cdef x(c):\n    # base_put(c)\n    return c.base_put, \"base_put\", b'SEC', r'''_own'''\n"})
    assert quiet.uses["policy"] == {}


def test_the_engine_rules_catch_a_broken_copy_of_the_engine():
    tree = engine_tree()
    files = dict(tree.files)
    # job.pxi (structure) serves waiting connections itself
    files["job"] = files["job"].replace("    table_insert(&core.jobs, j)\n",
                                        "    table_insert(&core.jobs, j)\n    process_queue(core)\n", 1)
    # the clock included after the files that read it
    order = [s for s in tree.order if s != "clock"] + ["clock"]
    broken = Tree({s: files[s] for s in order}, python=tree.python)
    assert broken.structure_violations(STRUCTURE) == [
        "job.pxi (structure) uses queue.pxi (policy): process_queue"]
    problems = broken.order_violations(ALLOWED_BACK_EDGES)
    assert "job.pxi uses queue.pxi, which is included after it: process_queue" in problems
    assert "mem.pxi uses clock.pxi, which is included after it: mono_ns" in problems
    assert "job.pxi Uses: says ['clock', 'table', 'mem', 'tube'], the code uses " \
           "['table', 'mem', 'tube', 'queue', 'clock'] (in include order)" in broken.header_violations()


# -- Python: the parts import one another one way only ------------------------------------
#
# Every import in every module, Python and Cython, at its top or inside a
# function, against the layering the architecture draws.

PACKAGE = os.path.join(ROOT, "fastbean")

# part -> the parts it may import. The leaves (config, errors, logs, wal,
# sockets, client, options, cron) import only leaves; the engine config and
# cron. The admin tool and the testing package run against servers over
# sockets, through the protocol client: they never import the engine or the
# server.
LEAVES = {"config", "errors", "logs", "wal", "sockets", "client", "version", "options", "cron"}
MAY_IMPORT = {
    "leaf": LEAVES,
    "engine": {"config", "cron"},
    "binlog": LEAVES | {"engine", "binlog"},
    "replication": LEAVES | {"engine", "binlog", "replication"},
    "server": LEAVES | {"engine", "binlog", "replication", "server"},
    "cli": LEAVES | {"server", "binlog", "console"},   # binlog: the -b directory is looked at before listening
    # the web console sits above the server: it reads the engine, acts
    # through the server's role filter, and the CLI hands it to the server
    "console": LEAVES | {"engine", "server", "console"},
    "ctl": {"config", "errors", "client", "ctl", "version"},
    "testing": {"config", "errors", "client", "testing", "version", "tasks"},
    "client": {"errors", "client"},
    # the worker and the task API run on the client, never on the server
    "worker": {"errors", "client", "logs", "version", "worker", "ctl"},
    "tasks": {"errors", "client", "worker", "tasks"},
    "init": LEAVES | {"tasks"},
    # the man pages are written from the server's option table and fastbean-ctl's parser
    "manpages": LEAVES | {"ctl"},
}
# third-party packages only one part may import
ONLY_IN = {"nats": {"replication/link.py"}, "uvloop": {"server/server.py", "worker.py"},
           "aiohttp": {"console/app.py", "console/pages.py"}, "jinja2": {"console/app.py"},
           "regex": {"console/search.py"}}


def part_of(path):
    """The part a source file (relative to fastbean/) belongs to."""
    top = path.split("/")[0]
    if top in ("engine", "binlog", "replication", "server", "ctl", "testing", "console", "client"):
        return top
    name = os.path.splitext(top)[0]
    if name in ("worker", "tasks"):
        return name
    if name in ("cli", "__main__"):
        return "cli"
    if name == "manpages":
        return "manpages"
    if name == "__init__" and path == "__init__.py":
        return "init"               # the version, and fastbean.Tasks when asked for
    return "leaf"


def target_part(module):
    """The part an imported fastbean module belongs to (None: not fastbean)."""
    if module in ("fastbean", "fastbean._version"):     # _version.py: written by setuptools-scm
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
    for folder, _, names in os.walk(PACKAGE):
        for name in names:
            if name.endswith((".py", ".pyx", ".pxd", ".pxi")):
                path = os.path.join(folder, name)
                yield os.path.relpath(path, PACKAGE).replace(os.sep, "/"), path


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


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_parts_import_one_way():
    files = [(rel, _read(path)) for rel, path in sources()]
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
    folders = {name for name in os.listdir(PACKAGE)
               if os.path.isdir(os.path.join(PACKAGE, name)) and not name.startswith(("_", "."))}
    assert folders - {"include"} <= set(MAY_IMPORT), folders


if __name__ == "__main__":
    tree = engine_tree()
    for reader in tree.order + ["core.pyx"]:
        print("%-8s" % reader, "; ".join("%s: %s" % (other, " ".join(sorted(tree.uses[reader][other])))
                                         for other in tree.order if other in tree.uses[reader]))
    for problem in (tree.structure_violations(STRUCTURE) + tree.order_violations(ALLOWED_BACK_EDGES)
                    + tree.private_violations() + tree.header_violations()):
        print("!", problem)


# -- the tests' own tree ----------------------------------------------------------------

TEST_GROUPS = {"protocol", "durability", "replication", "security", "operations", "python", "packaging",
               "bench"}


def test_tests_are_grouped_by_what_they_test():
    # Every test file sits in a group's folder; the helpers in tests/support.
    top = os.path.join(ROOT, "tests")
    loose = [n for n in os.listdir(top) if n.endswith(".py") and n not in ("__init__.py", "conftest.py")]
    assert loose == [], "test files and helpers belong in a group folder or tests/support"
    folders = {n for n in os.listdir(top) if os.path.isdir(os.path.join(top, n)) and not n.startswith((".", "_"))}
    assert folders == TEST_GROUPS | {"support"}
    for group in TEST_GROUPS:
        names = os.listdir(os.path.join(top, group))
        assert "__init__.py" in names, group
        assert [n for n in names if n.endswith(".py") and not n.startswith("test_") and n != "__init__.py"] == [], group


def test_benchmarks_and_tools_share_only_the_support_package():
    # benchmarks/ and tools/ start servers as the tests do, through one package
    wrong = []
    for folder in ("benchmarks", "tools"):
        for path in glob.glob(os.path.join(ROOT, folder, "**", "*.py"), recursive=True):
            for line in open(path):
                m = re.match(r"\s*(?:from|import)\s+(tests(?:\.\w+)*)", line)
                if m and not (m.group(1) + ".").startswith("tests.support."):
                    wrong.append("%s: %s" % (os.path.relpath(path, ROOT), line.strip()))
    assert wrong == []


# -- size ---------------------------------------------------------------------------------

MAX_CLASS_LINES = 300
# The clients' command surface: one method per protocol command, each a few lines.
BIG_CLASSES_ALLOWED = {("client/_sync.py", "Client"), ("client/_async.py", "AsyncClient")}


def class_sizes(path):
    """(lines, name) of each top-level class of a .py, .pyx or .pxi file,
    from its first line to its last non-blank one."""
    lines = open(path).read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"(?:cdef )?class (\w+)", lines[i])
        if not m:
            i += 1
            continue
        start = last = i
        i += 1
        while i < len(lines) and (lines[i] == "" or lines[i][0] in " \t#"):
            if lines[i].strip() and not lines[i].startswith("#"):
                last = i
            i += 1
        out.append((last - start + 1, m.group(1)))
    return out


def test_no_class_is_over_300_lines():
    # One class, one concern: a class past this has two, and the next change
    # to it is harder to review than it needs to be.
    big = []
    package = os.path.join(ROOT, "fastbean")
    for path in glob.glob(os.path.join(package, "**", "*.*"), recursive=True):
        if not path.endswith((".py", ".pyx", ".pxi")):
            continue
        rel = os.path.relpath(path, package)
        for lines, name in class_sizes(path):
            if lines > MAX_CLASS_LINES and (rel, name) not in BIG_CLASSES_ALLOWED:
                big.append("%s: %s is %d lines" % (rel, name, lines))
    assert big == []
