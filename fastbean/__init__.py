"""fastbean: a drop-in replacement for beanstalkd with a compiled core on uvloop."""
from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "Tasks"]


def __getattr__(name: str) -> Any:
    # fastbean.Tasks, imported when first asked for: `import fastbean` stays light
    if name == "Tasks":
        from fastbean.tasks import Tasks
        return Tasks
    raise AttributeError("module 'fastbean' has no attribute %r" % name)
