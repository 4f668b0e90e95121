"""Check an installed fastbean wheel from inside its own fresh virtualenv.

Run with that virtualenv's Python, from a directory outside the source tree:
    python wheelcheck.py docs/python.md
It checks that fastbean comes from site-packages, that every compiled
module in it loads and that it has no generated C, that `fastbean -v`
prints the version, that a server starts on uvloop and a greenstalk client
puts, reserves and deletes, that `python -m fastbean -b DIR` keeps a job
across a restart (each server stopped by its PID with SIGTERM, exit status
0), and that the pytest plugin example of docs/python.md passes under
pytest with the plugin loaded through its entry point (no conftest).
This is the test of every release wheel: tools/wheels.py (`make wheels`)
runs it, and so does cibuildwheel (test-command in pyproject.toml).
"""
import importlib
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

# A code block of docs/python.md whose first line is "# name.py" is that file of the example.
EXAMPLE_BLOCK = re.compile(r"```python\n# (\w+\.py)\n(.*?)```", re.S)


def readme_files(readme_text):
    """{file name: source} of the pytest plugin example."""
    return {name: body for name, body in EXAMPLE_BLOCK.findall(readme_text)}


def compiled_modules(package_dir, package):
    """The dotted names of the compiled modules under PACKAGE_DIR (the installed package)."""
    names = []
    for dirpath, _, files in os.walk(package_dir):
        for f in files:
            if f.endswith(".so"):
                rel = os.path.relpath(os.path.join(dirpath, f), package_dir)
                names.append(".".join([package, *rel.split(".", 1)[0].split(os.sep)]))
    return sorted(names)


def check_installed():
    import fastbean
    where = os.path.dirname(fastbean.__file__)
    assert "site-packages" in where, "fastbean imported from %s, not the wheel" % where
    modules = compiled_modules(where, "fastbean")
    assert modules, "no compiled module in %s" % where
    for name in modules:   # each loads
        importlib.import_module(name)
    generated = [f for _, _, files in os.walk(where) for f in files if f.endswith(".c")]
    assert not generated, "generated C in the wheel: %s" % generated
    return fastbean.__version__, modules


def check_version_flag(version):
    exe = os.path.join(os.path.dirname(sys.executable), "fastbean")
    out = subprocess.run([exe, "-v"], capture_output=True, text=True, check=True).stdout
    assert out == "fastbean %s\n" % version, out


def check_round_trip(version):
    import greenstalk

    from fastbean.testing import server
    with server() as srv:
        with greenstalk.Client(srv.address, use="wheel", watch="wheel") as client:
            jid = client.put("from the wheel")
            job = client.reserve(timeout=5)
            assert (job.id, job.body) == (jid, "from the wheel")
            client.delete(job)
            stats = client.stats()
            assert stats["version"] == version and stats["total-jobs"] == 1
            assert stats["current-jobs-ready"] == 0
        assert srv.stop() == 0
        log = srv.log
    assert "uvloop is not available" not in log, log


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cli(port, binlog):
    """`python -m fastbean -l 127.0.0.1 -p PORT -b BINLOG`, once it accepts connections."""
    proc = subprocess.Popen([sys.executable, "-m", "fastbean", "-l", "127.0.0.1", "-p", str(port), "-b", binlog],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError("fastbean did not start: %s" % proc.communicate()[1].decode()) from None
            time.sleep(0.05)


def stop_cli(proc):
    """SIGTERM to its PID: it must exit with status 0."""
    os.kill(proc.pid, signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, "exit status %s: %s" % (proc.returncode, err.decode())


def check_binlog_restart():
    import greenstalk

    with tempfile.TemporaryDirectory() as binlog:
        port = free_port()
        proc = start_cli(port, binlog)
        try:
            with greenstalk.Client(("127.0.0.1", port), use="kept") as client:
                jid = client.put("kept across a restart")
        finally:
            stop_cli(proc)
        proc = start_cli(port, binlog)
        try:
            with greenstalk.Client(("127.0.0.1", port), watch="kept") as client:
                job = client.reserve(timeout=5)
                assert (job.id, job.body) == (jid, "kept across a restart")
                client.delete(job)
        finally:
            stop_cli(proc)


def check_readme_example(readme):
    with open(readme) as f:
        files = readme_files(f.read())
    assert any(name.startswith("test_") for name in files), "no example test in %s" % readme
    with tempfile.TemporaryDirectory() as tmp:
        for name, body in files.items():
            with open(os.path.join(tmp, name), "w") as f:
                f.write(body)
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                             cwd=tmp, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout.strip().splitlines()[-1]


def main(argv):
    version, modules = check_installed()
    check_version_flag(version)
    check_round_trip(version)
    check_binlog_restart()
    result = check_readme_example(argv[0])
    with open(sys.executable, "rb") as f:   # its ELF interpreter (the loader) is named in its head
        musl = b"/ld-musl-" in f.read(4096)
    libc = "-".join(platform.libc_ver()) if platform.libc_ver()[0] == "glibc" else "musl" if musl else "libc unknown"
    print("fastbean %s on Python %s, %s, %s: %s load, -v, server + greenstalk round trip on uvloop, "
          "plugin example (%s), -b kept a job across a restart: ok"
          % (version, sys.version.split()[0], platform.machine(), libc, ", ".join(modules), result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
