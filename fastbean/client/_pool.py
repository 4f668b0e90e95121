"""Tubes spread over several independent nodes (or HA groups) by rendezvous hashing."""
from __future__ import annotations

import hashlib
import ssl
from collections.abc import Iterable, Sequence
from typing import Dict, List, NamedTuple, Optional, Tuple, Union

from fastbean.client._async import AsyncClient
from fastbean.client._protocol import (
    DEFAULT_PRI,
    DEFAULT_TTR,
    TIMEOUT,
    Address,
    Backoff,
    ListedJob,
    Stats,
    addresses_of,
    describe,
    tube_bytes,
)
from fastbean.client._sync import Client

# A node: one address, or the addresses of one HA group.
Node = Union[Address, Sequence[Address]]


def node_key(node: Node) -> str:
    """The name a node is hashed under: its addresses as messages show them.
    The same on every machine and in every order the nodes are listed."""
    return ",".join(describe(a) for a in addresses_of(node))


def owner(tube: str | bytes, keys: Sequence[str]) -> int:
    """The index in `keys` of the node that owns `tube`: the highest
    blake2b(key, tube) score (rendezvous or HRW hashing). Adding or removing a
    node moves only the tubes that node gains or owned."""
    name = tube_bytes(tube)
    best, best_score = 0, b""
    for i, key in enumerate(keys):
        score = hashlib.blake2b(key.encode() + b"\0" + name, digest_size=8).digest()
        if score > best_score:
            best, best_score = i, score
    return best



def _nodes_and_keys(nodes: Sequence[Node]) -> tuple[list[list[Address]], list[str]]:
    """Each node's addresses and its key for owner(): ValueError for no node,
    or one listed twice (its tubes could not be told apart)."""
    if not nodes:
        raise ValueError("a pool needs at least one node")
    addresses = [addresses_of(n) for n in nodes]
    keys = [node_key(n) for n in addresses]
    if len(set(keys)) != len(keys):
        raise ValueError("a node is listed twice")
    return addresses, keys

class PoolJob(NamedTuple):
    """A job handed out by a Pool: its id and body, and the node it lives on
    (an id means something only there)."""
    id: int
    body: bytes
    node: int


class Pool:
    """Blocking clients of several independent nodes, each tube owned by one.

    nodes: a list of nodes, each an address or a list of addresses (an HA
    group). Every command that names a tube goes to the node that owns it
    (owner()); the jobs it hands out are PoolJobs that remember their node,
    and delete, release, bury, touch... go back there. The other arguments are
    each node's Client's. Connections are made as nodes are first needed."""

    def __init__(self, nodes: Sequence[Node], timeout: float | None = TIMEOUT, *,
                 tls: ssl.SSLContext | None = None, server_hostname: str | None = None,
                 token: str | bytes | None = None, reconnect: Backoff | bool | None = True) -> None:
        self.nodes, self.keys = _nodes_and_keys(nodes)
        self._options = dict(timeout=timeout, tls=tls, server_hostname=server_hostname, token=token,
                             reconnect=reconnect)
        self._clients: Dict[int, Client] = {}

    def node_of(self, tube: str | bytes) -> int:
        """The index of the node that owns the tube."""
        return owner(tube, self.keys)

    def client(self, node: int) -> Client:
        """The connection to node number `node` (made on first use)."""
        c = self._clients.get(node)
        if c is None:
            o = self._options
            c = self._clients[node] = Client(self.nodes[node], o["timeout"], tls=o["tls"],  # type: ignore[arg-type]
                                             server_hostname=o["server_hostname"],  # type: ignore[arg-type]
                                             token=o["token"], reconnect=o["reconnect"])  # type: ignore[arg-type]
        return c

    def for_tube(self, tube: str | bytes) -> Client:
        """The client of the node that owns the tube."""
        return self.client(self.node_of(tube))

    def close(self) -> None:
        for c in self._clients.values():
            c.close()
        self._clients.clear()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- by tube

    def put(self, tube: str | bytes, body: bytes, pri: int = DEFAULT_PRI, delay: int = 0,
            ttr: int = DEFAULT_TTR) -> PoolJob:
        node = self.node_of(tube)
        c = self.client(node)
        c.use(tube)
        return PoolJob(c.put(body, pri, delay, ttr), body, node)

    def put_unique(self, tube: str | bytes, body: bytes, key: str | bytes, cooldown: int = 0,
                   pri: int = DEFAULT_PRI, delay: int = 0, ttr: int = DEFAULT_TTR) -> Tuple[PoolJob, Optional[str]]:
        node = self.node_of(tube)
        c = self.client(node)
        c.use(tube)
        jid, state = c.put_unique(body, key, cooldown, pri, delay, ttr)
        return PoolJob(jid, body, node), state

    def reserve(self, tube: str | bytes, timeout: int | None = None) -> PoolJob:
        """The next job of one tube (its node's connection watches only it)."""
        node = self.node_of(tube)
        c = self.client(node)
        _watch_only(c, tube_bytes(tube))
        job = c.reserve(timeout)
        return PoolJob(job.id, job.body, node)

    def stats_tube(self, tube: str | bytes) -> Stats:
        return self.for_tube(tube).stats_tube(tube)

    def peek_state(self, tube: str | bytes, state: str) -> PoolJob:
        node = self.node_of(tube)
        c = self.client(node)
        c.use(tube)
        job = c.peek_state(state)
        return PoolJob(job.id, job.body, node)

    def kick(self, tube: str | bytes, bound: int) -> int:
        c = self.for_tube(tube)
        c.use(tube)
        return c.kick(bound)

    def pause_tube(self, tube: str | bytes, seconds: int) -> None:
        self.for_tube(tube).pause_tube(tube, seconds)

    def flush_tube(self, tube: str | bytes) -> int:
        return self.for_tube(tube).flush_tube(tube)

    def flush_buried(self, tube: str | bytes) -> int:
        return self.for_tube(tube).flush_buried(tube)

    def retry_limit(self, tube: str | bytes, limit: int | None = None, dead_letter: str | bytes | None = None,
                    default: bool = False) -> Tuple[int, Optional[str]]:
        """The tube's retry limit; a dead-letter tube must live on the same node
        (fastbean moves jobs within a server), which owner() may not give."""
        c = self.for_tube(tube)
        c.use(tube)
        return c.retry_limit(limit, dead_letter, default)

    def list_tube(self, tube: str | bytes, state: str, cursor: str = "0",
                  count: int = 1000) -> Tuple[List[ListedJob], str]:
        c = self.for_tube(tube)
        c.use(tube)
        return c.list_tube(state, cursor, count)

    # -- by job

    def delete(self, job: PoolJob) -> None:
        self.client(job.node).delete(job.id)

    def release(self, job: PoolJob, pri: int = DEFAULT_PRI, delay: int = 0) -> None:
        self.client(job.node).release(job.id, pri, delay)

    def bury(self, job: PoolJob, pri: int = DEFAULT_PRI) -> None:
        self.client(job.node).bury(job.id, pri)

    def touch(self, job: PoolJob) -> None:
        self.client(job.node).touch(job.id)

    def kick_job(self, job: PoolJob) -> None:
        self.client(job.node).kick_job(job.id)

    def peek(self, job: PoolJob) -> bytes:
        return self.client(job.node).peek(job.id)

    def stats_job(self, job: PoolJob) -> Stats:
        return self.client(job.node).stats_job(job.id)

    # -- every node

    def list_tubes(self) -> List[str]:
        """Every node's tubes, sorted ("default" is on each)."""
        names: set[str] = set()
        for i in range(len(self.nodes)):
            names.update(self.client(i).list_tubes())
        return sorted(names)

    def stats(self) -> List[Stats]:
        """Each node's stats, in the order of the nodes."""
        return [self.client(i).stats() for i in range(len(self.nodes))]


def _watch_only(c: Client, tube: bytes) -> None:
    if c._watched != [tube]:
        c.watch(tube)
        for other in list(c._watched):
            if other != tube:
                c.ignore(other)


class AsyncPool:
    """Pool for asyncio: the same routing over AsyncClients, for producers
    (put, put_unique, stats_tube and the job commands). Tasks may share it:
    each put names its tube in the same write (AsyncClient.put_in)."""

    def __init__(self, nodes: Sequence[Node], timeout: float | None = TIMEOUT, *,
                 tls: ssl.SSLContext | None = None, server_hostname: str | None = None,
                 token: str | bytes | None = None, reconnect: Backoff | bool | None = True) -> None:
        self.nodes, self.keys = _nodes_and_keys(nodes)
        self._clients = [AsyncClient(n, timeout, tls=tls, server_hostname=server_hostname, token=token,
                                     reconnect=reconnect) for n in self.nodes]

    def node_of(self, tube: str | bytes) -> int:
        return owner(tube, self.keys)

    def client(self, node: int) -> AsyncClient:
        return self._clients[node]

    async def close(self) -> None:
        for c in self._clients:
            await c.close()

    async def __aenter__(self) -> AsyncPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def put(self, tube: str | bytes, body: bytes, pri: int = DEFAULT_PRI, delay: int = 0,
                  ttr: int = DEFAULT_TTR) -> PoolJob:
        node = self.node_of(tube)
        jid, _ = await self._clients[node].put_in(tube, body, pri, delay, ttr)
        return PoolJob(jid, body, node)

    async def put_unique(self, tube: str | bytes, body: bytes, key: str | bytes, cooldown: int = 0,
                         pri: int = DEFAULT_PRI, delay: int = 0,
                         ttr: int = DEFAULT_TTR) -> Tuple[PoolJob, Optional[str]]:
        node = self.node_of(tube)
        jid, state = await self._clients[node].put_in(tube, body, pri, delay, ttr, key, cooldown)
        return PoolJob(jid, body, node), state

    async def stats_tube(self, tube: str | bytes) -> Stats:
        return await self._clients[self.node_of(tube)].stats_tube(tube)

    async def delete(self, job: PoolJob) -> None:
        await self._clients[job.node].delete(job.id)

    async def peek(self, job: PoolJob) -> bytes:
        return await self._clients[job.node].peek(job.id)

    async def stats_job(self, job: PoolJob) -> Stats:
        return await self._clients[job.node].stats_job(job.id)

    async def kick_job(self, job: PoolJob) -> None:
        await self._clients[job.node].kick_job(job.id)


def nodes_text(nodes: Iterable[Sequence[Address]]) -> str:
    return "; ".join(",".join(describe(a) for a in n) for n in nodes)
