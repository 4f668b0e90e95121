"""A real client library (greenstalk, from PyPI) drives fastbean through its
own API; and the compiled modules are what runs."""
import importlib.machinery

import greenstalk
import pytest

pytestmark = pytest.mark.timeout(60)


def test_greenstalk_round_trip(server):
    with greenstalk.Client(("127.0.0.1", server.port), use="jobs", watch=["jobs", "other"]) as c:
        assert c.using() == "jobs"
        assert sorted(c.watching()) == ["jobs", "other"]
        a = c.put("first", priority=10)
        b = c.put("second", priority=5, ttr=30)
        d = c.put("later", delay=60)
        job = c.reserve(timeout=1)
        assert (job.id, job.body) == (b, "second")
        assert c.stats_job(job)["state"] == "reserved"
        c.touch(job)
        c.release(job, priority=20)
        job = c.reserve(timeout=1)
        assert (job.id, job.body) == (a, "first")
        c.bury(job)
        assert c.peek_buried().id == a
        assert c.kick(10) == 1
        assert c.stats_job(a)["state"] == "ready"
        assert c.peek_ready().id == b          # released at priority 20; a was buried at 2**16
        assert c.peek_delayed().id == d
        c.kick_job(d)
        assert c.stats_tube("jobs")["current-jobs-ready"] == 3
        job = c.reserve_job(d)
        assert job.body == "later"
        c.delete(job)
        assert c.peek(b).body == "second"
        with pytest.raises(greenstalk.NotFoundError):
            c.peek(d)
        c.pause_tube("jobs", 0)
        stats = c.stats()
        assert stats["current-jobs-ready"] == 2 and stats["cmd-delete"] == 1
        assert "jobs" in c.tubes()
        c.ignore("other")
        assert c.watching() == ["jobs"]
        with pytest.raises(greenstalk.TimedOutError):
            c.use("empty")
            c.watch("empty")
            c.ignore("jobs")
            c.reserve(timeout=0)


def test_greenstalk_binary_bodies(server):
    with greenstalk.Client(("127.0.0.1", server.port), encoding=None) as c:
        body = bytes(range(256)) * 10 + b"\r\n\r\n"
        c.put(body)
        job = c.reserve(timeout=1)
        assert job.body == body
        c.delete(job)


def test_compiled_modules_are_what_runs():
    import fastbean.binlog.threads as sync
    import fastbean.engine.core as core
    import fastbean.engine.parser as parser
    for mod in (core, parser, sync):
        assert isinstance(mod.__loader__, importlib.machinery.ExtensionFileLoader), mod
        assert mod.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), mod.__file__


def test_type_stubs_cover_the_compiled_api():
    # Every public class, function and method of the compiled modules is in
    # its .pyi stub, and the stubs name nothing that is not there.
    import ast
    import inspect
    import os

    import fastbean.binlog.threads as sync
    import fastbean.engine.core as core
    import fastbean.engine.parser as parser
    for mod in (core, parser, sync):
        path = os.path.join(os.path.dirname(mod.__file__), mod.__name__.rsplit(".", 1)[1] + ".pyi")
        tree = ast.parse(open(path).read())
        stub = {}
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                # methods, and attributes written "name: type"
                stub[node.name] = ({n.name for n in node.body if isinstance(n, ast.FunctionDef)}
                                   | {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}) \
                    if isinstance(node, ast.ClassDef) else None
        have = {}
        for name, obj in vars(mod).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
                continue
            if inspect.isclass(obj):
                have[name] = {m for m in vars(obj) if not m.startswith("_")
                              or m in ("__len__", "__contains__")}
            elif callable(obj):
                have[name] = None
        assert set(have) == set(stub), mod
        for name, methods in have.items():
            if methods is not None:
                assert methods <= stub[name], (name, methods - stub[name])
