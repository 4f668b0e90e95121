"""The HTTP endpoint (--metrics): /metrics (metrics.py), /healthz, /readyz.

It runs on the server's own event loop, between two loop turns. Its cost to
the queue is bounded: one request per connection per loop turn, at most
MAX_CONNECTIONS connections, and request heads, slow senders and slow
readers limited by size and time. A slow or malformed client gets a 4xx or
is closed, and cannot hold more than these.
"""
import asyncio
import base64
import binascii
import logging

from fastbean.logs import event
from fastbean.server.metrics import CONTENT_TYPE, exposition
from fastbean.server.rolefilter import DENIALS
from fastbean.sockets import describe

MAX_HEAD = 8192                 # bytes of request line + headers
REQUEST_TIMEOUT = 10.0          # seconds to send a whole request head (408 after)
IDLE_TIMEOUT = 60.0             # seconds a connection may send nothing (or not read its answer)
MAX_CONNECTIONS = 64            # more are answered 503 and closed
LINGER = 1.0                    # seconds to drop unread input after an answer that closes
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed", 408: "Request Timeout", 429: "Too Many Requests",
           431: "Request Header Fields Too Large",
           503: "Service Unavailable", 505: "HTTP Version Not Supported"}
PATHS = ("/metrics", "/healthz", "/readyz")
CHALLENGE = 'WWW-Authenticate: Bearer realm="fastbean"\r\nWWW-Authenticate: Basic realm="fastbean"\r\n'


def credentials_refused(auth, header, address, path="/metrics"):
    """None if the Authorization header holds a token of auth (Bearer TOKEN, or
    Basic with the token's name and the token as password, as Prometheus'
    basic_auth sends them); else the status to answer: 401, 403 for a token
    whose roles are not admin nor monitor (for /metrics: the health endpoints
    take any token), or 429 for an address over the limit of failures."""
    if auth.limited(address):
        return 429
    scheme, _, value = (header or b"").strip().partition(b" ")
    scheme = scheme.lower()
    value = value.strip()
    name = None
    if scheme == b"basic":
        try:
            name, sep, value = base64.b64decode(value, validate=True).partition(b":")
        except (binascii.Error, ValueError):
            sep = b""
        if not sep:
            scheme = b""
    if scheme not in (b"bearer", b"basic") or not value:
        return 401          # no credentials is no failed attempt
    found = auth.check(value, address)
    if found is None:
        event(logging.WARNING, "auth-failed", "%(address)s sent %(endpoint)s a token that is not in "
              "%(path)s", address=address, endpoint=path, path=auth.path)
        return 401
    if name is not None and name.decode("utf-8", "replace") != found[0]:
        return 401
    if path == "/metrics" and not found[1].sees_server():
        DENIALS.refused(found[0], address, "read /metrics", None)
        return 403
    return None


class Endpoint:
    """The listening socket and the connections of the HTTP endpoint."""

    def __init__(self, server, auth=None, health_auth=False):
        self.server = server
        self.auth = auth            # a tokens.TokenAuth /metrics asks for (--metrics-auth), or None
        self.health_auth = health_auth      # --health-auth: /healthz and /readyz ask for it too
        self.conns = set()
        self._srv = None

    async def start(self, sock, tls=None):
        """Serve on sock; over TLS with the SSLContext tls (--metrics-tls)."""
        options = {"ssl": tls, "ssl_handshake_timeout": self.server.config.tls_handshake_timeout} \
            if tls is not None else {}
        self._srv = await self.server.loop.create_server(lambda: HttpProtocol(self), sock=sock, **options)
        event(logging.INFO, "metrics", "metrics and health endpoints on %(scheme)s://%(address)s/",
              scheme="https" if tls is not None else "http", address=describe(sock))

    def close(self):
        if self._srv is not None:
            self._srv.close()
        for conn in list(self.conns):
            conn.abort()


class HttpProtocol(asyncio.Protocol):
    """One HTTP/1.x connection: GET or HEAD of PATHS, keep-alive, one request per loop turn."""

    def __init__(self, endpoint):
        self._ep = endpoint
        self._loop = endpoint.server.loop
        self._transport = None
        self._buf = b""
        self._timer = None
        self._closing = False
        self._write_paused = False
        self._queued = False
        self._read_paused = False
        self._address = None

    # -- transport callbacks

    def connection_made(self, transport):
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self._address = peer[0] if isinstance(peer, tuple) else "unix"
        if len(self._ep.conns) >= MAX_CONNECTIONS:
            self._respond(503, b"too many connections\n", close=True)
            return
        self._ep.conns.add(self)
        self._arm(IDLE_TIMEOUT)

    def data_received(self, data):
        if self._closing:
            return          # lingering after an answer that closes: dropped unread
        if not self._buf:
            self._arm(REQUEST_TIMEOUT)     # a request begins: it has this long to arrive
        self._buf += data
        if not self._queued:
            self._serve_one()

    def eof_received(self):
        if self._closing:
            self._transport.close()
        return False

    def connection_lost(self, exc):
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._ep.conns.discard(self)

    def pause_writing(self):
        self._write_paused = True
        self._update_reading()

    def resume_writing(self):
        self._write_paused = False
        self._update_reading()
        if self._buf and not self._queued and not self._closing:
            self._serve_one()

    def abort(self):
        self._closing = True
        if self._transport is not None:
            self._transport.abort()

    # -- requests

    def _arm(self, seconds):
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(seconds, self._timed_out)

    def _timed_out(self):
        self._timer = None
        if self._buf and not self._write_paused and not self._closing:
            self._respond(408, b"request not received in time\n", close=True)
        else:
            self.abort()

    def _update_reading(self):
        want = self._closing or not (self._write_paused or self._queued)
        if want == self._read_paused and not self._transport.is_closing():
            self._read_paused = not want
            if want:
                self._transport.resume_reading()
            else:
                self._transport.pause_reading()

    def _serve_one(self):
        if self._closing or self._write_paused:
            return
        buf = self._buf
        end = buf.find(b"\r\n\r\n", 0, MAX_HEAD + 4)
        if end < 0:
            if len(buf) > MAX_HEAD:
                self._respond(431, b"request head over %d bytes\n" % MAX_HEAD, close=True)
            return
        self._buf = buf[end + 4:]
        self._answer(buf[:end])
        if self._closing:
            return
        self._arm(REQUEST_TIMEOUT if self._buf else IDLE_TIMEOUT)
        if self._buf:
            # Pipelined: the next request waits for the next loop turn.
            self._queued = True
            self._update_reading()
            self._loop.call_soon(self._dequeue)

    def _dequeue(self):
        self._queued = False
        if not self._closing:
            self._update_reading()
            self._serve_one()

    def _answer(self, head):
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not parts[0].isalpha() or not parts[0].isupper():
            return self._respond(400, b"malformed request line\n", close=True)
        method, target, version = parts
        if version not in (b"HTTP/1.1", b"HTTP/1.0"):
            if version.startswith(b"HTTP/"):
                return self._respond(505, b"HTTP/1.0 and HTTP/1.1 only\n", close=True)
            return self._respond(400, b"malformed request line\n", close=True)
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip() or not name.isascii():
                return self._respond(400, b"malformed header\n", close=True)
            headers[name.lower()] = value.strip()
        length = headers.get(b"content-length", b"0")
        if not length.isdigit():
            return self._respond(400, b"bad Content-Length\n", close=True)
        # No endpoint takes a body: one sent cannot be told from the next
        # request, so answer, then close.
        has_body = int(length) > 0 or b"transfer-encoding" in headers
        conn = headers.get(b"connection", b"").lower()
        keep = (b"close" not in conn) if version == b"HTTP/1.1" else (b"keep-alive" in conn)
        close = has_body or not keep
        if target.startswith((b"http://", b"https://")):
            target = b"/" + target.split(b"/", 3)[3] if target.count(b"/") >= 3 else b"/"
        path = target.split(b"?", 1)[0].decode("latin-1")
        if path not in PATHS:
            return self._respond(404, b"not found: try /metrics, /healthz or /readyz\n", close=close)
        if method not in (b"GET", b"HEAD"):
            return self._respond(405, b"GET or HEAD only\n", close=close, allow=True)
        head_only = method == b"HEAD"
        if path != "/metrics" and self._ep.health_auth:
            refused = credentials_refused(self._ep.auth, headers.get(b"authorization"), self._address, path)
            if refused is not None:
                return self._respond(refused, b"a token is needed for %s\n" % path.encode(), close=close,
                                     extra=CHALLENGE if refused == 401 else "")
        if path == "/metrics":
            if self._ep.auth is not None:
                refused = credentials_refused(self._ep.auth, headers.get(b"authorization"), self._address)
                if refused is not None:
                    why = b"a monitor's or admin's token is needed for /metrics\n" if refused == 403 \
                        else b"a token is needed for /metrics\n"
                    return self._respond(refused, why, close=close, extra=CHALLENGE if refused == 401 else "")
            return self._respond(200, exposition(self._ep.server), CONTENT_TYPE, head_only, close)
        if path == "/healthz":
            return self._respond(200, b"ok\n", head_only=head_only, close=close)
        ready, why = self._ep.server.readiness()
        self._respond(200 if ready else 503, why.encode() + b"\n", head_only=head_only, close=close)

    def _respond(self, status, body, ctype="text/plain; charset=utf-8", head_only=False,
                 close=False, allow=False, extra=""):
        head = "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s%s%s\r\n" % (
            status, REASONS[status], ctype, len(body), "Allow: GET, HEAD\r\n" if allow else "",
            "Connection: close\r\n" if close else "", extra)
        self._transport.write(head.encode() + (b"" if head_only else body))
        if close:
            # Closing with request bytes unread would send a reset, which can
            # destroy the answer before the client reads it. So send FIN after
            # the answer, drop what still comes, and close a moment later.
            self._closing = True
            self._buf = b""
            if self._read_paused:
                self._read_paused = False
                self._transport.resume_reading()
            if self._transport.can_write_eof():
                self._transport.write_eof()
                self._arm(LINGER)
            else:
                self._transport.close()
