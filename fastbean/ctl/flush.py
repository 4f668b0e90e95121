"""fastbean-ctl flush: empty a tube with one command, the server's flush-tube
(flush-buried with --buried). A server without them (beanstalkd, fastbean
--strict) answers UNKNOWN_COMMAND: then the jobs are deleted with peek and
delete as clear does, which cannot reach jobs reserved by other clients, and
the tool says so."""
from fastbean.client import PEEK_STATES, NotFound, ServerError
from fastbean.ctl.clear import Clearing, _left, ask
from fastbean.ctl.commands import _count, _existing, _quoted, _say, _warn
from fastbean.ctl.defaults import EXIT_INTERRUPTED, EXIT_NOT_EMPTIED, EXIT_OK

ALL_STATES = PEEK_STATES + ("reserved",)


def _states(args):
    return ("buried",) if args.buried else ALL_STATES


def _describe(left, states):
    return "%s (%s)" % (_count(sum(left[s] for s in states), "job"),
                        ", ".join("%d %s" % (left[s], s) for s in states))


def _by_peek_and_delete(args, client, command, left):
    """The fallback: clear's peek and delete over the states it can reach.
    Returns the jobs deleted, or None if interrupted."""
    _warn("%s has no %s (beanstalkd, or fastbean --strict): deleting with peek and delete, "
          "which leaves jobs reserved by other clients" % (client.where, command))
    states = ("buried",) if args.buried else PEEK_STATES
    clearing = Clearing(client, args.tube.encode(), sum(left[s] for s in states), states)
    try:
        clearing.run()
    except KeyboardInterrupt:
        clearing.progress.draw(clearing.deleted, clearing.total, final=True)
        _warn("interrupted after deleting %s from tube %s" % (
            _count(clearing.deleted, "job"), _quoted(args.tube)))
        return None
    return clearing.deleted


def cmd_flush(args, client):
    states = _states(args)
    command = "flush-buried" if args.buried else "flush-tube"
    left = _left(_existing(client, args.tube))
    if sum(left[s] for s in states) and not args.yes and not ask(
            "Delete %s from tube %s on %s?" % (_describe(left, states), _quoted(args.tube),
                                               client.where), "flush"):
        return EXIT_NOT_EMPTIED
    try:
        flushed = client.flush_buried(args.tube) if args.buried else client.flush_tube(args.tube)
        how = "with the server's %s" % command
    except ServerError as e:
        if e.reply != b"UNKNOWN_COMMAND":
            raise
        flushed = _by_peek_and_delete(args, client, command, left)
        if flushed is None:
            return EXIT_INTERRUPTED
        how = "with peek and delete"
    try:
        left = _left(client.stats_tube(args.tube.encode()))
    except NotFound:                # emptied and unused: the tube is gone
        left = dict.fromkeys(ALL_STATES, 0)
    text = "flushed %s from tube %s %s" % (_count(flushed, "job"), _quoted(args.tube), how)
    remaining = sum(left[s] for s in states)
    if remaining:
        text += "\nleft %s" % _describe(left, [s for s in states if left[s]])
    _say(args, text, {"tube": args.tube, "flushed": flushed, "server_side": how.endswith(command),
                      "left": left})
    return EXIT_NOT_EMPTIED if remaining else EXIT_OK
