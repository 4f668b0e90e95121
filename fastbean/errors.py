"""Exceptions raised by fastbean itself; client mistakes are protocol replies, never these."""


class FastbeanError(Exception):
    """Base class of fastbean's own errors."""


class ConfigError(FastbeanError):
    """A bad command line: usage is printed and the process exits with `status`."""

    def __init__(self, message, status=5):
        super().__init__(message)
        self.status = status


class BinlogError(FastbeanError):
    """The binlog directory or one of its files cannot be used."""


class BinlogLockedError(BinlogError):
    """Another server holds the lock on the binlog directory."""


class ServerStartError(FastbeanError):
    """fastbean.testing could not start a server; the message holds its stderr."""


class ReplicationError(FastbeanError):
    """Replication cannot run with this configuration or these NATS servers."""
