"""NatsProxy: a TCP proxy on loopback in front of one NATS server's client port,
run by a thread of its own, that can cut the connections through it.

A fastbean node started with --replicate pointing at proxies' URLs (one proxy
per NATS server; the servers must not advertise each other's client URLs,
tests/support/natscluster.py sets no_advertise) is cut off from NATS by the proxies
while its own clients still reach it:

- drop(): every proxied connection is closed at once (the client sees EOF, as
  when a server dies) and new ones are closed as soon as they are accepted;
- blackhole(): connections stay open and new ones are accepted (and connected
  upstream), but nothing is forwarded either way: a partition with no RST, the
  bytes wait in the kernel's buffers as they would in a partitioned network;
- restore(): pass-through again; the connections a blackhole held resume.
"""
import selectors
import socket
import threading

PASS, DROP, BLACKHOLE = "pass", "drop", "blackhole"
CHUNK = 1 << 16


class _Pipe:
    __slots__ = ("client", "upstream", "out")

    def __init__(self, client, upstream):
        self.client, self.upstream = client, upstream
        self.out = {client: b"", upstream: b""}     # bytes waiting to be sent to each side

    def other(self, sock):
        return self.upstream if sock is self.client else self.client


class NatsProxy:
    """proxy = NatsProxy(port_of_the_nats_server); proxy.url is what --replicate takes."""

    def __init__(self, upstream_port, upstream_host="127.0.0.1"):
        self.upstream = (upstream_host, upstream_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.url = "nats://127.0.0.1:%d" % self.port
        self.mode = PASS
        self.accepted = self.dropped = 0
        self._pipes = {}            # socket -> its _Pipe
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.listener, selectors.EVENT_READ, "accept")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="nats-proxy-%d" % self.port, daemon=True)
        self._thread.start()

    # -- control (any thread) -----------------------------------------------------

    def drop(self):
        """Close every connection through the proxy, and each new one as it comes."""
        self._set(DROP)

    def blackhole(self):
        """Keep the connections, take new ones, forward nothing."""
        self._set(BLACKHOLE)

    def restore(self):
        """Forward again."""
        self._set(PASS)

    def close(self):
        """Stop the thread and close every socket."""
        self._stopping = True
        self._wake()
        self._thread.join(10)
        for s in list(self._pipes):
            s.close()
        self._pipes.clear()
        self.listener.close()
        self._wake_r.close()
        self._wake_w.close()
        self._sel.close()

    @property
    def connections(self):
        """Client connections open through the proxy."""
        with self._lock:
            return len({id(p) for p in self._pipes.values()})

    def _set(self, mode):
        done = threading.Event()
        with self._lock:
            self.mode = mode
            self._applied = done
        self._wake()
        done.wait(10)

    def _wake(self):
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    # -- the thread ---------------------------------------------------------------

    def _run(self):
        while not self._stopping:
            for key, events in self._sel.select(0.5):
                if key.data == "wake":
                    self._on_wake()
                elif key.data == "accept":
                    self._accept()
                else:
                    self._io(key.fileobj, events)
        # closing happens in close()

    def _on_wake(self):
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            done, self._applied = getattr(self, "_applied", None), None
        if self.mode == DROP:
            for pipe in {id(p): p for p in self._pipes.values()}.values():
                self._close(pipe)
        self._rearm_all()
        if done is not None:
            done.set()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except (BlockingIOError, OSError):
                return
            self.accepted += 1
            if self.mode == DROP:
                self.dropped += 1
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=2)
            except OSError:
                client.close()      # the server is down: as if the client had reached it
                continue
            for s in (client, upstream):
                s.setblocking(False)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pipe = _Pipe(client, upstream)
            with self._lock:
                self._pipes[client] = self._pipes[upstream] = pipe
            self._sel.register(client, selectors.EVENT_READ, pipe)
            self._sel.register(upstream, selectors.EVENT_READ, pipe)
            self._rearm(pipe)

    def _rearm(self, pipe):
        # Forwarding: read a side while the other side's output is empty, write
        # a side with output waiting. Blackholed: neither.
        for s in (pipe.client, pipe.upstream):
            if s.fileno() < 0:
                continue
            ev = 0
            if self.mode == PASS:
                if not pipe.out[pipe.other(s)]:
                    ev |= selectors.EVENT_READ
                if pipe.out[s]:
                    ev |= selectors.EVENT_WRITE
            try:
                if ev:
                    self._sel.modify(s, ev, pipe)
                else:
                    self._sel.unregister(s)
            except KeyError:
                if ev:
                    self._sel.register(s, ev, pipe)
            except ValueError:
                pass

    def _rearm_all(self):
        for pipe in {id(p): p for p in self._pipes.values()}.values():
            self._rearm(pipe)

    def _io(self, sock, events):
        pipe = self._pipes.get(sock)
        if pipe is None or self.mode != PASS:
            return
        try:
            if events & selectors.EVENT_READ:
                data = sock.recv(CHUNK)
                if not data:
                    self._close(pipe)
                    return
                pipe.out[pipe.other(sock)] += data
            for s in (pipe.client, pipe.upstream):
                if pipe.out[s]:
                    try:
                        n = s.send(pipe.out[s])
                    except BlockingIOError:
                        n = 0
                    pipe.out[s] = pipe.out[s][n:]
        except OSError:
            self._close(pipe)
            return
        self._rearm(pipe)

    def _close(self, pipe):
        with self._lock:
            for s in (pipe.client, pipe.upstream):
                self._pipes.pop(s, None)
        for s in (pipe.client, pipe.upstream):
            try:
                self._sel.unregister(s)
            except (KeyError, ValueError):
                pass
            s.close()
