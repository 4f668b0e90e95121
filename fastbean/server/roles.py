"""Roles of a token (--auth-tokens): what a client may do, on which tubes.

A line of the tokens file may name roles after the hash, `ROLE[:PATTERN,...]`,
each pattern a shell-style glob on tube names (`*` when none is given). A
line without roles is an admin, so files written before roles keep their
meaning. The verdict on each command is given here; rolefilter.py applies
it to a connection's stream.
"""
import fnmatch
import re

PRODUCER, WORKER, MONITOR, ADMIN = "producer", "worker", "monitor", "admin"
ROLES = (PRODUCER, WORKER, MONITOR, ADMIN)
# the bytes of tube names (beanstalkd's), and the glob's own
PATTERN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-+/;.$_()*?[]!")

ALLOW, DENY, HIDE = "allow", "deny", "hide"     # HIDE: answer as if the job did not exist

# commands about the connection itself, which every role may send
OWN_STATE = frozenset(("list-tube-used", "list-tubes-watched", "quit"))
# commands on a job given by id, and the role that may send them
BY_ID = {"reserve-job": WORKER, "delete": WORKER, "release": WORKER, "bury": WORKER,
         "touch": WORKER, "peek": MONITOR, "stats-job": MONITOR}
PEEK_USED = frozenset(("peek-ready", "peek-delayed", "peek-buried"))


def parse_roles(words):
    """Roles from the words after a line's hash; ValueError saying what is wrong."""
    globs = {}
    for word in words:
        role, colon, listed = word.partition(":")
        if role not in ROLES:
            raise ValueError("%r is not a role (%s)" % (role, ", ".join(ROLES)))
        if role == ADMIN and colon:
            raise ValueError("admin takes no tube patterns")
        patterns = listed.split(",") if colon else ["*"]
        for pattern in patterns:
            if not pattern or not set(pattern) <= PATTERN_CHARS:
                raise ValueError("%r is not a tube pattern" % pattern)
        globs.setdefault(role, []).extend(patterns)
    return Roles(globs)


class Roles:
    """The roles of one token, and the verdict on each command it sends."""

    __slots__ = ("admin", "globs", "_match")

    def __init__(self, globs):
        self.globs = globs                      # role -> [pattern]; no roles at all: admin
        self.admin = not globs or ADMIN in globs
        # one regular expression per role, matching a whole tube name
        self._match = {role: re.compile("|".join(fnmatch.translate(p) for p in patterns)).match
                       for role, patterns in globs.items() if role != ADMIN}

    def __str__(self):
        if self.admin:
            return ADMIN
        return " ".join("%s:%s" % (role, ",".join(self.globs[role])) for role in ROLES
                        if role in self.globs)

    def allows(self, role, tube):
        """tube (bytes) is one of role's tubes for this token."""
        match = self._match.get(role)
        return match is not None and match(tube.decode("ascii", "replace")) is not None

    def sees_server(self):
        """May read what describes the whole server (stats, list-tubes, /metrics)."""
        return self.admin or MONITOR in self.globs

    def verdict(self, command, arg, used, watched, job_tube):
        """ALLOW, DENY or HIDE for a command (its parser name) with its tube or
        job id arg; used and watched are the connection's tubes, job_tube(id)
        the tube of a job (None if there is none)."""
        if command in OWN_STATE:
            return ALLOW
        if command == "put":
            return ALLOW if self.allows(PRODUCER, used) else DENY
        if command == "use":
            return ALLOW if self.allows(PRODUCER, arg) or self.allows(MONITOR, arg) else DENY
        if command in ("reserve", "reserve-with-timeout", "reserve-batch"):
            # every watched tube: default too, which a worker must ignore if it is not its own
            ok = WORKER in self.globs and all(self.allows(WORKER, tube) for tube in watched)
            return ALLOW if ok else DENY
        if command == "watch":
            return ALLOW if self.allows(WORKER, arg) else DENY
        if command == "ignore":
            # watching less gives nothing away, and is how a worker leaves default
            return ALLOW if WORKER in self.globs else DENY
        role = BY_ID.get(command)
        if role is not None:
            if role not in self.globs:
                return DENY
            tube = job_tube(arg)
            return ALLOW if tube is not None and self.allows(role, tube) else HIDE
        if command in PEEK_USED or command == "list-tube":
            return ALLOW if self.allows(MONITOR, used) else DENY
        if command == "retry-limit" and arg == 0:
            # showing the used tube's limit is a monitor's; setting it an admin's
            return ALLOW if self.allows(MONITOR, used) else DENY
        if command == "stats-tube":
            return ALLOW if self.allows(MONITOR, arg) else DENY
        if command in ("stats", "list-tubes", "list-schedules"):
            return ALLOW if self.sees_server() else DENY
        # kick, kick-job, pause-tube, flush-tube, flush-buried, fastbean-stats,
        # retry-limit that sets; delete-batch, whose ids would each need their
        # tube judged; move-job, which touches two tubes (the job's and the
        # one named), and reprioritize-job, on jobs any worker may hold;
        # schedule, unschedule, fire-schedule, pause-schedule and
        # resume-schedule: admin only
        return DENY
