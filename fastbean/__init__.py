"""fastbean: a drop-in replacement for beanstalkd with a compiled core on uvloop."""
from typing import Any

try:
    # written by setuptools-scm when the package is built or installed (pyproject.toml)
    from fastbean._version import __version__
except ImportError:     # a source tree never built: no extension either, nothing runs
    __version__ = "0+unknown"

__all__ = ["__version__", "Tasks"]


def __getattr__(name: str) -> Any:
    # fastbean.Tasks, imported when first asked for: `import fastbean` stays light
    if name == "Tasks":
        from fastbean.tasks import Tasks
        return Tasks
    raise AttributeError("module 'fastbean' has no attribute %r" % name)
