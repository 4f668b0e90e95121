"""ConnProtocol: one per client socket; hands bytes to the engine and back."""
import asyncio
import logging

from fastbean.engine.core import SockWriter
from fastbean.logs import event

TRACE_BYTES = 256           # -VV logs this much of each read and reply


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
        server = self._server
        self._transport = transport
        self._conn.attach(*self._writers(transport), transport.close)
        if not server.admit(self):
            transport.abort()
            return
        if server.verbosity >= 1:
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
    """A connection to a TLS listener. uvloop's TLS layer calls the protocol
    only once the handshake succeeded, and never again if it failed: so the
    engine hears of the connection only then, or a failed handshake would
    leave it counting a client that never came."""

    __slots__ = ()
    DIRECT_SEND = False

    def __init__(self, server):
        self._server = server
        self._conn = None

    def connection_made(self, transport):
        super().__init__(self._server)
        super().connection_made(transport)

    def eof_received(self):
        # The TLS layer closes the connection after the client's close_notify
        # whatever this answers (and warns about a true answer): replies not
        # written by then are lost, as the client has said it reads no more:
        # so the peer is gone, and the engine runs nothing more for it.
        self._conn.got_eof(True)
        return False


class TracingTlsConnProtocol(TlsConnProtocol, TracingConnProtocol):
    """-VV on a TLS listener."""

    __slots__ = ()


class Refused(asyncio.Protocol):
    """A connection to a standby: closed as soon as it is accepted."""

    def connection_made(self, transport):
        transport.close()
