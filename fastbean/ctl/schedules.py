"""fastbean-ctl schedule: the server's recurring jobs (a fastbean extension):
add or replace, remove, list, run one now, pause and resume."""
import sys
import time

from fastbean.client import ServerError
from fastbean.ctl.commands import _quoted, _say, table
from fastbean.ctl.defaults import EXIT_OK

COLUMNS = [             # (header, list-schedules key)
    ("NAME", "name"), ("TUBE", "tube"), ("SPEC", "spec"), ("MISFIRE", "misfire"),
    ("STATE", "paused"), ("NEXT", "next"), ("LAST", "last"), ("FIRES", "fires"), ("RUNS", "runs"),
]


def _when(t):
    return "-" if not t else time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(t))


def _no_schedules(client, err):
    if err.reply != b"UNKNOWN_COMMAND":
        return err
    return ServerError("%s has no schedules (beanstalkd, or fastbean --strict)" % client.where, err.reply)


def cmd_schedule(args, client):
    try:
        return _run(args, client)
    except ServerError as e:
        raise _no_schedules(client, e) from None


def _run(args, client):
    action = args.action
    if action == "list":
        rows = client.list_schedules()
        lines = [[h for h, _ in COLUMNS]] + [
            [s["name"], s["tube"], s["spec"], s["misfire"], "paused" if s["paused"] else "enabled",
             _when(s["next"]), _when(s["last"]), s["fires"], s["runs"]] for s in rows]
        _say(args, table(lines, right_from=7) if rows else "no schedules", rows)
    elif action == "add":
        body = args.body.encode() if args.body != "-" else sys.stdin.buffer.read()
        client.use(args.tube.encode())
        new = client.schedule(args.name, body, args.spec, args.pri, args.ttr, args.misfire)
        _say(args, "schedule %s %s: %s in tube %s" % (
            _quoted(args.name), "added" if new else "replaced", args.spec, _quoted(args.tube)),
            {"name": args.name, "new": new})
    elif action == "remove":
        client.unschedule(args.name)
        _say(args, "schedule %s removed" % _quoted(args.name), {"name": args.name, "removed": True})
    elif action == "run":
        jid = client.fire_schedule(args.name)
        _say(args, "schedule %s: job %d" % (_quoted(args.name), jid), {"name": args.name, "id": jid})
    elif action == "pause":
        client.pause_schedule(args.name)
        _say(args, "schedule %s paused" % _quoted(args.name), {"name": args.name, "paused": True})
    else:
        client.resume_schedule(args.name)
        _say(args, "schedule %s resumed" % _quoted(args.name), {"name": args.name, "paused": False})
    return EXIT_OK
