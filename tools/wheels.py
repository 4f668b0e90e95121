"""Build the sdist, then from that sdist a repaired binary wheel for each Python given, and check each.

    python tools/wheels.py [--out DIR] PYTHON...

Building from the sdist (not the tree) makes a file missing from it fail
the build. Each wheel is repaired by auditwheel to the manylinux tag this
machine honours, then installed alone into a fresh virtualenv of its own
Python and checked there by wheelcheck.py. Pythons the pyproject's
classifiers do not list are skipped, and so is a second one of a version.
Needs build and auditwheel (the test extras) in the Python running this.
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = os.path.join(ROOT, "tools", "wheelcheck.py")
EXTENSIONS = ("engine/core", "engine/parser", "binlog/threads")
# Installed into each virtualenv after the wheel, for wheelcheck.py.
CHECK_REQUIRES = ["greenstalk", "pytest"]


def supported_versions():
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        text = f.read()
    return set(re.findall(r'"Programming Language :: Python :: (3\.\d+)"', text))


def python_version(python):
    out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def build_sdist(out):
    run([sys.executable, "-m", "build", "--sdist", "--outdir", out, ROOT],
        stdout=subprocess.DEVNULL)
    (sdist,) = glob.glob(os.path.join(out, "fastbean-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    top = names[0].split("/")[0]
    package = [n for n in names if n.startswith(top + "/fastbean/")]
    generated = [n for n in package if n.endswith((".c", ".so", ".html"))]
    assert not generated, "generated files in the sdist: %s" % generated
    for ext in EXTENSIONS:
        assert "%s/fastbean/%s.pyx" % (top, ext) in names, "%s.pyx missing from the sdist" % ext
    return sdist


def build_wheel(python, sdist, out):
    raw = tempfile.mkdtemp(prefix="raw-", dir=out)
    try:
        run([python, "-m", "pip", "wheel", "--no-deps", "-q", "-w", raw, sdist])
        (built,) = glob.glob(os.path.join(raw, "*.whl"))
        # name-version-pythontag-abitag: the platform tag is auditwheel's to set
        stem = os.path.basename(built).rsplit("-", 1)[0]
        for old in glob.glob(os.path.join(out, stem + "-*.whl")):
            os.remove(old)
        run([sys.executable, "-m", "auditwheel", "repair", "--strip", "-w", out, built],
            stdout=subprocess.DEVNULL)
    finally:
        shutil.rmtree(raw)
    (wheel,) = glob.glob(os.path.join(out, stem + "-*.whl"))
    assert "-manylinux" in wheel, "auditwheel gave no manylinux tag: %s" % wheel
    with zipfile.ZipFile(wheel) as z:
        files = z.namelist()
    assert not [f for f in files if f.endswith(".c")], "generated C in %s" % wheel
    for ext in EXTENSIONS:
        assert any(f.startswith("fastbean/%s." % ext) and f.endswith(".so") for f in files), \
            "%s missing from %s" % (ext, wheel)
    return wheel


def check_wheel(python, wheel):
    with tempfile.TemporaryDirectory(prefix="wheelcheck-") as tmp:
        venv = os.path.join(tmp, "venv")
        run([python, "-m", "venv", venv])
        vpy = os.path.join(venv, "bin", "python")
        run([vpy, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel])
        run([vpy, "-m", "pip", "install", "-q", "--disable-pip-version-check", *CHECK_REQUIRES])
        # from outside the source tree, so that only the installed fastbean is found
        run([vpy, CHECK, os.path.join(ROOT, "README.md")], cwd=tmp)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "dist"))
    parser.add_argument("pythons", nargs="+")
    args = parser.parse_args(argv)
    wanted = supported_versions()
    chosen = {}
    for python in args.pythons:
        version = python_version(python)
        if version in wanted and version not in chosen:
            chosen[version] = python
    missing = sorted(wanted - set(chosen), key=lambda v: tuple(map(int, v.split("."))))
    if missing:
        print("no Python found for %s: no wheel for it" % ", ".join(missing), flush=True)
    if not chosen:
        print("none of the Pythons given is a supported version (%s)" % ", ".join(sorted(wanted)))
        return 1
    os.makedirs(args.out, exist_ok=True)
    sdist = build_sdist(args.out)
    built = []
    for version in sorted(chosen, key=lambda v: tuple(map(int, v.split(".")))):
        wheel = build_wheel(chosen[version], sdist, args.out)
        check_wheel(chosen[version], wheel)
        built.append(wheel)
    print("\n%s  %d bytes" % (os.path.basename(sdist), os.path.getsize(sdist)))
    for wheel in built:
        print("%s  %d bytes" % (os.path.basename(wheel), os.path.getsize(wheel)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
