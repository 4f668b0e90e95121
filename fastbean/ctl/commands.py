"""fastbean-ctl's commands but clear and their output: each takes the parsed
arguments and a connected client, prints, and returns the exit status."""
import base64
import collections
import json
import sys

from fastbean.client import NotFound, ServerError
from fastbean.ctl import top
from fastbean.ctl.defaults import EXIT_NOT_FOUND, EXIT_OK, PROG
from fastbean.ctl.defaults import count as _count

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
        job_id, body = client.peek_state(args.state)
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
    _say(args, "paused tube %s for %s" % (_quoted(args.tube), _count(args.seconds, "second"))
         if args.seconds else "tube %s is not paused any more" % _quoted(args.tube),
         {"tube": args.tube, "seconds": args.seconds})
    return EXIT_OK


def cmd_put(args, client):
    client.use(args.tube.encode())
    if args.key is None:
        job_id = client.put(args.body_bytes, args.pri, args.delay, args.ttr)
        _say(args, "inserted job %d into tube %s" % (job_id, _quoted(args.tube)),
             {"id": job_id, "tube": args.tube})
        return EXIT_OK
    try:
        job_id, state = client.put_unique(args.body_bytes, args.key, args.cooldown, args.pri,
                                          args.delay, args.ttr)
    except ServerError as e:
        if e.reply != b"BAD_FORMAT":
            raise
        raise ServerError("%s has no idempotency keys (beanstalkd, or fastbean --strict)"
                          % client.where, e.reply) from None
    if state is None:
        text = "inserted job %d into tube %s with key %s" % (job_id, _quoted(args.tube), args.key)
    elif state == "deleted":
        text = "not inserted: key %s was job %d's, deleted less than its cooldown ago" % (
            args.key, job_id)
    else:
        text = "not inserted: key %s is job %d's, %s in tube %s" % (
            args.key, job_id, state, _quoted(args.tube))
    _say(args, text, {"id": job_id, "tube": args.tube, "key": args.key, "existing": state})
    return EXIT_OK


def cmd_retry_limit(args, client):
    client.use(args.tube.encode())
    try:
        if args.default:
            limit, dead = client.retry_limit(default=True)
        else:
            limit, dead = client.retry_limit(args.limit, args.dead_letter)
    except ServerError as e:
        if e.reply != b"UNKNOWN_COMMAND":
            raise
        raise ServerError("%s has no retry limits (beanstalkd, or fastbean --strict)"
                          % client.where, e.reply) from None
    if not limit:
        text = "tube %s: no retry limit" % _quoted(args.tube)
    else:
        text = "tube %s: a job is %s once released or timed out %d times" % (
            _quoted(args.tube), "moved to tube %s" % _quoted(dead) if dead else "buried", limit)
    _say(args, text, {"tube": args.tube, "limit": limit, "dead_letter_tube": dead})
    return EXIT_OK


def _extension(client, call, what):
    """call(); a server without the extension (UNKNOWN_COMMAND) said plainly."""
    try:
        return call()
    except ServerError as e:
        if e.reply != b"UNKNOWN_COMMAND":
            raise
        raise ServerError("%s cannot %s (beanstalkd, or fastbean --strict)" % (client.where, what),
                          e.reply) from None


def cmd_move(args, client):
    try:
        _extension(client, lambda: client.move_job(args.id, args.tube), "move jobs")
    except NotFound as e:
        raise NotFound("job %d not found (or reserved: a worker holds it)" % args.id, e.reply) from None
    _say(args, "moved job %d to tube %s" % (args.id, _quoted(args.tube)),
         {"id": args.id, "tube": args.tube})
    return EXIT_OK


def cmd_priority(args, client):
    try:
        _extension(client, lambda: client.reprioritize_job(args.id, args.pri),
                   "change a job's priority")
    except NotFound as e:
        raise NotFound("job %d not found" % args.id, e.reply) from None
    _say(args, "job %d has priority %d" % (args.id, args.pri), {"id": args.id, "pri": args.pri})
    return EXIT_OK


def _delete_each(client, ids):
    """The ids of these that delete-each did not delete, or None from a server
    without it (beanstalkd, fastbean --strict). The first command fits in
    beanstalkd's 224-byte line, so that such a server answers it with one
    UNKNOWN_COMMAND; the next ones take 1000 ids each."""
    first, size = 0, len("delete-each\r\n")
    while first < len(ids) and size + len(" %d" % ids[first]) <= 224:
        size += len(" %d" % ids[first])
        first += 1
    try:
        missing = client.delete_each(ids[:first])
    except ServerError as e:
        if e.reply != b"UNKNOWN_COMMAND":
            raise
        return None
    for start in range(first, len(ids), 1000):
        missing += client.delete_each(ids[start:start + 1000])
    return missing


def cmd_delete(args, client):
    deleted, missing = [], []
    # one round trip where the server has delete-each, else one per id
    absent = _delete_each(client, args.ids)
    if absent is not None:
        # an id given n times and named m times was deleted at its first
        # occurrence if m < n; every later occurrence was not found
        left = collections.Counter(args.ids)
        left.subtract(collections.Counter(absent))
    for job_id in args.ids:
        if absent is not None:
            found = left[job_id] > 0
            left[job_id] = 0
        else:
            try:
                client.delete(job_id)
                found = True
            except NotFound:
                found = False
        if found:
            deleted.append(job_id)
        else:
            missing.append(job_id)
            _warn("job %d not found (or reserved by another client)" % job_id)
    _say(args, "\n".join("deleted job %d" % job_id for job_id in deleted),
         {"deleted": deleted, "not_found": missing})
    return EXIT_NOT_FOUND if missing else EXIT_OK


def cmd_top(args, connect):
    if args.json:
        return top.stream(connect, args.interval, args.iterations, sys.stdout)
    if not (sys.stdout.isatty() and sys.stdin.isatty()):
        raise UsageError("top needs a terminal (--json prints samples instead)")
    try:
        return top.run(connect, args.interval, args.iterations)
    except top.TerminalError as e:
        raise UsageError(e) from None


