"""Token authentication (--auth-tokens): the tokens file, the check of a
token in constant time, and the limit on failed attempts per client address.

The file holds one client per line, `NAME SHA256 [ROLE[:PATTERN,...] ...]`:
a name for the log, the SHA-256 of its token in hex, never the token
itself, and its roles (roles.py; none: an admin). With
--auth-by-certificate, a client certificate that names a line (its subject
CN, or a DNS or email subjectAltName) stands for that line's token. Tokens are random
secrets (32 bytes from a CSPRNG, say), so a plain hash is as hard to reverse
as the token is to guess; a slow password hash would only slow every login.
"""
import collections
import hashlib
import hmac
import logging
import time

from fastbean.errors import EXIT_CONFIG, ConfigError
from fastbean.logs import event
from fastbean.server.roles import parse_roles

EXIT_BAD_TOKENS = EXIT_CONFIG     # an unusable tokens file stops the start, as a bad certificate does
MAX_FAILURES = 5                # failed attempts per client address within FAILURE_WINDOW ...
FAILURE_WINDOW = 60.0           # ... seconds, after which its attempts are refused until they age out
MAX_TRACKED = 65536             # client addresses remembered; beyond, the oldest are forgotten
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.@")


def digest(token):
    """What the tokens file holds for token (bytes): its SHA-256, in hex."""
    return hashlib.sha256(token).hexdigest()


def read_tokens(path):
    """[(name, digest bytes, roles.Roles)] from the tokens file; ConfigError,
    naming the line, for anything else."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("--auth-tokens %s: %s" % (path, getattr(e, "strerror", None) or e),
                          EXIT_BAD_TOKENS) from None
    tokens = []
    for number, line in enumerate(lines, 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) < 2 or not set(words[0]) <= NAME_CHARS or len(words[1]) != 64:
            raise ConfigError("--auth-tokens %s line %d: not NAME SHA256-HEX [ROLE...]" % (path, number),
                              EXIT_BAD_TOKENS)
        try:
            hashed = bytes.fromhex(words[1])
        except ValueError:
            raise ConfigError("--auth-tokens %s line %d: the hash is not hex" % (path, number),
                              EXIT_BAD_TOKENS) from None
        try:
            roles = parse_roles(words[2:])
        except ValueError as e:
            raise ConfigError("--auth-tokens %s line %d: %s" % (path, number, e), EXIT_BAD_TOKENS) from None
        tokens.append((words[0], hashed, roles))
    if not tokens:
        raise ConfigError("--auth-tokens %s: no token in it" % path, EXIT_BAD_TOKENS)
    return tokens


class TokenAuth:
    """The tokens a TLS listener accepts, and who failed how often."""

    def __init__(self, path):
        self.path = path
        self._tokens = read_tokens(path)
        self._failures = collections.OrderedDict()     # address -> deque of failure times

    def __len__(self):
        return len(self._tokens)

    def check(self, token, address):
        """(name, roles.Roles) of the line whose token this is, or None. Every
        stored hash is compared, each in constant time, so the answer's timing
        tells nothing of the tokens."""
        given = hashlib.sha256(token).digest()
        found = None
        for name, stored, roles in self._tokens:
            if hmac.compare_digest(given, stored):
                found = (name, roles)
        if found is None:
            self._failed(address)
        return found

    def named(self, names):
        """(name, roles.Roles) of the first of names (a client certificate's
        identities, --auth-by-certificate) that names a line, or None."""
        lines = {name: roles for name, _, roles in self._tokens}
        for name in names:
            if name in lines:
                return name, lines[name]
        return None

    def limited(self, address):
        """Too many failures from address lately: refuse its attempts unheard."""
        times = self._failures.get(address)
        if times is None:
            return False
        horizon = time.monotonic() - FAILURE_WINDOW
        while times and times[0] < horizon:
            times.popleft()
        if not times:
            del self._failures[address]
            return False
        return len(times) >= MAX_FAILURES

    def _failed(self, address):
        times = self._failures.pop(address, None)
        if times is None:
            times = collections.deque(maxlen=MAX_FAILURES)
            if len(self._failures) >= MAX_TRACKED:
                self._failures.popitem(last=False)
        times.append(time.monotonic())
        self._failures[address] = times        # the most recent last: the oldest go first
        if len(times) == MAX_FAILURES:
            event(logging.WARNING, "auth-limited", "%(address)s failed to authenticate %(failures)d "
                  "times in %(window)gs: its attempts are refused for a while", address=address,
                  failures=MAX_FAILURES, window=FAILURE_WINDOW)

    def reload(self):
        """Read the file again (SIGHUP): a token taken out of it is refused from
        now on (connections already in stay in). A file that cannot be used
        leaves the old tokens: True if the new ones were taken."""
        try:
            self._tokens = read_tokens(self.path)
        except ConfigError as e:
            event(logging.ERROR, "auth-reload-failed", "tokens not reloaded, the old ones still "
                  "serve: %(error)s", error=str(e))
            return False
        event(logging.INFO, "auth-reloaded", "tokens reloaded from %(path)s: %(count)d",
              count=len(self._tokens), path=self.path)
        return True
