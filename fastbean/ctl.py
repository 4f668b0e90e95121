"""fastbean-ctl: the admin command line for any beanstalk-protocol server (standard commands only)."""
import argparse
import base64
import json
import os
import socket
import sys
import time

from fastbean import __version__, ctltop
from fastbean.client import PEEK_STATES, Client, ClientError, ConnectError, NotFound, ServerError, check_tube
from fastbean.config import (
    CTL_ADDR,
    CTL_CLEAR_MAX_MISSES,
    CTL_PUT_PRI,
    CTL_PUT_TTR_S,
    CTL_TIMEOUT_S,
    CTL_TOP_INTERVAL_S,
    DEFAULT_PORT,
)

PROG = "fastbean-ctl"
UINT32_MAX = (1 << 32) - 1
PROGRESS_EVERY_S = 0.1         # redraw the clear progress bar at most this often
RECOUNT_EVERY_S = 0.5          # and ask the server how many jobs remain this often

# Exit statuses, documented in the README and in --help.
EXIT_OK = 0
EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
EXIT_CONNECT = 3
EXIT_SERVER_ERROR = 4
EXIT_PROTOCOL = 5
EXIT_NOT_EMPTIED = 6
EXIT_INTERRUPTED = 130

EPILOG = """\
-l, -p, --timeout and --json may also follow the command.

exit status:
  0  done
  1  not found: no such job or tube, or no job to peek
  2  usage: bad arguments (tube name, job id, number...)
  3  cannot connect to the server
  4  the server answered an error (OUT_OF_MEMORY, DRAINING, JOB_TOO_BIG...)
  5  the connection broke: closed or silent mid-reply, or the peer does not
     speak the beanstalk protocol
  6  clear left jobs in the tube (reserved by other clients, put meanwhile),
     or the confirmation was declined
  130  interrupted
"""

TUBE_COLUMNS = [          # (header, stats-tube key)
    ("TUBE", "name"),
    ("READY", "current-jobs-ready"),
    ("URGENT", "current-jobs-urgent"),
    ("RESERVED", "current-jobs-reserved"),
    ("DELAYED", "current-jobs-delayed"),
    ("BURIED", "current-jobs-buried"),
    ("TOTAL", "total-jobs"),
    ("USING", "current-using"),
    ("WATCHING", "current-watching"),
    ("WAITING", "current-waiting"),
    ("PAUSE-LEFT", "pause-time-left"),
]


class UsageError(Exception):
    """Bad arguments: one line on stderr and exit status 2."""


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


def build_parser():
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-l", dest="addr", metavar="ADDR", default=argparse.SUPPRESS,
                        help="server address, or unix:PATH for a UNIX socket "
                             "(default: %s)" % CTL_ADDR)
    common.add_argument("-p", dest="port", metavar="PORT", type=_port,
                        default=argparse.SUPPRESS,
                        help="server port, a number or a service name (default: %s)"
                             % DEFAULT_PORT)
    common.add_argument("--timeout", metavar="SECONDS", type=_positive_seconds,
                        default=argparse.SUPPRESS,
                        help="give up connecting or waiting for a reply after SECONDS "
                             "(default: %g)" % CTL_TIMEOUT_S)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print JSON instead of text")

    parser = ArgParser(prog=PROG, parents=[common], epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Inspect and manage a beanstalkd or fastbean server with "
                                   "the standard protocol commands.")
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
                     default=CTL_TOP_INTERVAL_S,
                     help="seconds between refreshes (default: %g)" % CTL_TOP_INTERVAL_S)
    sub.add_argument("-n", "--iterations", metavar="N", type=_uint("a count", 1), default=0,
                     help="stop after N refreshes (with --json: N samples, one JSON object "
                          "per line)")

    sub = command("peek", cmd_peek, "show the next job of a tube in a state, and its stats")
    sub.add_argument("tube", metavar="TUBE", type=_tube)
    sub.add_argument("state", metavar="STATE", choices=PEEK_STATES,
                     help=", ".join(PEEK_STATES))
    sub.add_argument("--raw", action="store_true",
                     help="write only the job body, byte for byte")

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
    sub.add_argument("--pri", type=_uint("a priority"), default=CTL_PUT_PRI,
                     help="priority, 0 most urgent (default: %d)" % CTL_PUT_PRI)
    sub.add_argument("--delay", metavar="SECONDS", type=_uint("a number of seconds"), default=0,
                     help="seconds before the job is ready (default: 0)")
    sub.add_argument("--ttr", metavar="SECONDS", type=_uint("a number of seconds"),
                     default=CTL_PUT_TTR_S,
                     help="seconds a worker may hold the job (default: %d)" % CTL_PUT_TTR_S)

    sub = command("delete", cmd_delete, "delete jobs by id")
    sub.add_argument("ids", metavar="ID", nargs="+", type=JOB_ID)

    sub = command("clear", cmd_clear, "delete every ready, delayed and buried job of a tube, "
                                      "after a confirmation")
    sub.add_argument("tube", metavar="TUBE", type=_tube)
    sub.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    return parser


# -- output

def _say(args, text, data):
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif text:
        sys.stdout.write(text + "\n")


def _warn(message):
    sys.stderr.write("%s: %s\n" % (PROG, message))


def table(rows, right_from=None):
    """Rows of cells -> aligned lines; columns from `right_from` on are right-aligned."""
    rows = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right_from = len(widths) if right_from is None else right_from
    return "\n".join("  ".join(cell.rjust(w) if i >= right_from else cell.ljust(w)
                               for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
                     for row in rows)


def _quoted(tube):
    return "'%s'" % tube


def _count(n, noun):
    return "%d %s%s" % (n, noun, "" if n == 1 else "s")


def _no_tube(tube, err):
    return NotFound("tube %s not found" % _quoted(tube), err.reply)


def _printable(body):
    text = body.decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() or c in "\n\t" else "\\x%02x" % ord(c) for c in text)


# -- commands

def cmd_stats(args, client):
    stats = client.stats()
    _say(args, table([[k, _text(v)] for k, v in stats.items()]), stats)
    return EXIT_OK


def _text(value):
    return str(value).lower() if isinstance(value, bool) else str(value)


def cmd_tubes(args, client):
    names = args.tubes or client.list_tubes()
    stats = client.stats_tubes(names)
    missing = [name for name in names if name not in stats]
    for name in missing:
        _warn("tube %s not found" % _quoted(name))
    rows = [stats[name] for name in names if name in stats]
    lines = [[header for header, _ in TUBE_COLUMNS]]
    for s in rows:
        lines.append([s.get(key, "") if key != "pause-time-left" or s.get("pause") else "-"
                      for _, key in TUBE_COLUMNS])
    _say(args, table(lines, 1) if rows or not args.tubes else "", rows)
    return EXIT_NOT_FOUND if missing else EXIT_OK


def _existing(client, tube):
    """stats-tube for a tube the user named, NotFound with a plain message if absent."""
    try:
        return client.stats_tube(tube.encode())
    except NotFound as e:
        raise _no_tube(tube, e) from None


def cmd_peek(args, client):
    _existing(client, args.tube)
    client.use(args.tube.encode())
    try:
        job_id, body = client.peek(args.state)
    except NotFound as e:
        raise NotFound("no %s job in tube %s" % (args.state, _quoted(args.tube)), e.reply) \
            from None
    try:
        stats = client.stats_job(job_id)
    except NotFound:            # deleted or reserved since the peek: show what was seen
        stats = {"id": job_id, "tube": args.tube}
    if args.raw:
        sys.stdout.buffer.write(body)
        return EXIT_OK
    data = dict(stats)
    try:
        data["body"] = body.decode("utf-8")
    except UnicodeDecodeError:
        data["body"] = None
    data["body_base64"] = base64.b64encode(body).decode("ascii")
    rows = [[k, v] for k, v in stats.items()]
    rows.append(["body", _count(len(body), "byte")])
    out = table(rows)
    if body:                    # after a blank line; _say adds the last line break
        text = _printable(body)
        out += "\n\n" + (text[:-1] if text.endswith("\n") else text)
    _say(args, out, data)
    return EXIT_OK


def cmd_kick(args, client):
    _existing(client, args.tube)
    client.use(args.tube.encode())
    kicked = client.kick(args.bound)
    _say(args, "kicked %s in tube %s" % (_count(kicked, "job"), _quoted(args.tube)),
         {"tube": args.tube, "kicked": kicked})
    return EXIT_OK


def cmd_pause(args, client):
    try:
        client.pause_tube(args.tube.encode(), args.seconds)
    except NotFound as e:
        raise _no_tube(args.tube, e) from None
    _say(args, "paused tube %s for %d seconds" % (_quoted(args.tube), args.seconds)
         if args.seconds else "tube %s is not paused any more" % _quoted(args.tube),
         {"tube": args.tube, "seconds": args.seconds})
    return EXIT_OK


def cmd_put(args, client):
    client.use(args.tube.encode())
    job_id = client.put(args.body_bytes, args.pri, args.delay, args.ttr)
    _say(args, "inserted job %d into tube %s" % (job_id, _quoted(args.tube)),
         {"id": job_id, "tube": args.tube})
    return EXIT_OK


def cmd_delete(args, client):
    deleted, missing = [], []
    for job_id in args.ids:
        try:
            client.delete(job_id)
            deleted.append(job_id)
        except NotFound:
            missing.append(job_id)
            _warn("job %d not found (or reserved by another client)" % job_id)
    _say(args, "\n".join("deleted job %d" % job_id for job_id in deleted),
         {"deleted": deleted, "not_found": missing})
    return EXIT_NOT_FOUND if missing else EXIT_OK


class Progress:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal."""

    WIDTH = 30

    def __init__(self, stream):
        self.stream = stream
        self.on = stream.isatty()
        self.drawn_at = 0.0

    def draw(self, done, total, final=False):
        now = time.monotonic()
        if not self.on or (not final and now - self.drawn_at < PROGRESS_EVERY_S):
            return
        self.drawn_at = now
        total = max(total, done)
        frac = done / total if total else 1.0
        self.stream.write("\r[%-*s] %3d%%  %d/%d deleted" % (
            self.WIDTH, "#" * int(frac * self.WIDTH), int(frac * 100), done, total))
        if final:
            self.stream.write("\n")
        self.stream.flush()


def _left(stats):
    return {state: stats["current-jobs-" + state] for state in PEEK_STATES + ("reserved",)}


def _deletable(left):
    return sum(left[state] for state in PEEK_STATES)


def _confirm(args, client, left):
    if left["reserved"]:
        sys.stderr.write("%s reserved by other clients cannot be deleted and will be "
                         "left.\n" % _count(left["reserved"], "job"))
    sys.stderr.write("Delete %s (%d ready, %d delayed, %d buried) from tube %s on %s? [y/N] " % (
        _count(_deletable(left), "job"), left["ready"], left["delayed"], left["buried"],
        _quoted(args.tube), client.where))
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not answer:
        sys.stderr.write("\n")
        _warn("no answer on stdin, nothing deleted (--yes clears without asking)")
        return False
    if answer.strip().lower() not in ("y", "yes"):
        _warn("cancelled, nothing deleted")
        return False
    return True


class Clearing:
    """Deletes a tube's ready, delayed and buried jobs with peek and delete."""

    def __init__(self, client, tube, total):
        self.client, self.tube = client, tube
        self.total = total          # jobs to delete as last counted, for the progress bar
        self.deleted = self.missed = self.streak = 0
        self.progress = Progress(sys.stderr)
        self.recounted_at = time.monotonic()

    @property
    def gave_up(self):
        return self.streak >= CTL_CLEAR_MAX_MISSES

    def run(self):
        self.client.use(self.tube)
        found = True
        while found and not self.gave_up:
            # passes over the three states until one finds nothing: delayed jobs turn
            # ready, and other clients bury and release, while this runs
            found = False
            for state in PEEK_STATES:
                try:
                    job = self.client.peek(state)
                except NotFound:
                    continue
                found = True
                while job and not self.gave_up:
                    ok, job = self.client.delete_and_peek(job[0], state)
                    if ok:
                        self.deleted, self.streak = self.deleted + 1, 0
                    else:           # another client took it between our peek and delete
                        self.missed, self.streak = self.missed + 1, self.streak + 1
                    self.show()
        self.progress.draw(self.deleted, self.total, final=True)

    def show(self):
        if self.progress.on and time.monotonic() - self.recounted_at > RECOUNT_EVERY_S:
            self.recounted_at = time.monotonic()
            self.total = self.deleted + _deletable(_left(self.client.stats_tube(self.tube)))
        self.progress.draw(self.deleted, self.total)


def cmd_clear(args, client):
    tube = args.tube.encode()
    left = _left(_existing(client, args.tube))
    if _deletable(left) and not args.yes and not _confirm(args, client, left):
        return EXIT_NOT_EMPTIED
    clearing = Clearing(client, tube, _deletable(left))
    try:
        clearing.run()
    except KeyboardInterrupt:
        clearing.progress.draw(clearing.deleted, clearing.total, final=True)
        _warn("interrupted after deleting %s from tube %s" % (
            _count(clearing.deleted, "job"), _quoted(args.tube)))
        return EXIT_INTERRUPTED
    if clearing.gave_up:
        _warn("gave up: other clients took %d jobs in a row before they could be deleted"
              % clearing.streak)
    left = _left(client.stats_tube(tube))
    text = "deleted %s from tube %s" % (_count(clearing.deleted, "job"), _quoted(args.tube))
    if sum(left.values()):
        text += "\nleft %s: %s" % (_count(sum(left.values()), "job"), ", ".join(
            "%d %s" % (n, "reserved by other clients" if state == "reserved" else state)
            for state, n in left.items() if n))
    _say(args, text, {"tube": args.tube, "deleted": clearing.deleted,
                      "missed": clearing.missed, "left": left})
    return EXIT_NOT_EMPTIED if sum(left.values()) else EXIT_OK


def cmd_top(args, connect):
    if args.json:
        return ctltop.stream(connect, args.interval, args.iterations, sys.stdout)
    if not (sys.stdout.isatty() and sys.stdin.isatty()):
        raise UsageError("top needs a terminal (--json prints samples instead)")
    try:
        return ctltop.run(connect, args.interval, args.iterations)
    except ctltop.TerminalError as e:
        raise UsageError(e) from None


# -- entry point

COMMON_DEFAULTS = {"addr": CTL_ADDR, "port": int(DEFAULT_PORT), "timeout": CTL_TIMEOUT_S,
                   "json": False}
EXIT_FOR = [(UsageError, EXIT_USAGE), (NotFound, EXIT_NOT_FOUND),
            (ServerError, EXIT_SERVER_ERROR), (ConnectError, EXIT_CONNECT),
            (ClientError, EXIT_PROTOCOL)]


def main(argv=None):
    try:
        try:
            args = build_parser().parse_args(argv)
            # the connection options may come before or after the command, so their
            # defaults are filled in here rather than by either parser
            for name, default in COMMON_DEFAULTS.items():
                if not hasattr(args, name):
                    setattr(args, name, default)
            if args.command == "put":
                args.body_bytes = (sys.stdin.buffer.read() if args.body == "-"
                                   else os.fsencode(args.body))

            def connect():
                return Client(args.addr, args.port, args.timeout)

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
