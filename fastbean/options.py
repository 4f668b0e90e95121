"""The server's command-line options, one row each: the flag, what it
takes, what it does, its default, and how its value is read. The parser
(cli.py), `--help`, the man page (tools/manpages.py) and the test that
holds the README's and docs/configuration.md's flag tables to it all read
this table, so none of them can say something the others do not.

beanstalkd's flags keep beanstalkd's spelling and meaning (its short flags
combine, `-Vb DIR`, and take their value from the rest of the word or the
next word); fastbean's own are long options, `--name VALUE` or
`--name=VALUE`. Only light modules are imported here (see cli.py).
"""
import textwrap

from fastbean import logs
from fastbean.config import (
    DEFAULT_AUTH_TIMEOUT,
    DEFAULT_BINLOG_SIZE,
    DEFAULT_BUSY_POLL_US,
    DEFAULT_LEASE_TTL,
    DEFAULT_MAX_JOB_SIZE,
    DEFAULT_MAX_UNAUTHENTICATED,
    DEFAULT_METRICS_HOST,
    DEFAULT_METRICS_TUBES,
    DEFAULT_PORT,
    DEFAULT_REPLICATE_TIMEOUT,
    DEFAULT_STREAM,
    MAX_BUSY_POLL_US,
    MAX_JOB_SIZE_LIMIT,
    TLS_HANDSHAKE_TIMEOUT,
    UNIX,
)
from fastbean.errors import ConfigError

BEANSTALKD, OWN, HA = "beanstalkd", "own", "ha"
SECTIONS = {BEANSTALKD: "Options", OWN: "fastbean's own options",
            HA: "High availability (on NATS JetStream; see docs/high-availability.md)"}
SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
C_SPACE = " \t\n\v\f\r"
SIZE_T_MAX = (1 << 64) - 1
TUBE_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-+/;.$_()")


class Usage(ConfigError):
    """A usage error: the mistake in one line (as beanstalkd words it), exit 5
    (as beanstalkd does). beanstalkd follows it with its usage text, which
    for fastbean's 80 lines pushed the mistake off the terminal."""


class Option:
    """One flag. store(opts, value, warn) records it in opts (the Config
    fields), value None for a switch; `shown` is the default as --help and
    the man page show it, `documented` as the docs' flag tables do."""

    __slots__ = ("flag", "metavar", "help", "section", "store", "shown", "documented")

    def __init__(self, flag, metavar, help, store, section=OWN, shown=None, documented=None):
        self.flag, self.metavar, self.help, self.section = flag, metavar, help, section
        self.store, self.shown, self.documented = store, shown, documented

    @property
    def short(self):
        return len(self.flag) == 2

    @property
    def takes_value(self):
        return self.metavar is not None

    def synopsis(self):
        return self.flag + (" " + self.metavar if self.metavar else "")

    def described(self):
        """The help text and the default, as one paragraph."""
        return self.help + (" (default: %s)" % self.shown if self.shown is not None else "")


# -- reading values -----------------------------------------------------------

def size(text, what):
    if not text.isascii() or not text.isdigit():
        raise Usage("invalid %s: %s" % (what, text))
    return int(text)


def size_t(text):
    """A number as beanstalkd reads -z, -s and -f (sscanf "%zu%c"): leading
    blanks and a sign allowed, decimal digits, nothing after them. A negative
    number wraps around 2**64 and a too large one saturates, as strtoull does,
    so `-z -1` means the largest size there too."""
    digits = text.lstrip(C_SPACE)
    negative = digits[:1] == "-"
    if digits[:1] in ("-", "+"):
        digits = digits[1:]
    if not digits or not digits.isascii() or not digits.isdigit():
        raise Usage("invalid size: %s" % text)
    n = int(digits)
    if n > SIZE_T_MAX:
        return SIZE_T_MAX
    return (-n) % (1 << 64) if negative else n


def signed(n, bits):
    """n's low `bits` bits as a two's-complement number (a C cast)."""
    n &= (1 << bits) - 1
    return n - (1 << bits) if n >> (bits - 1) else n


def bytes_with_suffix(text, what):
    t = text.strip().upper().rstrip("B")
    unit = t[-1:] if t[-1:] in SUFFIXES and not t[-1:].isdigit() else ""
    num = t[:-1] if unit else t
    if not num.isdigit():
        raise Usage("invalid %s: %s" % (what, text))
    return int(num) * SUFFIXES[unit]


def http_address(value, what):
    """[HOST:]PORT -> (host, port); HOST may be [IPv6]; an empty HOST is every interface."""
    host, port = DEFAULT_METRICS_HOST, value
    if value.startswith("["):
        end = value.find("]:")
        host, port = (value[1:end], value[end + 2:]) if end > 0 else (None, "")
    elif ":" in value:
        host, _, port = value.rpartition(":")
        host = host or None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise Usage("invalid %s address: %s" % (what, value))
    return host, int(port)


def listen_address(value, flag):
    """HOST:PORT, [IPV6]:PORT, :PORT or unix:PATH -> (host, port) or (UNIX, path);
    host None is every interface."""
    if value.startswith("unix:"):
        if len(value) == 5:
            raise Usage("%s: no path in %s" % (flag, value))
        return UNIX, value[5:]
    if value.startswith("["):
        host, sep, port = value[1:].partition("]:")
        if not sep or not host:
            raise Usage("invalid %s address: %s" % (flag, value))
    else:
        host, sep, port = value.rpartition(":")
        if not sep or ":" in host:
            raise Usage("invalid %s address (HOST:PORT, [IPV6]:PORT, :PORT or unix:PATH): %s"
                        % (flag, value))
    if not port:
        raise Usage("invalid %s address: %s" % (flag, value))
    return host or None, port


def seconds(text, what):
    try:
        value = float(text)
    except ValueError:
        raise Usage("invalid %s: %s" % (what, text)) from None
    if not 0 < value < 86400:
        raise Usage("%s: between 0 and 86400 seconds" % what)
    return value


def nats_urls(text, what):
    urls = tuple(u.strip() for u in text.split(",") if u.strip())
    if not urls:
        raise Usage("%s: no NATS server URL" % what)
    for url in urls:
        scheme, sep, rest = url.partition("://")
        if not sep:
            scheme, rest = "nats", url
        if scheme not in ("nats", "tls") or not rest:
            raise Usage("%s: not a nats:// URL: %s" % (what, url))
    return urls


def name(text, what):
    # it goes into NATS subjects and bucket names
    if not text or not all(c.isascii() and (c.isalnum() or c in "-_") for c in text):
        raise Usage("%s: letters, digits, - and _ only: %s" % (what, text))
    return text


def tube_name(text, what):
    # beanstalkd's rule for tube names
    raw = text.encode("utf-8", "surrogateescape")
    if not 1 <= len(raw) <= 200 or raw[:1] == b"-" or not set(raw) <= TUBE_BYTES:
        raise Usage("%s: not a tube name (1 to 200 letters, digits and -+/;.$_(), "
                    "not starting with -): %s" % (what, text))
    return text


def u32(text, what):
    n = size(text, what)
    if n > 0xffffffff:
        raise Usage("%s: at most %d" % (what, 0xffffffff))
    return n


def busy_poll(text, what):
    usec = size(text, what)
    if usec > MAX_BUSY_POLL_US:
        raise Usage("%s: at most %d microseconds" % (what, MAX_BUSY_POLL_US))
    return usec


def log_format(text, what):
    if text not in logs.FORMATS:
        raise Usage("%s: text or json, not %s" % (what, text))
    return text


def zero_is_none(read):
    return lambda text, what: read(text, what) or None


def verbatim(text, what):
    return text


# -- how each flag lands in the Config ----------------------------------------

def to(key, read=verbatim):
    """Store the value, read by read(text, flag), as Config field key."""
    def store(opts, value, warn, flag):
        opts[key] = read(value, flag)
    return store


def switch(key):
    def store(opts, value, warn, flag):
        opts[key] = True
    return store


def repeated(key, read):
    def store(opts, value, warn, flag):
        opts[key] = opts.get(key, ()) + (read(value, flag),)
    return store


def _address(host_key, port_key):
    def store(opts, value, warn, flag):
        opts[host_key], opts[port_key] = http_address(value, flag)
    return store


def _max_job_size(opts, value, warn, flag):
    n = size_t(value)
    if n > MAX_JOB_SIZE_LIMIT:
        warn("maximum job size was set to %d" % MAX_JOB_SIZE_LIMIT)
        n = MAX_JOB_SIZE_LIMIT
    opts["max_job_size"] = n


def _binlog_size(opts, value, warn, flag):
    # beanstalkd keeps it in an int: binlog-max-size shows the cast
    opts["binlog_size"] = signed(size_t(value), 32)


def _fsync_ms(opts, value, warn, flag):
    # beanstalkd: an int64 of milliseconds times 10**6 ns; a result <= 0
    # syncs after every write, as -f 0 does
    ns = signed(signed(size_t(value), 64) * 1000000, 64)
    opts["fsync"], opts["fsync_ms"] = True, max(ns // 1000000, 1) if ns > 0 else 0


def _no_fsync(opts, value, warn, flag):
    opts["fsync"] = False


def _louder(opts, value, warn, flag):
    opts["verbosity"] = opts.get("verbosity", 0) + 1


def _removed(opts, value, warn, flag):
    warn("%s flag was removed. binlog is always compacted." % flag)


def _help(opts, value, warn, flag):
    opts["_done"] = flag


B = BEANSTALKD
OPTIONS = (
    Option("-b", "DIR", "keep a binlog (write-ahead log) in DIR, so jobs survive restarts",
           to("binlog_dir"), B, documented="off"),
    Option("-f", "MS", "fsync the binlog at most every MS milliseconds (-f0: before every reply)",
           _fsync_ms, B, documented="50"),
    Option("-F", None, "never fsync", _no_fsync, B),
    Option("-l", "ADDR", "listen on ADDR, or on the UNIX socket PATH with unix:PATH",
           to("listen_addr"), B, shown="all addresses", documented="all interfaces"),
    Option("-p", "PORT", "listen on PORT", to("port"), B, shown=str(DEFAULT_PORT),
           documented=str(DEFAULT_PORT)),
    Option("-u", "USER", "switch to USER and its group after binding", to("user"), B),
    Option("-z", "BYTES", "largest job body accepted", _max_job_size, B,
           shown=str(DEFAULT_MAX_JOB_SIZE), documented=str(DEFAULT_MAX_JOB_SIZE)),
    Option("-s", "BYTES", "size of each binlog file", _binlog_size, B, shown=str(DEFAULT_BINLOG_SIZE),
           documented=str(DEFAULT_BINLOG_SIZE)),
    Option("-c", None, "(removed in beanstalkd; ignored with a warning)", _removed, B),
    Option("-n", None, "(removed in beanstalkd; ignored with a warning)", _removed, B),
    Option("-v", None, "print the version and exit", _help, B),
    Option("-V", None, "log more; repeat for more (-VV logs every read and reply)", _louder, B),
    Option("-h", None, "print this help (on stderr, as beanstalkd does) and exit", _help, B),
    Option("--help", None, "print this help on stdout and exit", _help, B),
    Option("--version", None, "print the version on stdout and exit", _help, B),

    Option("--max-memory", "BYTES", "answer put with OUT_OF_MEMORY once the jobs held use BYTES "
           "(suffixes K, M, G)", to("max_memory", bytes_with_suffix), shown="no cap",
           documented="no cap"),
    Option("--max-connections", "N", "refuse connections beyond N, counted from their accept "
           "(TLS handshake and auth included)", to("max_connections", size), shown="no limit",
           documented="none"),
    Option("--busy-poll", "USEC", "after a read, poll up to USEC microseconds for the next one "
           "before sleeping; adapts to the clients (0: never)", to("busy_poll_us", busy_poll),
           shown=str(DEFAULT_BUSY_POLL_US), documented=str(DEFAULT_BUSY_POLL_US)),
    Option("--metrics", "[HOST:]PORT", "serve /metrics (Prometheus), /healthz and /readyz over "
           "HTTP on HOST:PORT (HOST: 127.0.0.1 if not given; \":PORT\" for every interface)",
           _address("metrics_host", "metrics_port"), shown="off", documented="off"),
    Option("--metrics-tls", None, "serve the HTTP endpoint over TLS (https://) with --tls-cert, "
           "--tls-key and --tls-ca", switch("metrics_tls"), documented="off"),
    Option("--metrics-auth", None, "/metrics answers only requests with a token of --auth-tokens "
           "(Authorization: Bearer TOKEN, or Basic NAME:TOKEN); needs --metrics-tls. /healthz "
           "and /readyz stay open", switch("metrics_auth"), documented="off"),
    Option("--health-auth", None, "/healthz and /readyz want a token too (any role); needs "
           "--metrics-auth", switch("health_auth"), documented="off"),
    Option("--metrics-tubes", "N", "tubes with /metrics series of their own: the N holding the "
           "most jobs; the rest are summed as tube=\"*other*\"", to("metrics_tubes", size),
           shown=str(DEFAULT_METRICS_TUBES), documented=str(DEFAULT_METRICS_TUBES)),
    Option("--console", "[HOST:]PORT", "serve the web console (see docs/console.md) on HOST:PORT "
           "(HOST: 127.0.0.1 if not given; \":PORT\" for every interface, which needs --auth-tokens)",
           _address("console_host", "console_port"), shown="off", documented="off"),
    Option("--console-tls", None, "serve the console over https with --tls-cert and --tls-key",
           switch("console_tls"), documented="off"),
    Option("--log-format", "FMT", "text or json (one object per line)",
           to("log_format", log_format), shown="text", documented="text"),
    Option("--listen", "ADDR", "also listen on ADDR: HOST:PORT, [IPV6]:PORT, :PORT (every "
           "interface) or unix:PATH; repeatable. With --listen or --tls-listen, the -l/-p "
           "listener opens only if -l or -p is given", repeated("listen", listen_address)),
    Option("--tls-listen", "ADDR", "also listen on ADDR, over TLS (see docs/tls.md); repeatable",
           repeated("tls_listen", listen_address), documented="off"),
    Option("--tls-cert", "FILE", "the server's certificate chain (PEM) for TLS; files reloaded "
           "on SIGHUP", to("tls_cert")),
    Option("--tls-key", "FILE", "its private key (PEM)", to("tls_key"), shown="in the --tls-cert file"),
    Option("--tls-ca", "FILE", "require client certificates signed by a CA in FILE (mutual TLS)",
           to("tls_ca")),
    Option("--tls-handshake-timeout", "SECONDS", "close a TLS connection whose handshake is not "
           "done SECONDS after its accept", to("tls_handshake_timeout", seconds),
           shown="%g" % TLS_HANDSHAKE_TIMEOUT, documented="%g" % TLS_HANDSHAKE_TIMEOUT),
    Option("--auth-tokens", "FILE", "TLS listeners answer only `auth <token>` and `quit` until "
           "the client sends a token whose SHA-256 is in FILE (lines NAME SHA256 "
           "[ROLE[:TUBE-GLOB,...] ...], roles producer, worker, monitor, admin; no roles: admin; "
           "reloaded on SIGHUP; see docs/tls.md)", to("auth_tokens"), documented="off"),
    Option("--auth-by-certificate", None, "a client certificate (verified against --tls-ca) whose "
           "subject CN or DNS or email subjectAltName is a NAME of --auth-tokens is in as that "
           "line, roles included, without `auth`", switch("auth_by_certificate"), documented="off"),
    Option("--auth-timeout", "SECONDS", "close a connection to a TLS listener with --auth-tokens "
           "whose token is not accepted SECONDS after its handshake",
           to("auth_timeout", seconds), shown="%g" % DEFAULT_AUTH_TIMEOUT,
           documented="%g" % DEFAULT_AUTH_TIMEOUT),
    Option("--max-unauthenticated-per-address", "N", "close at once a TLS connection from an "
           "address that has N still in their handshake or before auth (0: no cap)",
           to("max_unauthenticated_per_address", zero_is_none(size)),
           shown=str(DEFAULT_MAX_UNAUTHENTICATED), documented=str(DEFAULT_MAX_UNAUTHENTICATED)),
    Option("--retry-limit", "N", "bury a job once it has been released or has timed out N times "
           "in all, in every tube without a retry-limit of its own (see "
           "docs/protocol-extensions.md)", to("retry_limit", u32), shown="0, no limit",
           documented="0 (none)"),
    Option("--dead-letter-tube", "TUBE", "move such jobs, ready, to TUBE instead of burying them",
           to("dead_letter_tube", tube_name)),
    Option("--strict", None, "answer exactly as beanstalkd 1.12: every protocol extension "
           "(fastbean-stats, flush-tube, ...) gets beanstalkd's answer, UNKNOWN_COMMAND "
           "(BAD_FORMAT for reserve-batch)", switch("strict"), documented="off"),
    Option("--testing", None, "for tests only: accept fastbean-reset (deletes every job, closes "
           "every connection) and fastbean-clock-advance (moves time forward)", switch("testing"),
           documented="off"),

    Option("--replicate", "URLS", "replicate every change to a JetStream stream on these NATS "
           "servers (comma-separated nats:// URLs); the node is a standby until it holds the "
           "lease", to("replicate", nats_urls), HA, documented="off"),
    Option("--replicate-stream", "NAME", "the stream's name, shared by the nodes of one queue "
           "(the lease bucket is NAME-lease)", to("replicate_stream", name), HA,
           shown=DEFAULT_STREAM, documented=DEFAULT_STREAM),
    Option("--replicate-ca", "FILE", "speak TLS to NATS and check its servers against the CA "
           "certificates in FILE (tls:// URLs alone trust the system's CAs)", to("replicate_ca"), HA),
    Option("--replicate-cert", "FILE", "the client certificate for NATS servers that verify "
           "clients", to("replicate_cert"), HA),
    Option("--replicate-key", "FILE", "its key", to("replicate_key"), HA,
           shown="in the --replicate-cert file"),
    Option("--replicate-auth-file", "FILE", "authenticate to NATS with USER:PASSWORD or a token, "
           "the first line of FILE (kept off the command line and out of the log)",
           to("replicate_auth_file"), HA),
    Option("--node-name", "NAME", "this node's name in the lease and the log", to("node_name", name),
           HA, shown="host:port", documented="host:port"),
    Option("--lease-ttl", "SECONDS", "how long the primary's lease lasts unrenewed",
           to("lease_ttl", seconds), HA, shown="%g" % DEFAULT_LEASE_TTL,
           documented="%g" % DEFAULT_LEASE_TTL),
    Option("--replicate-timeout", "SECONDS", "how long a change waits for a quorum before the "
           "server refuses changes", to("replicate_timeout", seconds), HA,
           shown="%g" % DEFAULT_REPLICATE_TIMEOUT, documented="%g" % DEFAULT_REPLICATE_TIMEOUT),
)
BY_FLAG = {option.flag: option for option in OPTIONS}


# -- --help ---------------------------------------------------------------------

HELP_WIDTH = 92
COLUMN = 25


def usage_text(options=OPTIONS):
    """--help (and -h): every option by section, the help wrapped beside it."""
    out = ["Use: fastbean [OPTIONS]"]
    for section, title in SECTIONS.items():
        out += ["", title + ":"]
        column = 10 if section == BEANSTALKD else COLUMN
        for option in options:
            if option.section != section:
                continue
            head = " " + option.synopsis()
            lines = textwrap.wrap(option.described(), HELP_WIDTH - column, break_on_hyphens=False)
            if len(head) >= column:
                out.append(head)
                head = ""
            out.append(head.ljust(column - 1) + " " + lines[0])
            out += [" " * column + line for line in lines[1:]]
    out += ["", "Documentation: man fastbean, and %s/index.md (every flag and exit" % docs_dir(),
            "status: configuration.md).", ""]
    return "\n".join(out)


def docs_dir():
    """Where the docs are: installed with the package (share/doc/fastbean
    under its prefix), or, in a source tree, its docs/."""
    import os
    import sys
    installed = os.path.join(sys.prefix, "share", "doc", "fastbean")
    if os.path.isfile(os.path.join(installed, "index.md")):
        return installed
    tree = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
    return tree if os.path.isfile(os.path.join(tree, "index.md")) else "docs/ in fastbean's sdist"


USAGE = usage_text()
