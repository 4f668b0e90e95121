"""Build the compiled modules: the parser, the queue engine and the binlog's disk threads.

FASTBEAN_DEBUG=1 builds with invariant checks, -O0 -g and annotated HTML.
FASTBEAN_SANITIZE=1 adds AddressSanitizer and UBSan (run under LD_PRELOAD of libasan).
FASTBEAN_WERROR=1 makes every compiler warning an error (make lint).
"""
import os
import sys

import setuptools
from Cython.Build import cythonize
from setuptools import Extension, setup

if int(setuptools.__version__.split(".")[0]) < 77:
    # pyproject.toml's SPDX `license` needs it; an isolated build (pip, build)
    # gets it from [build-system], an in-place one uses the environment's
    sys.exit("fastbean needs setuptools 77 or newer to build (this is %s): pip install -e '.[dev]', "
             "or pip install 'setuptools>=77'" % setuptools.__version__)
try:
    import setuptools_scm  # noqa: F401  (the version, from git or PKG-INFO: pyproject.toml)
except ImportError:
    # without it setuptools finds no version; an isolated build gets it from [build-system]
    sys.exit("fastbean needs setuptools-scm to build: pip install -e '.[dev]', or pip install 'setuptools-scm>=8'")

DEBUG = os.environ.get("FASTBEAN_DEBUG", "") not in ("", "0")
SANITIZE = os.environ.get("FASTBEAN_SANITIZE", "") not in ("", "0")
WERROR = os.environ.get("FASTBEAN_WERROR", "") not in ("", "0")

cflags = ["-O0", "-g3"] if DEBUG else ["-O2"]
cflags += ["-Wall", "-Wno-unused-function", "-Wno-unreachable-code"]
if WERROR:
    cflags += ["-Werror"]
ldflags = []
if SANITIZE:
    cflags += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
    ldflags += ["-fsanitize=address,undefined"]

macros = [("FASTBEAN_DEBUG", "1" if DEBUG else "0")]

# The headers the extensions share (fastbean/include) and the three
# extensions: the parser and the queue engine (one module stitched from
# fastbean/engine/*.pxi), and the binlog's disk threads.
include = ["fastbean/include"]
extensions = [
    Extension(name, [path], include_dirs=include, extra_compile_args=cflags,
              extra_link_args=ldflags, define_macros=macros)
    for name, path in (("fastbean.engine.parser", "fastbean/engine/parser.pyx"),
                       ("fastbean.engine.core", "fastbean/engine/core.pyx"),
                       ("fastbean.binlog.threads", "fastbean/binlog/threads.pyx"))
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": 3, "embedsignature": True},
        annotate=DEBUG,
    ),
)
