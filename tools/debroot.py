"""A Debian CPython of another release or another architecture, to build or try wheels with.

    python tools/debroot.py ROOT VERSION ARCH      # make it, then print its python -V

A root is a directory holding the Debian packages of one CPython and what
they depend on, unpacked with dpkg -x (no maintainer script runs), from the
Debian release that carries that version: nothing is installed on this
machine. Programs run in it under chroot, in a mount namespace of their own
(unshare) that sees /dev, /proc and the directories given bound at their
own paths, so the mounts go away with the program. An arm64 root runs on
x86-64 through qemu-user (Debian's qemu-user-static) registered with
binfmt_misc, which ensure_qemu() does when it is missing. Needs root, apt,
dpkg and unshare (util-linux).
"""
import os
import shlex
import shutil
import subprocess
import sys

# The Debian release carrying each CPython version, for both amd64 and arm64.
# None carries 3.10 or 3.12 (Debian went from 3.9 in bullseye to 3.11 in
# bookworm, and from 3.11 to 3.13 in trixie).
RELEASES = {"3.9": "bullseye", "3.11": "bookworm", "3.13": "trixie", "3.14": "sid"}
DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
MIRROR = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
QEMU = "/usr/libexec/qemu-binfmt/aarch64-binfmt-P"
BINFMT = "/proc/sys/fs/binfmt_misc"
BINFMT_CONF = "/usr/lib/binfmt.d/qemu-aarch64.conf"
# Copied from this machine into each root: name resolution and the CA bundle pip uses.
HOST_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/ssl/certs/ca-certificates.crt")


def packages(version):
    """The packages of a root for CPython VERSION: the interpreter, venv (ensurepip's
    wheels) and the headers, plus a shell and the files sockets look up."""
    return ["python%s" % version, "python%s-venv" % version, "libpython%s-dev" % version, "dash", "netbase"]


def has_release(version):
    return version in RELEASES


def apt_options(state):
    return ["-o", "Dir::State=%s" % os.path.join(state, "state"),
            "-o", "Dir::State::status=%s" % os.path.join(state, "status"),
            "-o", "Dir::Cache=%s" % os.path.join(state, "cache"),
            "-o", "Dir::Etc::SourceList=%s" % os.path.join(state, "sources.list"),
            "-o", "Dir::Etc::SourceParts=/dev/null",
            "-o", "Dir::Etc::Preferences=/dev/null",
            "-o", "Dir::Etc::PreferencesParts=/dev/null",
            "-o", "APT::Sandbox::User=root",
            "-o", "Debug::NoLocking=1"]


def unpack(dest, release, arch, names):
    """Download the Debian packages NAMES of RELEASE for ARCH (x86_64 or
    aarch64) and all they depend on, and unpack them into DEST (made anew).
    Returns the file names of the packages."""
    deb_arch = DEBIAN_ARCH[arch]
    state = dest + ".apt"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.rmtree(state, ignore_errors=True)
    for d in ("state/lists/partial", "cache/archives/partial"):
        os.makedirs(os.path.join(state, d))
    open(os.path.join(state, "status"), "w").close()   # nothing installed: apt takes every dependency
    with open(os.path.join(state, "sources.list"), "w") as f:
        f.write("deb [arch=%s signed-by=%s] %s %s main\n" % (deb_arch, KEYRING, MIRROR, release))
    opts = apt_options(state) + ["-o", "APT::Architecture=%s" % deb_arch,
                                 "-o", "APT::Architectures::=%s" % deb_arch]
    run(["apt-get", *opts, "-qq", "update"])
    run(["apt-get", *opts, "-qq", "-y", "--no-install-recommends", "--download-only", "install", *names])
    archives = os.path.join(state, "cache", "archives")
    debs = sorted(f for f in os.listdir(archives) if f.endswith(".deb"))
    os.makedirs(dest)
    for deb in debs:
        subprocess.run(["dpkg-deb", "-x", os.path.join(archives, deb), dest], check=True)
    shutil.rmtree(state)
    return debs


def sources(dest, release, names):
    """Download the Debian source packages NAMES of RELEASE into DEST (made anew)
    and return {name: the upstream tarball's path}."""
    state = dest + ".apt"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.rmtree(state, ignore_errors=True)
    for d in ("state/lists/partial", "cache/archives/partial"):
        os.makedirs(os.path.join(state, d))
    os.makedirs(dest)
    open(os.path.join(state, "status"), "w").close()
    with open(os.path.join(state, "sources.list"), "w") as f:
        f.write("deb-src [signed-by=%s] %s %s main\n" % (KEYRING, MIRROR, release))
    opts = apt_options(state)
    run(["apt-get", *opts, "-qq", "update"])
    run(["apt-get", *opts, "-qq", "source", "--download-only", *names], cwd=dest)
    shutil.rmtree(state)
    tarballs = {}
    for name in names:
        (tarball,) = [f for f in os.listdir(dest) if f.startswith(name + "_") and ".orig.tar." in f
                      and not f.endswith(".asc")]
        tarballs[name] = os.path.join(dest, tarball)
    return tarballs


def make_root(root, version, arch):
    """Unpack the Debian CPython VERSION for ARCH (x86_64 or aarch64) and its
    dependencies into ROOT, unless ROOT already holds it. Returns the
    interpreter's path inside the root."""
    python = "/usr/bin/python%s" % version
    done = os.path.join(root, ".debroot-done")
    if os.path.exists(done):
        return python
    release = RELEASES[version]
    debs = unpack(root, release, arch, packages(version))
    for path in HOST_FILES:
        if os.path.exists(path):
            dest = root + path
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if os.path.lexists(dest):
                os.remove(dest)
            shutil.copy(path, dest)
    for d in ("bin", "sbin", "lib", "lib64"):
        if not os.path.lexists(os.path.join(root, d)) and os.path.isdir(os.path.join(root, "usr", d)):
            os.symlink("usr/" + d, os.path.join(root, d))   # merged /usr: base-files makes these links
    for d in ("tmp", "dev", "proc", "root"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    os.chmod(os.path.join(root, "tmp"), 0o1777)
    # What the packages' maintainer scripts would have done: compile the standard
    # library once, or every run compiles what it imports (slow under qemu).
    subprocess.run(chroot_cmd(root, [python, "-m", "compileall", "-q", "-j0", "-x", "lib2to3/tests/data",
                                     "/usr/lib/python%s" % version]), check=True)
    with open(done, "w") as f:
        f.write("%s %s %s: %s\n" % (release, DEBIAN_ARCH[arch], version, " ".join(debs)))
    return python


def musl_libdir(dest, arch):
    """The directory of Debian's musl C library for ARCH (unpacked into DEST once),
    where auditwheel finds the libc.musl-ARCH.so.1 a musllinux wheel needs
    (Alpine's name for it; Debian's is libc.so). It is bullseye's musl 1.2.2,
    the oldest a musllinux_1_2 system has (Alpine 3.13)."""
    libdir = os.path.join(dest, "lib", "%s-linux-musl" % arch)
    alpine = os.path.join(libdir, "libc.musl-%s.so.1" % arch)
    if not os.path.exists(alpine):
        unpack(dest, "bullseye", arch, ["musl"])
        os.symlink("libc.so", alpine)
    return libdir


def ensure_qemu():
    """Have this kernel run aarch64 programs through qemu-user: binfmt_misc
    mounted and qemu-aarch64 registered with the F flag (the interpreter is
    opened now, so it works inside a chroot)."""
    if not os.path.exists(QEMU):
        raise SystemExit("no %s: apt-get install qemu-user-static" % QEMU)
    if not os.path.exists(os.path.join(BINFMT, "register")):
        run(["mount", "-t", "binfmt_misc", "binfmt_misc", BINFMT])
    entry = os.path.join(BINFMT, "qemu-aarch64")
    if not os.path.exists(entry):
        with open(BINFMT_CONF) as f:
            line = f.read().strip()
        with open(os.path.join(BINFMT, "register"), "w") as f:
            f.write(line)
    with open(entry) as f:
        status = f.read()
    assert status.startswith("enabled") and "F" in status.split("flags:")[1].split()[0], status


def chroot_cmd(root, argv, binds=(), cwd="/"):
    """The command that runs ARGV inside ROOT with /dev, /proc and BINDS mounted."""
    mounts = ["mount --make-rprivate /",
              "mount --rbind /dev %s" % shlex.quote(os.path.join(root, "dev")),
              "mount -t proc proc %s" % shlex.quote(os.path.join(root, "proc"))]
    for path in binds:
        inside = root + path
        os.makedirs(inside, exist_ok=True)
        mounts.append("mount --bind %s %s" % (shlex.quote(path), shlex.quote(inside)))
    script = " && ".join(mounts) + " && exec chroot %s sh -c %s" % (
        shlex.quote(root), shlex.quote("cd %s && exec %s" % (shlex.quote(cwd), shlex.join(argv))))
    return ["unshare", "--mount", "--fork", "sh", "-c", script]


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def main(argv):
    root, version, arch = argv
    if arch != "x86_64":
        ensure_qemu()
    python = make_root(os.path.abspath(root), version, arch)
    subprocess.run(chroot_cmd(os.path.abspath(root), [python, "-c", "import platform, sys; "
                              "print(sys.version.split()[0], platform.machine())"]), check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
