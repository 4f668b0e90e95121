"""fastbean: a drop-in replacement for beanstalkd with a compiled core on uvloop."""

__version__ = "0.1.0"

__all__ = ["__version__"]
