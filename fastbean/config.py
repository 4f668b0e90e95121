"""Config: everything the command line decides, frozen before the server starts."""
import signal
from dataclasses import dataclass
from typing import Optional

DEFAULT_PORT = "11300"
DEFAULT_MAX_JOB_SIZE = 65535
MAX_JOB_SIZE_LIMIT = 1 << 30          # beanstalkd caps -z here
BACKLOG = 1024                         # listen() backlog, as beanstalkd's
DEFAULT_BINLOG_SIZE = 10 * 1024 * 1024
DEFAULT_FSYNC_MS = 50
FSYNC_THREADS = 2                      # fdatasyncs of the binlog that may run at once (see binlog/threads.pyx)
DEFAULT_BUSY_POLL_US = 100             # see busypoll.py
MAX_BUSY_POLL_US = 1_000_000
BATCH_LIMIT = 1024                     # commands one connection runs before others get a turn
TICK_BUDGET = 2048                     # jobs or connections one timer callback handles (see server.py)
SHUTDOWN_GRACE = 5.0                   # seconds to finish writing to clients on SIGTERM/SIGINT
DEFAULT_METRICS_HOST = "127.0.0.1"     # --metrics PORT: loopback unless a host is given
DEFAULT_CONSOLE_HOST = "127.0.0.1"     # --console PORT: loopback unless a host is given
DEFAULT_METRICS_TUBES = 100            # --metrics-tubes: tubes with series of their own
DEFAULT_LOG_FORMAT = "text"
UNIX = "unix:"                         # the host of a UNIX socket address: (UNIX, path)
TLS_HANDSHAKE_TIMEOUT = 10.0           # --tls-handshake-timeout: seconds a TLS client has to finish its handshake
DEFAULT_AUTH_TIMEOUT = 10.0            # --auth-timeout: seconds after the handshake to send a good token
# --max-unauthenticated-per-address: connections from one address still in
# their TLS handshake or before `auth`. A client is in a few round trips after
# its connect, so even a host reconnecting a pool of workers at once has far
# fewer at a time; one peer cannot hold more than this many half-open
# connections, however long each is kept (see docs/tls.md, Threat model).
DEFAULT_MAX_UNAUTHENTICATED = 64
STATUS_INTERVAL = 1.0                  # seconds between systemd STATUS / cap checks
# Replication (replication/). A NATS server lost takes JetStream a leader
# election: its raft followers wait 4 to 9 s after the leader's last
# heartbeat (1 s apart) before they elect another (nats-server's raft.go),
# so up to about 10 s. Neither the lease nor a waiting change may run out
# in that time, or the loss of one NATS server would stop the primary
# serving: the primary serves until 1 s before its lease could expire
# (replication/lease.py), and renews it every second, so 15 s leaves a
# margin of about 3 s. Failover after a primary dies takes about the TTL.
DEFAULT_STREAM = "fastbean"
DEFAULT_LEASE_TTL = 15.0               # seconds the primary's lease lasts unrenewed
DEFAULT_REPLICATE_TIMEOUT = 15.0       # seconds a change waits for a quorum before the primary suspends
STREAM_REPLICAS = 3
# Fail-stop (server.py): a binlog write or fsync that fails makes the server
# rebuild its queue from the disk; more than FAILSTOP_LIMIT failures within
# FAILSTOP_WINDOW seconds, or a disk that will not take the repair, and it
# exits with EXIT_DISK_FAILED (EX_IOERR) for its supervisor.
FAILSTOP_LIMIT = 3
FAILSTOP_WINDOW = 60.0
EXIT_DISK_FAILED = 74
# A binlog operation that failed for want of descriptors or memory (EMFILE,
# ENFILE, ENOMEM) is no disk fault: it is tried again this often, in seconds,
# with no fail-stop (binlog/durability.py).
EXHAUSTED_RETRY = 0.1
# SIGUSR1 drains, SIGUSR2 ends a drain (not with --strict: it ends the
# process then, as it ends beanstalkd), SIGTERM/SIGINT stop, SIGHUP reloads the TLS certificates
# (with TLS only: otherwise it ends the process, as it ends beanstalkd). The CLI blocks them before it opens the
# sockets and the server unblocks them once its handlers run, so a signal sent
# as soon as the port answers is not lost.
HANDLED_SIGNALS = frozenset({signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
# how often a draining server looks whether its last reservation is gone
DRAIN_CHECK_INTERVAL = 0.25


@dataclass(frozen=True)
class Config:
    listen_addr: Optional[str] = None     # -l: None means every interface; "unix:/path"
    port: str = DEFAULT_PORT              # -p: a number or a service name
    classic_listener: bool = True         # the -l/-p listener; False when only --listen/--tls-listen name some
    listen: tuple = ()                    # --listen: (host or None, port) or (UNIX, path) each
    tls_listen: tuple = ()                # --tls-listen: the same, for listeners that speak TLS
    tls_cert: Optional[str] = None        # --tls-cert: PEM certificate chain
    tls_key: Optional[str] = None         # --tls-key: PEM private key; None = in the --tls-cert file
    tls_ca: Optional[str] = None          # --tls-ca: clients need a certificate it signed
    auth_tokens: Optional[str] = None     # --auth-tokens: TLS listeners want `auth <token>` first
    auth_by_certificate: bool = False     # --auth-by-certificate: a client certificate may name a token's line
    max_job_size: int = DEFAULT_MAX_JOB_SIZE   # -z, bytes of body
    user: Optional[str] = None            # -u: drop privileges to this user after binding
    verbosity: int = 0                    # -V, repeatable
    binlog_dir: Optional[str] = None      # -b: None means no binlog
    fsync: bool = True                    # False after -F (the last of -f/-F wins)
    fsync_ms: int = DEFAULT_FSYNC_MS      # -f: at most one fsync per this many ms; 0 = every write
    binlog_size: int = DEFAULT_BINLOG_SIZE     # -s, bytes per binlog file
    max_memory: Optional[int] = None      # --max-memory: cap on job bytes held; None = no cap
    max_connections: Optional[int] = None  # --max-connections; None = as many as fds allow
    tls_handshake_timeout: float = TLS_HANDSHAKE_TIMEOUT   # --tls-handshake-timeout, seconds
    auth_timeout: float = DEFAULT_AUTH_TIMEOUT     # --auth-timeout, seconds
    # --max-unauthenticated-per-address; None = no cap
    max_unauthenticated_per_address: Optional[int] = DEFAULT_MAX_UNAUTHENTICATED
    busy_poll_us: int = DEFAULT_BUSY_POLL_US   # --busy-poll: longest poll after a read; 0 = never
    metrics_host: Optional[str] = DEFAULT_METRICS_HOST   # --metrics HOST:PORT; None = every interface
    metrics_port: Optional[int] = None    # --metrics: None means no HTTP endpoint
    metrics_tls: bool = False             # --metrics-tls: the HTTP endpoint speaks TLS (--tls-cert)
    metrics_auth: bool = False            # --metrics-auth: /metrics wants a token of --auth-tokens
    health_auth: bool = False             # --health-auth: /healthz and /readyz want one too
    metrics_tubes: int = DEFAULT_METRICS_TUBES   # --metrics-tubes
    console_host: Optional[str] = DEFAULT_CONSOLE_HOST  # --console HOST:PORT; None = every interface
    console_port: Optional[int] = None    # --console: None means no web console
    console_tls: bool = False             # --console-tls: the console speaks https (--tls-cert)
    log_format: str = DEFAULT_LOG_FORMAT  # --log-format: text or json
    testing: bool = False                 # --testing: the test-only commands run (fastbean.testing)
    strict: bool = False                  # --strict: every protocol extension off, as beanstalkd 1.12
    retry_limit: int = 0                  # --retry-limit: default releases + timeouts before a bury; 0 = none
    dead_letter_tube: Optional[str] = None   # --dead-letter-tube: move such jobs there instead
    replicate: Optional[tuple] = None     # --replicate: NATS server URLs; None = no replication
    replicate_stream: str = DEFAULT_STREAM     # --replicate-stream: stream (and lease bucket) name
    replicate_ca: Optional[str] = None    # --replicate-ca: TLS to NATS, its servers checked against this CA
    replicate_cert: Optional[str] = None  # --replicate-cert: the client certificate NATS may ask for
    replicate_key: Optional[str] = None   # --replicate-key: its key (default: in the certificate file)
    replicate_auth_file: Optional[str] = None  # --replicate-auth-file: USER:PASSWORD or a token for NATS
    node_name: Optional[str] = None       # --node-name: shown in the lease; None = host:port
    lease_ttl: float = DEFAULT_LEASE_TTL  # --lease-ttl, seconds
    replicate_timeout: float = DEFAULT_REPLICATE_TIMEOUT   # --replicate-timeout, seconds
