"""fastbean-ctl clear: empty a tube with the standard commands only (peek and
delete, in pipelined rounds), against other clients taking jobs meanwhile."""
import sys
import time

from fastbean.client import PEEK_STATES, NotFound
from fastbean.ctl.commands import _count, _existing, _quoted, _say, _warn
from fastbean.ctl.defaults import (
    CLEAR_MAX_MISSES,
    EXIT_INTERRUPTED,
    EXIT_NOT_EMPTIED,
    EXIT_OK,
    PROGRESS_EVERY_S,
    RECOUNT_EVERY_S,
)


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


def ask(question, command):
    """question on stderr, the answer from stdin: True for y or yes."""
    sys.stderr.write(question + " [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not answer:
        sys.stderr.write("\n")
        _warn("no answer on stdin, nothing deleted (--yes %ss without asking)" % command)
        return False
    if answer.strip().lower() not in ("y", "yes"):
        _warn("cancelled, nothing deleted")
        return False
    return True


def _confirm(args, client, left):
    if left["reserved"]:
        sys.stderr.write("%s reserved by other clients cannot be deleted and will be "
                         "left.\n" % _count(left["reserved"], "job"))
    return ask("Delete %s (%d ready, %d delayed, %d buried) from tube %s on %s?" % (
        _count(_deletable(left), "job"), left["ready"], left["delayed"], left["buried"],
        _quoted(args.tube), client.where), "clear")


class Clearing:
    """Deletes a tube's jobs in `states` (ready, delayed and buried by default)
    with peek and delete."""

    def __init__(self, client, tube, total, states=PEEK_STATES):
        self.client, self.tube, self.states = client, tube, states
        self.total = total          # jobs to delete as last counted, for the progress bar
        self.deleted = self.missed = self.streak = 0
        self.progress = Progress(sys.stderr)
        self.recounted_at = time.monotonic()

    @property
    def gave_up(self):
        return self.streak >= CLEAR_MAX_MISSES

    def run(self):
        self.client.use(self.tube)
        found = True
        while found and not self.gave_up:
            # passes over the three states until one finds nothing: delayed jobs turn
            # ready, and other clients bury and release, while this runs
            found = False
            for state in self.states:
                try:
                    job = self.client.peek_state(state)
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
            left = _left(self.client.stats_tube(self.tube))
            self.total = self.deleted + sum(left[state] for state in self.states)
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
        _warn("gave up: other clients took %s in a row before they could be deleted"
              % _count(clearing.streak, "job"))
    left = _left(client.stats_tube(tube))
    text = "deleted %s from tube %s" % (_count(clearing.deleted, "job"), _quoted(args.tube))
    if sum(left.values()):
        text += "\nleft %s: %s" % (_count(sum(left.values()), "job"), ", ".join(
            "%d %s" % (n, "reserved by other clients" if state == "reserved" else state)
            for state, n in left.items() if n))
    _say(args, text, {"tube": args.tube, "deleted": clearing.deleted,
                      "missed": clearing.missed, "left": left})
    return EXIT_NOT_EMPTIED if sum(left.values()) else EXIT_OK


