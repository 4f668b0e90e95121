"""Exceptions raised by fastbean itself; client mistakes are protocol replies, never these.

The exit statuses, beanstalkd's where it has one (docs/configuration.md;
the systemd unit's RestartPreventExitStatus= lists every configuration
error's, so that systemd does not restart what a restart cannot mend):
"""

EXIT_USAGE = 5              # a bad command line (beanstalkd's)
EXIT_BINLOG_DIR = 10        # -b DIR cannot be used: missing, a file, not writable, read-only, locked (beanstalkd's)
EXIT_GETPWNAM = 32          # -u: the user database could not be read (beanstalkd's)
EXIT_NO_USER = 33           # -u: no such user (beanstalkd's)
EXIT_SETUID = 34            # -u: cannot switch to the user (beanstalkd's)
EXIT_CONFIG = 78            # EX_CONFIG: the NATS servers cannot hold the stream, or the -u user cannot load fastbean
EXIT_LISTEN = 111           # cannot listen: a bad address or port, a port in use or not allowed (beanstalkd's)
# Not configuration errors: 1 (a binlog that cannot be replayed or grown at
# start, as in beanstalkd; a crash) and 74 (EX_IOERR, config.EXIT_DISK_FAILED:
# the binlog's disk kept failing while serving): a supervisor restarts these.
CONFIG_EXITS = (EXIT_USAGE, EXIT_BINLOG_DIR, EXIT_GETPWNAM, EXIT_NO_USER, EXIT_SETUID, EXIT_CONFIG,
                EXIT_LISTEN)


class FastbeanError(Exception):
    """Base class of fastbean's own errors."""


class ConfigError(FastbeanError):
    """A bad command line or environment: the process exits with `status`."""

    def __init__(self, message, status=EXIT_USAGE):
        super().__init__(message)
        self.status = status


class BinlogError(FastbeanError):
    """The binlog directory or one of its files cannot be used; at start-up the
    process exits with `status`."""

    def __init__(self, message, status=1):
        super().__init__(message)
        self.status = status


class BinlogLockedError(BinlogError):
    """Another server holds the lock on the binlog directory."""

    def __init__(self, message):
        super().__init__(message, EXIT_BINLOG_DIR)


class ServerStartError(FastbeanError):
    """fastbean.testing could not start a server; the message holds its stderr."""


class ReplicationError(FastbeanError):
    """Replication cannot run with this configuration or these NATS servers
    (the process exits with EXIT_CONFIG)."""
