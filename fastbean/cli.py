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
from fastbean.config import HANDLED_SIGNALS, Config
from fastbean.errors import EXIT_CONFIG, BinlogError, ConfigError
from fastbean.logs import event
from fastbean.options import BY_FLAG, USAGE, Usage


class BadValue(ConfigError):
    """A bad value of one of fastbean's own options: one line, exit 5."""


def _warn(text):
    event(logging.WARNING, "flag", text)


def parse_args(argv, warn=_warn):
    """argv (without the program name) -> Config. Raises ConfigError/Usage;
    returns None when the job is done (-h, -v). Warnings go to warn(text)."""
    opts = {}
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg.startswith("--") and len(arg) > 2:
            flag, eq, value = arg.partition("=")
            option = BY_FLAG.get(flag)
            if option is None:
                raise Usage("unknown option: %s" % arg)
            if not option.takes_value:
                if eq:
                    raise Usage("%s takes no value" % flag)
                value = None
            elif not eq:
                if i >= len(args):
                    raise Usage("%s requires an argument" % flag)
                value = args[i]
                i += 1
            try:
                option.store(opts, value, warn, flag)
            except Usage as e:
                raise BadValue("%s (fastbean --help lists the options)" % e) from None
        elif not arg.startswith("-") or arg == "-":
            raise Usage("unknown argument: %s" % arg)
        else:
            # beanstalkd's flags combine (-Vb DIR); a value is the rest of the
            # word, or else the whole next word (even "-p")
            j = 1
            while j < len(arg) and "_done" not in opts:
                flag = "-" + arg[j]
                j += 1
                option = BY_FLAG.get(flag)
                if option is None or not option.short:
                    raise Usage("unknown flag: %s" % flag)
                value = None
                if option.takes_value:
                    if j < len(arg):
                        value, j = arg[j:], len(arg)
                    elif i < len(args):
                        value = args[i]
                        i += 1
                    else:
                        raise Usage("flag %s requires an argument" % flag)
                option.store(opts, value, warn, flag)
        done = opts.pop("_done", None)
        if done is not None:
            if done in ("-v", "--version"):
                sys.stdout.write("fastbean %s\n" % __version__)
            else:
                (sys.stderr if done == "-h" else sys.stdout).write(USAGE)
            return None
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
    if opts.get("health_auth") and not opts.get("metrics_auth"):
        raise Usage("--health-auth needs --metrics-auth")
    _check_console(opts)
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
    return Config(**opts)


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


def _check_console(opts):
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


def _console_class():
    # aiohttp and jinja2 only with --console, before -u: the node's start-up is unchanged without it
    try:
        from fastbean.console import Console
    except ImportError as e:
        raise ConfigError("--console needs aiohttp and jinja2 (%s): pip install fastbean" % e) from None
    return Console


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
