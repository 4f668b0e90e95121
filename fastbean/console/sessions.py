"""Sign-in, sessions and CSRF tokens.

A session is a random id in an HttpOnly, SameSite=Strict cookie (Secure
over https), held in memory until it has been idle for SESSION_IDLE seconds
or is SESSION_MAX seconds old. Each has its own CSRF token, which every
form posts back and which is compared in constant time. With --auth-tokens
a session begins with a token of the file (checked as `auth` checks it);
without, everyone on loopback gets an admin's session on first sight.
"""
import hmac
import secrets
import time

from fastbean.server.roles import MONITOR, Roles

COOKIE = "fastbean_console"
SESSION_IDLE = 3600.0       # seconds a session lasts unused
SESSION_MAX = 12 * 3600.0   # seconds a session lasts at most
MAX_SESSIONS = 4096         # beyond, the least recently used go
LOCAL = "local"             # the name of everyone's session without --auth-tokens


class Session:
    __slots__ = ("id", "name", "roles", "csrf", "born", "used", "search", "flash")

    def __init__(self, name, roles):
        self.id = secrets.token_urlsafe(32)
        self.csrf = secrets.token_urlsafe(32)
        self.name = name            # the token's name in the file, or LOCAL
        self.roles = roles          # roles.Roles
        self.born = self.used = time.monotonic()
        self.search = None          # the search running for it (search.Search), at most one
        self.flash = None           # (ok, text) the last action said, for the next page

    def sees(self, tube):
        """tube (bytes) may be shown: an admin's, or one of a monitor's globs."""
        return self.roles.admin or self.roles.allows(MONITOR, tube)

    @property
    def acts(self):
        """Action forms are offered: an admin, or a role that may change jobs on some tubes."""
        return self.roles.admin or any(role != MONITOR for role in self.roles.globs)

    def csrf_ok(self, given):
        return isinstance(given, str) and hmac.compare_digest(given.encode(), self.csrf.encode())


class Sessions:
    def __init__(self):
        self._by_id = {}            # id -> Session, least recently used first

    def __len__(self):
        return len(self._by_id)

    def new(self, name, roles=None):
        session = Session(name, roles if roles is not None else Roles({}))
        while len(self._by_id) >= MAX_SESSIONS:
            oldest = next(iter(self._by_id))
            self.end(oldest)
        self._by_id[session.id] = session
        return session

    def get(self, sid):
        """The live session of cookie value sid, or None."""
        session = self._by_id.pop(sid, None) if sid else None
        if session is None:
            return None
        now = time.monotonic()
        if now - session.used > SESSION_IDLE or now - session.born > SESSION_MAX:
            self._ended(session)
            return None
        session.used = now
        self._by_id[sid] = session      # most recently used last
        return session

    def end(self, sid):
        session = self._by_id.pop(sid, None)
        if session is not None:
            self._ended(session)

    def clear(self):
        for sid in list(self._by_id):
            self.end(sid)

    @staticmethod
    def _ended(session):
        if session.search is not None:
            session.search.cancel()
            session.search = None
