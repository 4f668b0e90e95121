"""fastbean-ctl jobs: the jobs of a tube in one state, in the order they leave
it, a page at a time with the server's list-tube (a fastbean extension; a
server without it answers UNKNOWN_COMMAND, which is reported as an error)."""
from fastbean.client import ServerError
from fastbean.ctl.commands import _existing, _quoted, _say, table
from fastbean.ctl.defaults import EXIT_OK, LIST_PAGE

COLUMNS = ("ID", "PRI", "AGE", "TIME-LEFT", "BYTES")
KEYS = ("id", "pri", "age", "time-left", "bytes")


def cmd_jobs(args, client):
    _existing(client, args.tube)
    client.use(args.tube)
    rows, cursor = [], "0"
    try:
        while len(rows) < args.limit:
            page, cursor = client.list_tube(args.state, cursor, min(LIST_PAGE, args.limit - len(rows)))
            rows += page
            if cursor == "0":
                break
    except ServerError as e:
        if e.reply == b"UNKNOWN_COMMAND":
            raise ServerError("%s has no list-tube (beanstalkd, or fastbean --strict): jobs "
                              "cannot be listed there" % client.where, e.reply) from None
        raise
    more = cursor != "0"
    text = table([COLUMNS] + rows, 0) if rows else "no %s jobs in tube %s" % (
        args.state, _quoted(args.tube))
    if more:
        text += "\n(more: --limit shows more than %d)" % args.limit
    _say(args, text, {"tube": args.tube, "state": args.state, "more": more,
                      "jobs": [dict(zip(KEYS, row)) for row in rows]})
    return EXIT_OK
