"""ConnProtocol: one per client socket; hands bytes to the engine and back."""
import asyncio
import asyncio.sslproto
import logging
import sys

from fastbean.engine.core import SockWriter
from fastbean.logs import event

TRACE_BYTES = 256           # -VV logs this much of each read and reply


def tls_layer(loop):
    """The TLS protocol class of loop's own TLS listeners (uvloop's, or asyncio's)."""
    uvloop = sys.modules.get("uvloop.loop")
    if uvloop is not None and isinstance(loop, uvloop.Loop):
        return uvloop.SSLProtocol
    return asyncio.sslproto.SSLProtocol


def peer_address(transport):
    """A client's address without its port, what per-address limits count: "unix" for a UNIX socket."""
    peer = transport.get_extra_info("peername")
    return peer[0] if isinstance(peer, tuple) else "unix"


def peer_name(peer):
    """A client's address as people write it: host:port, [v6]:port, or unix."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        host, port = peer[0], peer[1]
        return ("[%s]:%d" if ":" in host else "%s:%d") % (host, port)
    return "unix:" + peer if isinstance(peer, str) and peer else "unix"


def trace(name, peer, data):
    # -VV: one event per read or reply; the bytes as latin-1 text, which maps
    # each byte to one character (JSON then shows \r\n, and text logs the repr)
    shown = bytes(data[:TRACE_BYTES])
    event(logging.DEBUG, name, ("< " if name == "read" else "> ") + "%(peer)s %(data)r"
          + (" (%(bytes)d bytes)" if len(data) > TRACE_BYTES else ""),
          peer=peer, bytes=len(data), data=shown.decode("latin-1"))


class ConnProtocol(asyncio.Protocol):
    """Feeds every read to the engine in one call; the engine writes the replies.

    The Python work per read is constant: however many commands a read holds,
    they are parsed and run in compiled code and their replies leave in one
    transport call.
    """

    __slots__ = ("_server", "_transport", "_conn", "_peer", "data_received")

    # replies may go straight to the socket (SockWriter): not through TLS
    DIRECT_SEND = True

    def __init__(self, server):
        self._server = server
        self._transport = None
        self._peer = None
        self._conn = server.core.connect(self._set_reading, self._again)
        # uvloop looks data_received up once, when the transport is made:
        # hand it the compiled method itself, so a read runs no Python code.
        self.data_received = self._conn.feed

    def connection_made(self, transport):
        self._transport = transport
        self._conn.attach(*self._writers(transport), transport.close)
        if not self._server.admit(self):
            transport.abort()
            return
        self._accepted(transport)

    def _accepted(self, transport):
        if self._server.verbosity >= 1:
            self._peer = peer_name(transport.get_extra_info("peername"))
            event(logging.DEBUG, "accept", "accept %(peer)s", peer=self._peer)

    def eof_received(self):
        self._conn.got_eof()
        return True         # keep the write side open: the engine closes when it is done

    def connection_lost(self, exc):
        self._conn.gone()
        if self._server.verbosity >= 1:
            event(logging.DEBUG, "close", "close %(peer)s", peer=self._peer)
        self._server.forget(self)

    def pause_writing(self):
        self._conn.set_writable(False)

    def resume_writing(self):
        self._conn.set_writable(True)

    def engine_conn(self):
        """The engine's side of this connection (None before a TLS client is in)."""
        return self._conn

    def close(self):
        """Server shutdown: finish writing what is queued, then close."""
        if self._transport is not None:
            self._transport.close()

    def drop(self, keep):
        """fastbean-reset from the connection keep: unless this is it, close at
        once, output unsent, and return the engine's side of this connection."""
        if self._conn is keep or self._transport is None:
            return None
        self._transport.abort()
        return self._conn

    # -- callbacks given to the engine ---------------------------------------

    def _set_reading(self, on):
        transport = self._transport
        if transport.is_closing():
            return
        if on:
            transport.resume_reading()
        else:
            transport.pause_reading()

    def _again(self):
        self._server.loop.call_soon(self._conn.again)

    def _writers(self, transport):
        sock = transport.get_extra_info("socket") if self.DIRECT_SEND else None
        if sock is None:
            return transport.write, transport.writelines
        # while the transport has nothing queued, the engine sends a reply
        # from its output buffer itself: no bytes object, no write path
        writer = SockWriter(transport, sock.fileno())
        return writer, writer.writelines


class TracingConnProtocol(ConnProtocol):
    """-VV: every read and every reply goes to the log as well."""

    __slots__ = ()

    def __init__(self, server):
        super().__init__(server)
        self.data_received = self._traced_data_received

    def _traced_data_received(self, data):
        trace("read", self._peer, data)
        self._conn.feed(data)

    def _writers(self, transport):
        write, writelines = transport.write, transport.writelines

        def traced_write(data):
            trace("reply", self._peer, data)
            write(data)

        def traced_writelines(chunks):
            trace("reply", self._peer, b"".join(chunks))
            writelines(chunks)

        return traced_write, traced_writelines


class TlsConnProtocol(ConnProtocol):
    """A connection to a TLS listener. It counts from accept: against
    --max-connections, and until the client is in (here: its handshake is
    done; authgate: its token too) against --max-unauthenticated-per-address;
    one refused is closed at once. The listener accepts plain connections;
    the TLS layer (the loop's own, as its TLS listeners use) goes under this
    protocol when the first bytes come, so a peer that sends nothing costs
    a socket and a few KiB, not a TLS session (about 50 KiB). The handshake
    must be done --tls-handshake-timeout seconds after the accept. The
    engine hears of the connection only once it is, or a failed handshake
    would leave it counting a client that never came."""

    __slots__ = ("_address", "_handshaking", "_deadline")
    DIRECT_SEND = False

    def __init__(self, server):
        self._server = server
        self._conn = None
        self._transport = None
        self._address = None
        self._handshaking = False
        self._deadline = None

    def connection_made(self, transport):
        if self._handshaking:
            # from the TLS layer: the handshake is done, transport is the TLS one
            self._handshaking = False
            self._cancel_deadline()
            self.handshaken(transport)
            return
        # accept: the plain TCP (or UNIX) transport
        server = self._server
        self._transport = transport
        self._address = peer_address(transport)
        if not server.admit(self, self._address):
            transport.abort()
            return
        self._handshaking = True
        self._deadline = server.loop.call_later(server.config.tls_handshake_timeout, self._too_slow)
        self.data_received = self._client_hello
        transport.set_protocol(self)    # the transport keeps the data_received it finds

    def _client_hello(self, data):
        # The first bytes: the TLS layer goes under this protocol and reads them.
        server, transport = self._server, self._transport
        loop = server.loop
        waiter = loop.create_future()
        waiter.add_done_callback(self._handshake_over)
        left = self._deadline.when() - loop.time()
        tls = tls_layer(loop)(loop, self, server.certificates.context, waiter, server_side=True,
                              ssl_handshake_timeout=max(left, 0.001) + 1.0)    # the deadline's backstop
        transport.set_protocol(tls)
        tls.connection_made(transport)
        view = memoryview(data)
        while view and not transport.is_closing():
            buf = tls.get_buffer(len(view))
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            tls.buffer_updated(n)
            view = view[n:]

    def _too_slow(self):
        self._deadline = None
        if self._handshaking:
            self._transport.abort()     # connection_lost, or the TLS layer's waiter, forget it

    def _cancel_deadline(self):
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _handshake_over(self, waiter):
        # Failed, timed out, or the connection closed during it (then the
        # waiter may say nothing, but connection_made never came).
        failed = waiter.cancelled() or waiter.exception() is not None
        if failed or self._handshaking:
            self._gone()
            self._transport.abort()

    def _gone(self):
        # closed before the client was in
        self._handshaking = False
        self._cancel_deadline()
        self.data_received = None       # (the bound method would keep a cycle for the GC)
        self._server.forget(self)

    def handshaken(self, transport):
        """The TLS handshake is done: the client is in (authgate asks a token first)."""
        self._server.authenticated(self)
        self._enter(transport)

    def _enter(self, transport):
        # the engine hears of the connection, and its replies go to transport
        super().__init__(self._server)
        self._transport = transport
        self._conn.attach(*self._writers(transport), transport.close)
        self._accepted(transport)

    def eof_received(self):
        # The TLS layer closes the connection after the client's close_notify
        # whatever this answers (and warns about a true answer): replies not
        # written by then are lost, as the client has said it reads no more:
        # so the peer is gone, and the engine runs nothing more for it.
        if self._conn is None:
            return False
        self._conn.got_eof(True)
        return False

    def connection_lost(self, exc):
        if self._conn is not None:
            super().connection_lost(exc)
        else:                           # before the TLS layer came, or from it after a failure
            self._gone()

    def pause_writing(self):
        if self._conn is not None:
            super().pause_writing()

    def resume_writing(self):
        if self._conn is not None:
            super().resume_writing()


class TracingTlsConnProtocol(TlsConnProtocol, TracingConnProtocol):
    """-VV on a TLS listener."""

    __slots__ = ()


class Refused(asyncio.Protocol):
    """A connection to a standby: closed as soon as it is accepted."""

    def connection_made(self, transport):
        transport.close()
