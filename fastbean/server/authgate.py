"""The gate of a TLS listener with --auth-tokens: until a client sends
`auth <token>` with a token from the file, it is answered only that and
`quit`, and the engine does not know it exists. It has --auth-timeout
seconds from the end of its handshake to do so, and counts against
--max-unauthenticated-per-address until it has.

The gate reads in Python; once the client is in, the connection reads
straight into the engine as any other (uvloop's TLS layer looks up
data_received at every read, so the gate hands it over by replacing it),
unless its token's roles are short of admin: then its reads and replies go
through a rolefilter.RoleFilter.

With --auth-by-certificate, a client whose certificate (verified against
--tls-ca) names a line of the tokens file is in as that line at the end of
its handshake, with that line's roles and no `auth`: so clients that cannot
send `auth` (every beanstalk library but fastbean's) get roles through a
TLS proxy holding their certificate. A client whose certificate names no
line asks a token as any other.
"""
import logging

from fastbean.logs import event
from fastbean.server.protocol import TlsConnProtocol, TracingConnProtocol, peer_address, trace
from fastbean.server.rolefilter import RoleFilter

MAX_LINE = 224                  # beanstalkd's longest command line, CRLF included
MAX_REFUSED = 8                 # commands refused before auth, then the connection is closed
AUTHENTICATED = b"AUTHENTICATED\r\n"
NOT_AUTHENTICATED = b"NOT_AUTHENTICATED\r\n"


class AuthConnProtocol(TlsConnProtocol):
    """A connection to a TLS listener that asks for a token first."""

    __slots__ = ("_pending", "_deadline", "_refused", "_filter", "_engine_reads", "_filter_holds",
                 "client_name")

    def __init__(self, server):
        super().__init__(server)
        self._filter = None             # a RoleFilter once a token short of admin is in
        self._engine_reads = True       # what the engine last asked of reading
        self._filter_holds = False      # the filter holds commands: no reading whatever the engine asks
        self._pending = b""
        self._deadline = None
        self._refused = 0
        self.client_name = None         # the tokens file's name for the client, once it is in

    def handshaken(self, transport):
        # the handshake is done: now the token, unless the certificate names one
        self._transport = transport
        if self._address is None:
            self._address = peer_address(transport)
        if self._server.config.auth_by_certificate:
            found = self._server.auth.named(certificate_names(transport.get_extra_info("peercert")))
            if found is not None:
                self._admit(found, "certificate")
                return
        self.data_received = self._before_auth
        self._deadline = self._server.loop.call_later(self._server.config.auth_timeout, self._too_late)

    def _too_late(self):
        self._deadline = None
        event(logging.INFO, "auth-timeout", "%(address)s did not authenticate within %(timeout)gs",
              address=self._address, timeout=self._server.config.auth_timeout)
        self._transport.abort()

    def _before_auth(self, data):
        transport = self._transport
        self._pending += data
        while not transport.is_closing():
            end = self._pending.find(b"\r\n")
            if end < 0:
                if len(self._pending) >= MAX_LINE:
                    transport.write(b"BAD_FORMAT\r\n")
                    transport.close()
                return
            line, self._pending = self._pending[:end], self._pending[end + 2:]
            verb, _, token = line.partition(b" ")
            if line == b"quit":
                transport.close()
            elif verb != b"auth" or not token:
                self._refuse()
            else:
                self._check(token)
                if self._conn is not None:
                    return

    def _refuse(self):
        # A client that goes on without authenticating, and perhaps without
        # reading, must not fill the server's memory with refusals.
        self._transport.write(NOT_AUTHENTICATED)
        self._refused += 1
        if self._refused >= MAX_REFUSED:
            self._transport.close()

    def _check(self, token):
        auth = self._server.auth
        if auth.limited(self._address):
            # unheard: a guesser learns nothing, and costs no hashing
            self._transport.write(NOT_AUTHENTICATED)
            self._transport.close()
            return
        found = auth.check(token, self._address)
        if found is None:
            event(logging.WARNING, "auth-failed", "%(address)s sent a token that is not in "
                  "%(path)s", address=self._address, path=auth.path)
            self._refuse()
            return
        self._deadline.cancel()
        self._deadline = None
        self._transport.write(AUTHENTICATED)
        self._admit(found, "token")

    def _admit(self, found, by):
        name, roles = found
        self.client_name = name
        if self._server.verbosity >= 1:
            event(logging.DEBUG, "auth", "%(address)s authenticated as %(client)s"
                  + (" by certificate" if by == "certificate" else "") + " (%(roles)s)",
                  address=self._address, client=name, by=by, roles=str(roles))
        if not roles.admin:
            self._filter = RoleFilter(roles, name, self._address, self._server.core,
                                      self._server.config.max_job_size, self._server.loop.call_soon,
                                      self._filter_reading)
        rest, self._pending = self._pending, b""
        transport = self._transport
        # now the engine hears of the connection, and reads go straight to it
        # (an admin's) or through the filter of its roles
        self._server.authenticated(self)
        self._enter(transport)
        if self._filter is not None:
            self.data_received = self._filtered_reader()
        if rest and not transport.is_closing():
            self.data_received(rest)

    def _set_reading(self, on):
        # the engine's wish, unless the filter holds commands back
        self._engine_reads = on
        if not self._filter_holds:
            super()._set_reading(on)

    def _filter_reading(self, hold):
        self._filter_holds = hold
        super()._set_reading(self._engine_reads and not hold)

    def _writers(self, transport):
        write, writelines = super()._writers(transport)
        if self._filter is None:
            return write, writelines
        return self._filter.writers(self._conn, write, transport)

    def _filtered_reader(self):
        return self._filter.feed

    def connection_lost(self, exc):
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        super().connection_lost(exc)


def certificate_names(cert):
    """A verified client certificate's identities (ssl's getpeercert() form),
    in the order they are tried: the subject's common names, then the DNS
    and email subjectAltNames."""
    if not cert:
        return []
    names = [value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"]
    names += [value for kind, value in cert.get("subjectAltName", ()) if kind in ("DNS", "email")]
    return names


class TracingAuthConnProtocol(AuthConnProtocol, TracingConnProtocol):
    """-VV on a TLS listener with tokens (reads are logged once the client is in)."""

    __slots__ = ()

    def _filtered_reader(self):
        feed = self._filter.feed

        def traced_feed(data):
            trace("read", self._peer, data)
            feed(data)

        return traced_feed
