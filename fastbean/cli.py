"""Command line: beanstalkd's flags with beanstalkd's meanings, plus fastbean's own.

Only light modules are imported here: the listening socket is bound before
asyncio, uvloop and the engine are loaded, so clients can connect (into the
kernel's backlog) while the rest of the server starts.
"""
import importlib.util
import logging
import os
import signal
import sys

from fastbean import __version__, logs
from fastbean.config import (
    DEFAULT_AUTH_TIMEOUT,
    DEFAULT_BINLOG_SIZE,
    DEFAULT_BUSY_POLL_US,
    DEFAULT_CONSOLE_HOST,
    DEFAULT_FSYNC_MS,
    DEFAULT_LEASE_TTL,
    DEFAULT_MAX_JOB_SIZE,
    DEFAULT_MAX_UNAUTHENTICATED,
    DEFAULT_METRICS_HOST,
    DEFAULT_METRICS_TUBES,
    DEFAULT_PORT,
    DEFAULT_REPLICATE_TIMEOUT,
    DEFAULT_STREAM,
    HANDLED_SIGNALS,
    MAX_BUSY_POLL_US,
    MAX_JOB_SIZE_LIMIT,
    TLS_HANDSHAKE_TIMEOUT,
    UNIX,
    Config,
)
from fastbean.errors import EXIT_CONFIG, BinlogError, ConfigError
from fastbean.logs import event

USAGE = """\
Use: fastbean [OPTIONS]

Options:
 -b DIR   keep a binlog (write-ahead log) in DIR, so jobs survive restarts
 -f MS    fsync the binlog at most every MS milliseconds (-f0: before every reply)
 -F       never fsync
 -l ADDR  listen on ADDR, or on the UNIX socket PATH with unix:PATH (default: all addresses)
 -p PORT  listen on PORT (default: %(port)s)
 -u USER  switch to USER and its group after binding
 -z BYTES largest job body accepted (default: %(max_job_size)d)
 -s BYTES size of each binlog file (default: %(binlog_size)d)
 -c       (removed in beanstalkd; ignored with a warning)
 -n       (removed in beanstalkd; ignored with a warning)
 -v       print the version and exit
 -V       log more; repeat for more (-VV logs every read and reply)
 -h       print this help (on stderr, as beanstalkd does) and exit
 --help   print this help on stdout and exit
 --version
          print the version on stdout and exit

fastbean's own options:
 --max-memory BYTES      answer put with OUT_OF_MEMORY once the jobs held use BYTES
                         (suffixes K, M, G; default: no cap)
 --max-connections N     refuse connections beyond N, counted from their accept (TLS
                         handshake and auth included) (default: no limit)
 --busy-poll USEC        after a read, poll up to USEC microseconds for the next one
                         before sleeping; adapts to the clients (default: %(busy_poll_us)d; 0: never)
 --metrics [HOST:]PORT   serve /metrics (Prometheus), /healthz and /readyz over HTTP
                         on HOST:PORT (default host: 127.0.0.1; ":PORT" for every
                         interface; default: off)
 --metrics-tls           serve the HTTP endpoint over TLS (https://) with --tls-cert,
                         --tls-key and --tls-ca
 --metrics-auth          /metrics answers only requests with a token of --auth-tokens
                         (Authorization: Bearer TOKEN, or Basic NAME:TOKEN); needs
                         --metrics-tls. /healthz and /readyz stay open
 --health-auth           /healthz and /readyz want a token too (any role); needs
                         --metrics-auth
 --metrics-tubes N       tubes with /metrics series of their own: the N holding the
                         most jobs; the rest are summed as tube="*other*" (default: %(metrics_tubes)d)
 --console [HOST:]PORT   serve the web console (see docs/console.md) on HOST:PORT
                         (default host: 127.0.0.1; ":PORT" for every interface, which
                         needs --auth-tokens; default: off)
 --console-tls           serve the console over https with --tls-cert and --tls-key
 --log-format FMT        text or json (one object per line) (default: text)
 --listen ADDR           also listen on ADDR: HOST:PORT, [IPV6]:PORT, :PORT (every
                         interface) or unix:PATH; repeatable. With --listen or
                         --tls-listen, the -l/-p listener opens only if -l or -p is given
 --tls-listen ADDR       also listen on ADDR, over TLS (see docs/tls.md); repeatable
 --tls-cert FILE         the server's certificate chain (PEM) for TLS; files reloaded on SIGHUP
 --tls-key FILE          its private key (PEM) (default: in the --tls-cert file)
 --tls-ca FILE           require client certificates signed by a CA in FILE (mutual TLS)
 --tls-handshake-timeout SECONDS
                         close a TLS connection whose handshake is not done SECONDS
                         after its accept (default: %(tls_handshake_timeout)g)
 --auth-tokens FILE      TLS listeners answer only `auth <token>` and `quit` until the
                         client sends a token whose SHA-256 is in FILE (lines NAME SHA256
                         [ROLE[:TUBE-GLOB,...] ...], roles producer, worker, monitor, admin;
                         no roles: admin; reloaded on SIGHUP; see docs/tls.md)
 --auth-by-certificate   a client certificate (verified against --tls-ca) whose subject
                         CN or DNS or email subjectAltName is a NAME of --auth-tokens is
                         in as that line, roles included, without `auth`
 --auth-timeout SECONDS  close a connection to a TLS listener with --auth-tokens whose
                         token is not accepted SECONDS after its handshake (default: %(auth_timeout)g)
 --max-unauthenticated-per-address N
                         close at once a TLS connection from an address that has N
                         still in their handshake or before auth (default: %(max_unauth)d;
                         0: no cap)
 --retry-limit N         bury a job once it has been released or has timed out N times
                         in all, in every tube without a retry-limit of its own
                         (default: 0, no limit; see docs/protocol-extensions.md)
 --dead-letter-tube TUBE move such jobs, ready, to TUBE instead of burying them
 --strict                answer exactly as beanstalkd 1.12: every protocol extension
                         (fastbean-stats, flush-tube, ...) gets beanstalkd's answer,
                         UNKNOWN_COMMAND (BAD_FORMAT for reserve-batch)
 --testing               for tests only: accept fastbean-reset (deletes every job, closes
                         every connection) and fastbean-clock-advance (moves time forward)

High availability (on NATS JetStream; see docs/high-availability.md):
 --replicate URLS        replicate every change to a JetStream stream on these NATS
                         servers (comma-separated nats:// URLs); the node is a standby
                         until it holds the lease
 --replicate-stream NAME the stream's name, shared by the nodes of one queue
                         (default: %(stream)s; the lease bucket is NAME-lease)
 --replicate-ca FILE     speak TLS to NATS and check its servers against the CA
                         certificates in FILE (tls:// URLs alone trust the system's CAs)
 --replicate-cert FILE   the client certificate for NATS servers that verify clients
 --replicate-key FILE    its key (default: in the --replicate-cert file)
 --replicate-auth-file FILE
                         authenticate to NATS with USER:PASSWORD or a token, the first
                         line of FILE (kept off the command line and out of the log)
 --node-name NAME        this node's name in the lease and the log (default: host:port)
 --lease-ttl SECONDS     how long the primary's lease lasts unrenewed (default: %(lease_ttl)g)
 --replicate-timeout SECONDS
                         how long a change waits for a quorum before the server
                         refuses changes (default: %(replicate_timeout)g)

Documentation: docs/ in fastbean's source distribution (on PyPI, or the git tree),
starting at docs/index.md; every flag and exit status: docs/configuration.md.
""" % {"port": DEFAULT_PORT, "max_job_size": DEFAULT_MAX_JOB_SIZE, "binlog_size": DEFAULT_BINLOG_SIZE,
       "busy_poll_us": DEFAULT_BUSY_POLL_US, "metrics_tubes": DEFAULT_METRICS_TUBES,
       "stream": DEFAULT_STREAM, "lease_ttl": DEFAULT_LEASE_TTL,
       "replicate_timeout": DEFAULT_REPLICATE_TIMEOUT, "tls_handshake_timeout": TLS_HANDSHAKE_TIMEOUT,
       "auth_timeout": DEFAULT_AUTH_TIMEOUT, "max_unauth": DEFAULT_MAX_UNAUTHENTICATED}

VALUE_FLAGS = "bflpuzs"
LONG_OPTIONS = ("max-memory", "max-connections", "busy-poll", "metrics", "metrics-tubes", "console",
                "log-format", "replicate", "replicate-stream", "node-name", "lease-ttl",
                "replicate-timeout", "listen", "tls-listen", "tls-cert", "tls-key", "tls-ca", "auth-tokens",
                "replicate-ca", "replicate-cert", "replicate-key", "replicate-auth-file",
                "retry-limit", "dead-letter-tube", "tls-handshake-timeout", "auth-timeout",
                "max-unauthenticated-per-address")
SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class Usage(ConfigError):
    """A usage error: the mistake in one line (as beanstalkd words it), exit 5
    (as beanstalkd does). beanstalkd follows it with its usage text, which
    for fastbean's 80 lines pushed the mistake off the terminal."""


class BadValue(ConfigError):
    """A bad value of one of fastbean's own options: one line, exit 5."""


C_SPACE = " \t\n\v\f\r"
SIZE_T_MAX = (1 << 64) - 1


def _size(text, what):
    if not text.isascii() or not text.isdigit():
        raise Usage("invalid %s: %s" % (what, text))
    return int(text)


def _size_t(text):
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


def _signed(n, bits):
    """n's low `bits` bits as a two's-complement number (a C cast)."""
    n &= (1 << bits) - 1
    return n - (1 << bits) if n >> (bits - 1) else n


def _bytes_with_suffix(text, what):
    t = text.strip().upper().rstrip("B")
    unit = t[-1:] if t[-1:] in SUFFIXES and not t[-1:].isdigit() else ""
    num = t[:-1] if unit else t
    if not num.isdigit():
        raise Usage("invalid %s: %s" % (what, text))
    return int(num) * SUFFIXES[unit]


def _metrics_address(value, flag="--metrics", default_host=DEFAULT_METRICS_HOST):
    """[HOST:]PORT -> (host, port); HOST may be [IPv6]; an empty HOST is every interface."""
    host, port = default_host, value
    if value.startswith("["):
        end = value.find("]:")
        host, port = (value[1:end], value[end + 2:]) if end > 0 else (None, "")
    elif ":" in value:
        host, _, port = value.rpartition(":")
        host = host or None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise Usage("invalid %s address: %s" % (flag, value))
    return host, int(port)


def _listen_address(value, flag):
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


def _loopback(host):
    """host (None: every interface) is a loopback address or localhost."""
    if host is None:
        return False
    if host == "localhost":
        return True
    import ipaddress
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _seconds(text, what):
    try:
        value = float(text)
    except ValueError:
        raise Usage("invalid %s: %s" % (what, text)) from None
    if not 0 < value < 86400:
        raise Usage("%s: between 0 and 86400 seconds" % what)
    return value


def _nats_urls(text):
    urls = tuple(u.strip() for u in text.split(",") if u.strip())
    if not urls:
        raise Usage("--replicate: no NATS server URL")
    for url in urls:
        scheme, sep, rest = url.partition("://")
        if not sep:
            scheme, rest = "nats", url
        if scheme not in ("nats", "tls") or not rest:
            raise Usage("--replicate: not a nats:// URL: %s" % url)
    return urls


def _name(text, what):
    # it goes into NATS subjects and bucket names
    if not text or not all(c.isascii() and (c.isalnum() or c in "-_") for c in text):
        raise Usage("%s: letters, digits, - and _ only: %s" % (what, text))
    return text


TUBE_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-+/;.$_()")


def _tube_name(text, what):
    # beanstalkd's rule for tube names
    raw = text.encode("utf-8", "surrogateescape")
    if not 1 <= len(raw) <= 200 or raw[:1] == b"-" or not set(raw) <= TUBE_BYTES:
        raise Usage("%s: not a tube name (1 to 200 letters, digits and -+/;.$_(), "
                    "not starting with -): %s" % (what, text))
    return text


def _long_option(opts, name, value):
    """--name value, into opts."""
    if name == "max-memory":
        opts["max_memory"] = _bytes_with_suffix(value, "--max-memory")
    elif name == "busy-poll":
        usec = _size(value, "--busy-poll")
        if usec > MAX_BUSY_POLL_US:
            raise Usage("--busy-poll: at most %d microseconds" % MAX_BUSY_POLL_US)
        opts["busy_poll_us"] = usec
    elif name == "metrics":
        opts["metrics_host"], opts["metrics_port"] = _metrics_address(value)
    elif name == "console":
        opts["console_host"], opts["console_port"] = _metrics_address(value, "--console", DEFAULT_CONSOLE_HOST)
    elif name == "metrics-tubes":
        opts["metrics_tubes"] = _size(value, "--metrics-tubes")
    elif name == "log-format":
        if value not in logs.FORMATS:
            raise Usage("--log-format: text or json, not %s" % value)
        opts["log_format"] = value
    elif name == "replicate":
        opts["replicate"] = _nats_urls(value)
    elif name == "replicate-stream":
        opts["replicate_stream"] = _name(value, "--replicate-stream")
    elif name == "node-name":
        opts["node_name"] = _name(value, "--node-name")
    elif name == "lease-ttl":
        opts["lease_ttl"] = _seconds(value, "--lease-ttl")
    elif name in ("listen", "tls-listen"):
        key = name.replace("-", "_")
        opts[key] = opts.get(key, ()) + (_listen_address(value, "--" + name),)
    elif name in ("tls-cert", "tls-key", "tls-ca", "auth-tokens",
                  "replicate-ca", "replicate-cert", "replicate-key", "replicate-auth-file"):
        opts[name.replace("-", "_")] = value
    elif name == "replicate-timeout":
        opts["replicate_timeout"] = _seconds(value, "--replicate-timeout")
    elif name == "retry-limit":
        limit = _size(value, "--retry-limit")
        if limit > 0xffffffff:
            raise Usage("--retry-limit: at most %d" % 0xffffffff)
        opts["retry_limit"] = limit
    elif name == "dead-letter-tube":
        opts["dead_letter_tube"] = _tube_name(value, "--dead-letter-tube")
    elif name == "tls-handshake-timeout":
        opts["tls_handshake_timeout"] = _seconds(value, "--tls-handshake-timeout")
    elif name == "auth-timeout":
        opts["auth_timeout"] = _seconds(value, "--auth-timeout")
    elif name == "max-unauthenticated-per-address":
        opts["max_unauthenticated_per_address"] = _size(value, "--max-unauthenticated-per-address") or None
    else:
        opts["max_connections"] = _size(value, "--max-connections")


def _warn(text):
    event(logging.WARNING, "flag", text)


def parse_args(argv, warn=_warn):
    """argv (without the program name) -> Config. Raises ConfigError/Usage;
    returns None when the job is done (-h, -v). Warnings go to warn(text)."""
    opts = {}
    verbosity = 0
    fsync, fsync_ms = True, DEFAULT_FSYNC_MS
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg.startswith("--") and len(arg) > 2:
            name, eq, value = arg[2:].partition("=")
            if name in ("help", "version"):
                # GNU's long forms, which beanstalkd lacks: stdout, exit 0
                if eq:
                    raise Usage("--%s takes no value" % name)
                sys.stdout.write(USAGE if name == "help" else "fastbean %s\n" % __version__)
                return None
            if name in ("testing", "strict", "metrics-tls", "metrics-auth", "health-auth",
                        "auth-by-certificate", "console-tls"):
                if eq:
                    raise Usage("--%s takes no value" % name)
                opts[name.replace("-", "_")] = True
                continue
            if name not in LONG_OPTIONS:
                raise Usage("unknown option: %s" % arg)
            if not eq:
                if i >= len(args):
                    raise Usage("--%s requires an argument" % name)
                value = args[i]
                i += 1
            try:
                _long_option(opts, name, value)
            except Usage as e:
                raise BadValue("%s (fastbean --help lists the options)" % e) from None
            continue
        if not arg.startswith("-") or arg == "-":
            raise Usage("unknown argument: %s" % arg)
        j = 1
        while j < len(arg):
            flag = arg[j]
            j += 1
            if flag in VALUE_FLAGS:
                # the rest of this word, or else the whole next word (even "-p")
                if j < len(arg):
                    value, j = arg[j:], len(arg)
                elif i < len(args):
                    value = args[i]
                    i += 1
                else:
                    raise Usage("flag -%s requires an argument" % flag)
                if flag == "p":
                    opts["port"] = value
                elif flag == "l":
                    opts["listen_addr"] = value
                elif flag == "u":
                    opts["user"] = value
                elif flag == "b":
                    opts["binlog_dir"] = value
                elif flag == "z":
                    size = _size_t(value)
                    if size > MAX_JOB_SIZE_LIMIT:
                        warn("maximum job size was set to %d" % MAX_JOB_SIZE_LIMIT)
                        size = MAX_JOB_SIZE_LIMIT
                    opts["max_job_size"] = size
                elif flag == "s":
                    # beanstalkd keeps it in an int: binlog-max-size shows the cast
                    opts["binlog_size"] = _signed(_size_t(value), 32)
                elif flag == "f":
                    # beanstalkd: an int64 of milliseconds times 10**6 ns; a
                    # result <= 0 syncs after every write, as -f 0 does
                    ns = _signed(_signed(_size_t(value), 64) * 1000000, 64)
                    fsync, fsync_ms = True, max(ns // 1000000, 1) if ns > 0 else 0
            elif flag == "F":
                fsync = False
            elif flag == "V":
                verbosity += 1
            elif flag in "cn":
                warn("-%s flag was removed. binlog is always compacted." % flag)
            elif flag == "h":
                sys.stderr.write(USAGE)
                return None
            elif flag == "v":
                sys.stdout.write("fastbean %s\n" % __version__)
                return None
            else:
                raise Usage("unknown flag: -%s" % flag)
    if opts.get("tls_listen") and "tls_cert" not in opts:
        raise Usage("--tls-listen needs --tls-cert")
    if opts.get("metrics_tls"):
        if "metrics_port" not in opts:
            raise Usage("--metrics-tls needs --metrics")
        if "tls_cert" not in opts:
            raise Usage("--metrics-tls needs --tls-cert")
    if opts.get("metrics_auth"):
        if "auth_tokens" not in opts:
            raise Usage("--metrics-auth needs --auth-tokens")
        if not opts.get("metrics_tls"):
            raise Usage("--metrics-auth needs --metrics-tls: a token is never sent in clear")
    if opts.get("console_tls"):
        if "console_port" not in opts:
            raise Usage("--console-tls needs --console")
        if "tls_cert" not in opts:
            raise Usage("--console-tls needs --tls-cert")
    if "console_port" in opts and not _loopback(opts.get("console_host")):
        where = opts.get("console_host") or "every interface"
        if "auth_tokens" not in opts:
            raise BadValue("--console %s: without --auth-tokens the console serves loopback only "
                           "(give --auth-tokens FILE to sign in with a token, or use 127.0.0.1)" % where)
        if not opts.get("console_tls"):
            raise BadValue("--console %s: tokens are never sent in clear: add --console-tls" % where)
    if opts.get("health_auth") and not opts.get("metrics_auth"):
        raise Usage("--health-auth needs --metrics-auth")
    for flag in ("tls_key", "tls_ca", "auth_tokens", "tls_handshake_timeout",
                 "max_unauthenticated_per_address"):
        if flag in opts and "tls_cert" not in opts:
            raise Usage("--%s needs --tls-cert" % flag.replace("_", "-"))
    if "auth_timeout" in opts and "auth_tokens" not in opts:
        raise Usage("--auth-timeout needs --auth-tokens")
    if opts.get("auth_by_certificate") and ("auth_tokens" not in opts or "tls_ca" not in opts):
        raise Usage("--auth-by-certificate needs --auth-tokens and --tls-ca (the CA that vouches "
                    "for the certificates' names)")
    # Listeners named by flags of fastbean's own replace the default one;
    # -l or -p asks for it again.
    named = opts.get("listen") or opts.get("tls_listen")
    opts["classic_listener"] = not named or "listen_addr" in opts or "port" in opts
    for flag in ("replicate_ca", "replicate_cert", "replicate_key", "replicate_auth_file"):
        if flag in opts and not opts.get("replicate"):
            raise Usage("--%s needs --replicate" % flag.replace("_", "-"))
    if "dead_letter_tube" in opts and not opts.get("retry_limit"):
        raise Usage("--dead-letter-tube needs --retry-limit")
    if opts.get("strict") and opts.get("retry_limit"):
        raise Usage("--retry-limit is a protocol extension, which --strict turns off")
    if "replicate_key" in opts and "replicate_cert" not in opts:
        raise Usage("--replicate-key needs --replicate-cert")
    if opts.get("replicate") and importlib.util.find_spec("nats") is None:
        raise ConfigError("--replicate needs the NATS client: pip install 'fastbean[ha]'")
    return Config(verbosity=verbosity, fsync=fsync, fsync_ms=fsync_ms, **opts)


def _check_readable_line(flag, path):
    # the replication reads the file when it connects: a missing one stops the start here
    try:
        with open(path, encoding="utf-8") as f:
            empty = not f.readline().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("%s %s: %s" % (flag, path, getattr(e, "strerror", None) or e),
                          EXIT_CONFIG) from None
    if empty:
        raise ConfigError("%s %s: nothing on its first line" % (flag, path), EXIT_CONFIG)


def _check_nats_tls(config):
    # the files are read again when replication connects: unusable ones stop the start here
    import ssl

    from fastbean.client import tls_context
    try:
        tls_context(config.replicate_ca, config.replicate_cert, config.replicate_key)
    except (OSError, ssl.SSLError) as e:
        files = " ".join(f for f in (config.replicate_ca, config.replicate_cert, config.replicate_key) if f)
        raise ConfigError("--replicate TLS files %s: %s" % (files, e.strerror or e.args[-1]),
                          EXIT_CONFIG) from None


def _console_class():
    # aiohttp and jinja2 only with --console, before -u: the node's start-up is unchanged without it
    try:
        from fastbean.console import Console
    except ImportError as e:
        raise ConfigError("--console needs aiohttp and jinja2 (%s): pip install fastbean" % e) from None
    return Console


def main(argv=None):
    logs.setup()
    warnings = []
    try:
        config = parse_args(sys.argv[1:] if argv is None else argv, warnings.append)
    except Usage as e:
        sys.stderr.write("fastbean: %s\n" % e)
        return e.status
    except ConfigError as e:
        event(logging.ERROR, "exit", "%(error)s", error=str(e), status=e.status)
        return e.status
    if config is None:
        for text in warnings:
            _warn(text)
        return 0
    logs.setup(config.log_format, config.verbosity)
    for text in warnings:
        _warn(text)
    event(logging.INFO, "start", "fastbean %(version)s starting, pid %(pid)d",
          version=__version__, pid=os.getpid())

    from fastbean import sockets
    signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)
    try:
        sockets.raise_nofile_limit()
        certificates = None
        if config.tls_cert is not None:
            # read before -u drops the rights a private key is usually kept under
            from fastbean.server.tls import Certificates
            certificates = Certificates(config.tls_cert, config.tls_key, config.tls_ca)
        if config.replicate_ca is not None or config.replicate_cert is not None:
            _check_nats_tls(config)
        if config.replicate_auth_file is not None:
            _check_readable_line("--replicate-auth-file", config.replicate_auth_file)
        auth = None
        if config.auth_tokens is not None:
            from fastbean.server.tokens import TokenAuth
            auth = TokenAuth(config.auth_tokens)
        if config.binlog_dir is not None:
            from fastbean.binlog.files import Directory
            Directory(config.binlog_dir).check()
        listeners = sockets.open_listeners(config)
        if certificates is None and any(tls for _, tls in listeners):
            raise ConfigError("an inherited socket is named \"%s\": it needs --tls-cert (and "
                              "--tls-key)" % sockets.TLS_FD_NAME)
        if auth is not None and not config.metrics_auth and config.console_port is None \
                and not any(tls for _, tls in listeners):
            raise ConfigError("--auth-tokens: nothing asks for them (tokens are asked on "
                              "--tls-listen listeners and with --metrics-auth, so they never "
                              "cross the network in clear)")
        if certificates is not None and not config.metrics_tls and not config.console_tls \
                and not any(tls for _, tls in listeners):
            raise ConfigError("--tls-cert: no listener speaks TLS (add --tls-listen ADDR or "
                              "--metrics-tls, or name an inherited socket \"%s\")" % sockets.TLS_FD_NAME)
        metrics_sock = None
        if config.metrics_port is not None:
            metrics_sock = sockets.open_metrics(config)
        console_sock = None
        if config.console_port is not None:
            console_sock = sockets.open_console(config)
        # asyncio, uvloop, the engine (and nats): after binding, so that
        # clients can connect meanwhile, and before -u, so that they load
        # even where the user cannot read the Python installation.
        from fastbean.server.server import preload, run
        preload(config)
        console = _console_class() if console_sock is not None else None
        if config.user:
            sockets.drop_privileges(config.user)
    except (ConfigError, BinlogError) as e:
        event(logging.ERROR, "exit", "%(error)s", error=str(e), status=e.status)
        return e.status
    return run(config, listeners, metrics_sock, certificates, auth, console_sock, console)


if __name__ == "__main__":
    sys.exit(main())
