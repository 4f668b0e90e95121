"""fastbean: a drop-in replacement for beanstalkd with a compiled core on uvloop."""

try:
    # written by setuptools-scm when the package is built or installed (pyproject.toml)
    from fastbean._version import __version__
except ImportError:     # a source tree never built: no extension either, nothing runs
    __version__ = "0+unknown"

__all__ = ["__version__"]
