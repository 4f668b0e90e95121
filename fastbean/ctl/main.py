"""fastbean-ctl: the admin command line for any beanstalk-protocol server
(standard commands only, but for flush where the server has it, and
jobs): the arguments and the entry point."""
from __future__ import annotations

import argparse
import os
import socket
import ssl
import sys

from fastbean import __version__
from fastbean.client import (
    PEEK_STATES,
    Address,
    Client,
    ClientError,
    ConnectError,
    NotFound,
    ServerError,
    check_tube,
    tls_context,
)
from fastbean.ctl.clear import cmd_clear
from fastbean.ctl.commands import (
    UsageError,
    _warn,
    cmd_delete,
    cmd_kick,
    cmd_move,
    cmd_pause,
    cmd_peek,
    cmd_priority,
    cmd_put,
    cmd_retry_limit,
    cmd_stats,
    cmd_top,
    cmd_tubes,
)
from fastbean.ctl.defaults import (
    ADDR,
    EXIT_CONNECT,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_PROTOCOL,
    EXIT_SERVER_ERROR,
    EXIT_USAGE,
    JOBS_LIMIT,
    PORT,
    PROG,
    PUT_PRI,
    PUT_TTR_S,
    TIMEOUT_S,
    TOP_INTERVAL_S,
)
from fastbean.ctl.flush import cmd_flush
from fastbean.ctl.jobs import cmd_jobs
from fastbean.ctl.schedules import cmd_schedule

UINT32_MAX = (1 << 32) - 1

EPILOG = """\
-l, -p, --timeout, --json and the TLS options may also follow the command.

exit status:
  0  done
  1  not found: no such job or tube, or no job to peek
  2  usage: bad arguments (tube name, job id, number...)
  3  cannot connect to the server
  4  the server answered an error (OUT_OF_MEMORY, DRAINING, JOB_TOO_BIG...)
  5  the connection broke: closed or silent mid-reply, or the peer does not
     speak the beanstalk protocol
  6  clear or flush left jobs in the tube (reserved by other clients, put
     meanwhile), or the confirmation was declined
  130  interrupted
"""

class ArgParser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


# -- argument types: each raises ArgumentTypeError with the reason

def _uint(what, low=0, high=UINT32_MAX):
    def parse(text):
        if not text.isdigit() or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError("not %s: %r" % (what, text))
        return int(text)
    parse.__name__ = what
    return parse


def _positive_seconds(text):
    try:
        value = float(text)
    except ValueError:
        value = -1
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError("not a number of seconds above 0: %r" % text)
    return value


def _tube(text):
    try:
        check_tube(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _key(text):
    # an idempotency key as the server takes it
    raw = text.encode("utf-8", "surrogateescape")
    if not 1 <= len(raw) <= 200 or any(c <= 32 or c > 126 for c in raw):
        raise argparse.ArgumentTypeError(
            "not a key (1 to 200 printable ASCII characters, no spaces): %r" % text)
    return text


def _port(text):
    # like the server's -p: a number or a service name
    if text.isdigit():
        if not 0 < int(text) < 65536:
            raise argparse.ArgumentTypeError("not a port number: %r" % text)
        return int(text)
    try:
        return socket.getservbyname(text, "tcp")
    except OSError:
        raise argparse.ArgumentTypeError("unknown port: %r" % text) from None


JOB_ID = _uint("a job id", 1, (1 << 64) - 1)


def add_connection_options(common: argparse.ArgumentParser, json: bool = True) -> None:
    """-l, -p, --timeout, the TLS options and --auth-token-file (and --json):
    fastbean-ctl's connection options, which fastbean-worker takes too. Their
    defaults are COMMON_DEFAULTS, filled in after parsing (fill_defaults)."""
    common.add_argument("-l", dest="addr", metavar="ADDR", default=argparse.SUPPRESS,
                        help="server address, or unix:PATH for a UNIX socket "
                             "(default: %s)" % ADDR)
    common.add_argument("-p", dest="port", metavar="PORT", type=_port,
                        default=argparse.SUPPRESS,
                        help="server port, a number or a service name (default: %s)"
                             % PORT)
    common.add_argument("--timeout", metavar="SECONDS", type=_positive_seconds,
                        default=argparse.SUPPRESS,
                        help="give up connecting or waiting for a reply after SECONDS "
                             "(default: %g)" % TIMEOUT_S)
    if json:
        common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                            help="print JSON instead of text")
    tls = common.add_argument_group("TLS (a fastbean --tls-listen; any of these turns it on)")
    tls.add_argument("--tls", action="store_true", default=argparse.SUPPRESS,
                     help="connect over TLS, trusting the system's CA certificates")
    tls.add_argument("--tls-ca", metavar="FILE", default=argparse.SUPPRESS,
                     help="trust the CA certificates in FILE (PEM) instead")
    tls.add_argument("--tls-cert", metavar="FILE", default=argparse.SUPPRESS,
                     help="show this client certificate (PEM), for a server with --tls-ca")
    tls.add_argument("--tls-key", metavar="FILE", default=argparse.SUPPRESS,
                     help="the client certificate's key (default: in the --tls-cert file)")
    tls.add_argument("--tls-server-name", metavar="NAME", default=argparse.SUPPRESS,
                     help="the name the server's certificate must hold (default: the -l address)")
    tls.add_argument("--auth-token-file", metavar="FILE", default=argparse.SUPPRESS,
                     help="authenticate with the token in FILE (its first line), for a server "
                          "with --auth-tokens")


def fill_defaults(args: argparse.Namespace) -> None:
    """The connection options' defaults, for those not given."""
    for name, default in COMMON_DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, default)


def build_parser():
    common = argparse.ArgumentParser(add_help=False)
    add_connection_options(common)

    parser = ArgParser(prog=PROG, parents=[common], epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Inspect and manage a beanstalkd or fastbean server with "
                                   "the standard protocol commands (flush uses the server's "
                                   "flush-tube where it has one, jobs needs its list-tube).")
    parser.add_argument("--version", action="version", version="%s %s" % (PROG, __version__))
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name, func, help_text):
        sub = commands.add_parser(name, parents=[common], help=help_text,
                                  description=help_text[0].upper() + help_text[1:] + ".")
        sub.set_defaults(func=func)
        return sub

    command("stats", cmd_stats, "server statistics, one per line")

    sub = command("tubes", cmd_tubes, "one row of counts per tube")
    sub.add_argument("tubes", metavar="TUBE", nargs="*", type=_tube,
                     help="only these tubes (default: all)")

    sub = command("top", cmd_top, "live view of the tubes with rates per second (q quits, "
                                  "s changes the sort)")
    sub.add_argument("-i", "--interval", metavar="SECONDS", type=_positive_seconds,
                     default=TOP_INTERVAL_S,
                     help="seconds between refreshes (default: %g)" % TOP_INTERVAL_S)
    sub.add_argument("-n", "--iterations", metavar="N", type=_uint("a count", 1), default=0,
                     help="stop after N refreshes (with --json: N samples, one JSON object "
                          "per line)")

    sub = command("peek", cmd_peek, "show the next job of a tube in a state, and its stats")
    sub.add_argument("tube", metavar="TUBE", type=_tube)
    sub.add_argument("state", metavar="STATE", choices=PEEK_STATES,
                     help=", ".join(PEEK_STATES))
    sub.add_argument("--raw", action="store_true",
                     help="write only the job body, byte for byte")

    sub = command("jobs", cmd_jobs, "list a tube's jobs in a state, in the order they leave it "
                                    "(with the server's list-tube)")
    sub.add_argument("tube", metavar="TUBE", type=_tube)
    sub.add_argument("state", metavar="STATE", choices=PEEK_STATES + ("reserved",),
                     help=", ".join(PEEK_STATES + ("reserved",)))
    sub.add_argument("-n", "--limit", metavar="N", type=_uint("a count", 1), default=JOBS_LIMIT,
                     help="show at most N jobs (default: %d)" % JOBS_LIMIT)

    sub = command("kick", cmd_kick, "kick up to N buried jobs of a tube (delayed ones if it "
                                    "has no buried job) into the ready queue")
    sub.add_argument("tube", metavar="TUBE", type=_tube)
    sub.add_argument("bound", metavar="N", type=_uint("a count"))

    sub = command("pause", cmd_pause, "stop handing out a tube's jobs for SECONDS "
                                      "(0 ends a pause)")
    sub.add_argument("tube", metavar="TUBE", type=_tube)
    sub.add_argument("seconds", metavar="SECONDS", type=_uint("a number of seconds"))

    sub = command("put", cmd_put, "put a job; the body is BODY, or stdin without it (or with -)")
    sub.add_argument("body", metavar="BODY", nargs="?", default="-")
    sub.add_argument("-t", "--tube", type=_tube, default="default",
                     help="tube (default: default)")
    sub.add_argument("--pri", type=_uint("a priority"), default=PUT_PRI,
                     help="priority, 0 most urgent (default: %d)" % PUT_PRI)
    sub.add_argument("--delay", metavar="SECONDS", type=_uint("a number of seconds"), default=0,
                     help="seconds before the job is ready (default: 0)")
    sub.add_argument("--ttr", metavar="SECONDS", type=_uint("a number of seconds"),
                     default=PUT_TTR_S,
                     help="seconds a worker may hold the job (default: %d)" % PUT_TTR_S)
    sub.add_argument("--key", type=_key,
                     help="an idempotency key: no second job while one put with it is in the "
                          "tube (a fastbean and tuber extension)")
    sub.add_argument("--cooldown", metavar="SECONDS", type=_uint("a number of seconds"), default=0,
                     help="with --key: the key holds for this long after its job is deleted")

    sub = command("retry-limit", cmd_retry_limit,
                  "show or set how many releases and timeouts a tube's jobs get before they "
                  "are buried, or moved to a dead-letter tube (a fastbean extension)")
    sub.add_argument("tube", metavar="TUBE", type=_tube)
    sub.add_argument("limit", metavar="N", nargs="?", type=_uint("a count"),
                     help="the limit to set (0: none)")
    sub.add_argument("--dead-letter", metavar="TUBE", type=_tube,
                     help="move such jobs, ready, to this tube instead of burying them")
    sub.add_argument("--default", action="store_true",
                     help="go back to the server's default (--retry-limit)")

    sub = command("move", cmd_move, "move a ready, delayed or buried job to another tube, "
                                    "keeping its id, state and priority (a fastbean extension)")
    sub.add_argument("id", metavar="ID", type=JOB_ID)
    sub.add_argument("tube", metavar="TUBE", type=_tube)

    sub = command("priority", cmd_priority, "give a job a new priority, 0 most urgent, "
                                            "whatever its state (a fastbean extension)")
    sub.add_argument("id", metavar="ID", type=JOB_ID)
    sub.add_argument("pri", metavar="PRI", type=_uint("a priority"))

    sub = command("delete", cmd_delete, "delete jobs by id")
    sub.add_argument("ids", metavar="ID", nargs="+", type=JOB_ID)

    sub = command("clear", cmd_clear, "delete every ready, delayed and buried job of a tube, "
                                      "after a confirmation")
    sub.add_argument("tube", metavar="TUBE", type=_tube)
    sub.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")

    sub = command("flush", cmd_flush, "delete every job of a tube, reserved ones too, with the "
                                      "server's flush-tube, after a confirmation (on a server "
                                      "without it, as clear does)")
    sub.add_argument("tube", metavar="TUBE", type=_tube)
    sub.add_argument("--buried", action="store_true",
                     help="only the buried jobs (flush-buried)")
    sub.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")

    sub = command("schedule", cmd_schedule, "recurring jobs the server puts itself (a fastbean "
                                            "extension): add, remove, list, run, pause, resume")
    actions = sub.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", parents=[common], help="add a schedule, or replace the one of that name")
    add.add_argument("name", metavar="NAME", type=_tube)
    add.add_argument("spec", metavar="SPEC",
                     help="'MIN HOUR DOM MON DOW [ZONE]' (cron) or 'every SECONDS', as one argument")
    add.add_argument("body", metavar="BODY", nargs="?", default="-",
                     help="the body of each job (default: stdin)")
    add.add_argument("-t", "--tube", type=_tube, default="default", help="tube (default: default)")
    add.add_argument("--pri", type=_uint("a priority"), default=PUT_PRI,
                     help="priority of its jobs (default: %d)" % PUT_PRI)
    add.add_argument("--ttr", metavar="SECONDS", type=_uint("a number of seconds"), default=PUT_TTR_S,
                     help="TTR of its jobs (default: %d)" % PUT_TTR_S)
    add.add_argument("--misfire", choices=("fire", "skip"), default="fire",
                     help="times missed while no server ran: fire once when one is back (default), "
                          "or skip them")
    actions.add_parser("list", parents=[common], help="every schedule, enabled or paused, with its "
                                                      "next and last firing")
    for name, help_text in (("remove", "remove a schedule (its jobs stay)"),
                            ("run", "put one job of the schedule now"),
                            ("pause", "stop firing the schedule"),
                            ("resume", "fire the schedule again from its next time")):
        one = actions.add_parser(name, parents=[common], help=help_text)
        one.add_argument("name", metavar="NAME", type=_tube)
    return parser


# -- entry point

COMMON_DEFAULTS = {"addr": ADDR, "port": PORT, "timeout": TIMEOUT_S,
                   "json": False, "tls": False, "tls_ca": None, "tls_cert": None, "tls_key": None,
                   "tls_server_name": None, "auth_token_file": None}
EXIT_FOR = [(UsageError, EXIT_USAGE), (NotFound, EXIT_NOT_FOUND),
            (ServerError, EXIT_SERVER_ERROR), (ConnectError, EXIT_CONNECT),
            (ClientError, EXIT_PROTOCOL)]


def address_of(addr: str, port: int) -> Address:
    """-l ADDR (unix:PATH for a UNIX socket, [IPv6] allowed) and -p PORT as a
    client's address: (host, port), or the socket's path."""
    if addr.startswith("unix:"):
        return addr[5:]
    return addr[1:-1] if addr.startswith("[") and addr.endswith("]") else addr, port


def tls_of(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The TLS context the --tls* options ask for, or None."""
    if not (args.tls or args.tls_ca or args.tls_cert or args.tls_key or args.tls_server_name):
        return None
    if args.tls_key and not args.tls_cert:
        raise UsageError("--tls-key needs --tls-cert")
    try:
        return tls_context(args.tls_ca, args.tls_cert, args.tls_key)
    except OSError as e:        # ssl.SSLError too: a file that is not PEM, a key that does not match
        files = " ".join(f for f in (args.tls_ca, args.tls_cert, args.tls_key) if f)
        raise UsageError("cannot use the TLS files %s: %s" % (files, e.strerror or e.args[-1])) from None


def token_of(args: argparse.Namespace) -> str | None:
    """The token in --auth-token-file (kept out of the command line, where ps shows it)."""
    if args.auth_token_file is None:
        return None
    try:
        with open(args.auth_token_file, encoding="utf-8") as f:
            token = f.readline().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError("--auth-token-file %s: %s" % (args.auth_token_file,
                                                      getattr(e, "strerror", None) or e)) from None
    if not token or " " in token:
        raise UsageError("--auth-token-file %s: no token on its first line" % args.auth_token_file)
    return token


def main(argv=None):
    try:
        try:
            args = build_parser().parse_args(argv)
            # the connection options may come before or after the command, so their
            # defaults are filled in here rather than by either parser
            fill_defaults(args)
            if args.command == "put":
                args.body_bytes = (sys.stdin.buffer.read() if args.body == "-"
                                   else os.fsencode(args.body))

            tls = tls_of(args)
            token = token_of(args)

            def connect():
                return Client(address_of(args.addr, args.port), args.timeout, tls=tls,
                              server_hostname=args.tls_server_name, token=token)

            if args.func is cmd_top:
                return cmd_top(args, connect)
            with connect() as client:
                return args.func(args, client)
        except UsageError as e:
            _warn("%s (see %s -h)" % (e, PROG))
            return EXIT_USAGE
        except ClientError as e:
            _warn(e)
            return next(status for kind, status in EXIT_FOR if isinstance(e, kind))
        except KeyboardInterrupt:
            _warn("interrupted")
            return EXIT_INTERRUPTED
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        # the reader of our output went away (`| head`): leave quietly, like cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

