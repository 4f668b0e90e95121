"""A CPython built for musl, to try musllinux wheels on this glibc machine.

    python tools/muslpython.py PREFIX VERSION     # builds it unless PREFIX has it

Neither PyPI nor Debian has a musl build of CPython, so this compiles one
from Debian's source packages: CPython from the Debian release that carries
VERSION (3.9, 3.11, 3.13, 3.14; tools/debroot.py), OpenSSL and zlib from
bookworm, with Debian's musl-gcc (musl-tools), which links against Debian's
musl 1.2.3 and runs through its loader, /lib/ld-musl-x86_64.so.1. OpenSSL
(for pip and uvloop, which imports ssl) and zlib (for pip) are linked in
statically. About 5 minutes on 2 cores; PREFIX keeps it for the next run.
x86_64 only: musl-gcc compiles for the machine it runs on. Needs apt-get,
make and the musl-tools package.
"""
import os
import shutil
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import debroot  # noqa: E402

LOADER = "/lib/ld-musl-x86_64.so.1"
JOBS = str(os.cpu_count() or 1)


def python_path(prefix, version):
    return os.path.join(prefix, "bin", "python" + version)


def works(python):
    """PYTHON runs through musl's loader and has ssl and zlib."""
    check = "import ssl, sys, zlib; assert %r in open(sys.executable, 'rb').read(4096)" % LOADER.encode()
    return os.path.exists(python) and subprocess.run([python, "-c", check]).returncode == 0


def unpack(tarball, into):
    with tarfile.open(tarball) as tar:
        top = tar.getnames()[0].split("/")[0]
        tar.extractall(into)
    return os.path.join(into, top)


def sh(cmd, cwd, env, log):
    print("+", cmd, flush=True)
    with open(log, "a") as f:
        done = subprocess.run(cmd, shell=True, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT)
    if done.returncode:
        with open(log) as f:
            sys.stdout.write("".join(f.readlines()[-40:]))
        raise SystemExit("failed (%d): %s; the log is %s" % (done.returncode, cmd, log))


def build(prefix, version):
    """PREFIX/bin/pythonVERSION, built for musl unless it is there and works."""
    python = python_path(prefix, version)
    if works(python):
        return python
    if not shutil.which("musl-gcc") or not os.path.exists(LOADER):
        raise SystemExit("no musl-gcc or %s: apt-get install musl-tools" % LOADER)
    if version not in debroot.RELEASES:
        raise SystemExit("Debian has no CPython %s source (it has %s)" % (version, ", ".join(debroot.RELEASES)))
    prefix = os.path.abspath(prefix)
    work = prefix + ".build"
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(prefix, ignore_errors=True)
    os.makedirs(work)
    log = os.path.join(work, "build.log")
    tarballs = debroot.sources(os.path.join(work, "src"), debroot.RELEASES[version], ["python" + version])
    tarballs.update(debroot.sources(os.path.join(work, "src-libs"), "bookworm", ["openssl", "zlib"]))
    deps = os.path.join(work, "deps")
    # musl-gcc is gcc with musl's headers and libraries; asked for a multiarch
    # directory it names glibc's, which CPython would then search: it says none.
    cc = os.path.join(work, "musl-cc")
    with open(cc, "w") as f:
        f.write('#!/bin/sh\ncase "$1" in --print-multiarch|-print-multiarch) exit 0;; esac\nexec musl-gcc "$@"\n')
    os.chmod(cc, 0o755)
    env = dict(os.environ, CC=cc, DEB_HOST_MULTIARCH="x86_64-linux-musl")
    for name in ("CFLAGS", "CPPFLAGS", "LDFLAGS", "PYTHONPATH", "PYTHONHOME"):
        env.pop(name, None)

    zlib = unpack(tarballs["zlib"], work)
    sh("./configure --static --prefix=%s" % deps, zlib, dict(env, CFLAGS="-O2 -fPIC"), log)
    sh("make -j%s && make install" % JOBS, zlib, env, log)

    openssl = unpack(tarballs["openssl"], work)
    # musl has no kernel headers; OpenSSL's few (linux/, asm/) come from the system's
    sh("./Configure linux-x86_64 no-shared no-tests no-afalgeng no-async no-engine no-module no-dso "
       "-idirafter /usr/include -idirafter /usr/include/x86_64-linux-gnu "
       "--prefix=%s --libdir=lib --openssldir=/etc/ssl" % deps, openssl, env, log)
    sh("make -j%s build_libs && make install_dev" % JOBS, openssl, env, log)

    cpython = unpack(tarballs["python" + version], work)
    flags = dict(env, CFLAGS="-O2", CPPFLAGS="-I%s/include" % deps, LDFLAGS="-L%s/lib" % deps,
                 ZLIB_CFLAGS="-I%s/include" % deps, ZLIB_LIBS="-L%s/lib -lz" % deps)
    # --build names musl so that CPython's extension suffix says linux-musl, as Alpine's does
    sh("./configure --build=x86_64-pc-linux-musl --host=x86_64-pc-linux-musl --prefix=%s --with-openssl=%s"
       % (prefix, deps), cpython, flags, log)
    sh("make -j%s && make install" % JOBS, cpython, flags, log)
    if not works(python):
        raise SystemExit("%s was built but lacks ssl or zlib, or is not musl's; the log is %s" % (python, log))
    shutil.rmtree(work)
    return python


def main(argv):
    prefix, version = argv
    python = build(prefix, version)
    subprocess.run([python, "-c", "import ssl, sys, sysconfig; print(sys.version.split()[0], "
                    "sysconfig.get_config_var('EXT_SUFFIX'), ssl.OPENSSL_VERSION)"], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
