"""The asyncio client: the blocking Client's commands as coroutines, on the same table."""
from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable, Sequence
from typing import List, Tuple, TypeVar

from fastbean.client import _protocol as P
from fastbean.client._protocol import (
    DEFAULT_PRI,
    DEFAULT_TTR,
    FOREVER,
    LINE,
    MAX_REPLY_LINE,
    PIPELINE,
    STANDBY,
    TIMEOUT,
    Address,
    Backoff,
    BadFormat,
    Call,
    ConnectError,
    ConnectionLost,
    Job,
    ListedJob,
    NoReply,
    ProtocolError,
    Reader,
    Stats,
    UnknownCommand,
    addresses_of,
    alien,
    backoff_of,
    describe,
    no_primary,
)
from fastbean.client._sync import _reason

T = TypeVar("T")


class AsyncClient:
    """The asyncio twin of Client: the same arguments and the same commands,
    each a coroutine. It connects on `await connect()`, in `async with`, or at
    its first command. Tasks may share it: their commands are pipelined, each
    written at once and reading its reply in turn (a command queued behind a
    reserve waits for it: use one client per task that blocks in reserve). A
    command cancelled before its reply leaves the connection unusable (a late
    reply would answer the next one): it is closed, and reconnected as
    `reconnect` allows."""

    def __init__(self, address: Address | Sequence[Address], timeout: float | None = TIMEOUT, *,
                 tls: ssl.SSLContext | None = None, server_hostname: str | None = None,
                 token: str | bytes | None = None, reconnect: Backoff | bool | None = None) -> None:
        self.addresses = addresses_of(address)
        self.address: Address = self.addresses[0]
        self.where = describe(self.address)
        self.timeout = timeout
        self.tls = tls
        self.server_hostname = server_hostname
        self.token = token
        self.reconnect = backoff_of(reconnect)
        self.reconnects = 0
        self.connected = False
        self._connections = 0
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._used: bytes | None = b"default"
        self._want_used = b"default"
        self._watched: List[bytes] = [b"default"]
        self._lock_: asyncio.Lock | None = None         # connecting, and writing a command
        self._tail: asyncio.Future[None] | None = None  # done when the last command written has its reply

    # -- connecting

    async def _open(self, address: Address) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        where = describe(address)
        try:
            if isinstance(address, str):
                coro = asyncio.open_unix_connection(address, ssl=self.tls,
                                                    server_hostname=self.server_hostname if self.tls else None)
            else:
                coro = asyncio.open_connection(address[0], address[1], ssl=self.tls,
                                               server_hostname=(self.server_hostname or address[0])
                                               if self.tls else None)
            return await asyncio.wait_for(coro, self.timeout)
        except asyncio.TimeoutError:
            raise ConnectError("cannot connect to %s: timed out" % where) from None
        except (OSError, UnicodeError, ValueError) as e:
            tls = " over TLS" if isinstance(e, ssl.SSLError) else ""
            raise ConnectError("cannot connect to %s%s: %s" % (where, tls, _reason(e))) from None

    async def connect(self) -> AsyncClient:
        """Connect (again) to the first address that serves; restore the session."""
        self._close()
        tried: List[Tuple[str, str]] = []
        group = len(self.addresses) > 1
        for address in self.addresses:
            where = describe(address)
            try:
                self._reader, self._writer = await self._open(address)
            except ConnectError as e:
                if not group:
                    raise
                tried.append((where, str(e).replace("cannot connect to %s" % where, "could not connect", 1)))
                continue
            self.address, self.where, self.connected = address, where, True
            try:
                await self._restore(group)
            except ConnectionLost as e:
                self._close()
                if not group:
                    raise
                tried.append((where, "did not answer in time" if isinstance(e, NoReply) else STANDBY))
                continue
            except BaseException:
                self._close()
                raise
            if self._connections:
                self.reconnects += 1
            self._connections += 1
            return self
        raise no_primary(tried)

    async def _restore(self, probe: bool) -> None:
        self._used = b"default"
        sent = False
        if self.token is not None:
            await self._exec(P.auth(self.token))
            sent = True
        if self._want_used != b"default":
            await self._exec(P.use(self._want_used))
            self._used = self._want_used
            sent = True
        for tube in self._watched:
            if tube != b"default":
                await self._exec(P.watch(tube))
                sent = True
        if b"default" not in self._watched:
            await self._exec(P.ignore(b"default"))
            sent = True
        if probe and not sent:
            await self._exec(P.list_tube_used())

    async def _reconnect(self) -> None:
        backoff = self.reconnect
        attempt = 0
        while True:
            try:
                await self.connect()
                return
            except ConnectError:
                attempt += 1
                if backoff is None or (backoff.tries is not None and attempt >= backoff.tries):
                    raise
            await asyncio.sleep(backoff.delay(attempt - 1))

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
        self._tail = None
        self.connected = False

    async def close(self) -> None:
        writer = self._writer
        self._close()
        if writer is not None:
            try:
                await writer.wait_closed()
            except (OSError, ssl.SSLError):
                pass

    async def __aenter__(self) -> AsyncClient:
        if not self.connected:
            await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return "<%s.%s to %s>" % (type(self).__module__, type(self).__qualname__, self.where)

    # -- inside

    @property
    def _lock(self) -> asyncio.Lock:
        # made in the loop that first uses it (Python 3.9 binds a lock to a loop when made)
        if self._lock_ is None:
            self._lock_ = asyncio.Lock()
        return self._lock_

    @property
    def generation(self) -> int:
        """How many connections this client has made: a reservation belongs to
        the connection of its generation, and dies with it."""
        return self._connections

    async def call(self, call: Call[T], generation: int | None = None) -> T:
        """Run one command of the table (fastbean.client._protocol). With
        generation: only on that connection, never on a new one (ConnectionLost
        if it is gone), for a command about a job it reserved."""
        return await self._run(call, generation)

    async def _run(self, call: Call[T], generation: int | None = None) -> T:
        """Send a command and read its reply, reconnecting as self.reconnect says.
        Commands are pipelined: each is written as soon as it is asked for, and
        reads its reply once the previous command has read its own."""
        while True:
            async with self._lock:
                if generation is not None:
                    if generation != self._connections or not self.connected:
                        raise ConnectionLost("the connection to %s that reserved the job is gone" % self.where)
                elif not self.connected:
                    if self._connections and self.reconnect is not None:
                        await self._reconnect()
                    elif self._connections:
                        raise ConnectionLost("the connection to %s was lost" % self.where)
                    else:
                        await self.connect()
                reader, writer, mine = self._reader, self._writer, self._connections
                assert reader is not None and writer is not None
                prev, done = self._tail, asyncio.get_running_loop().create_future()
                self._tail = done
                try:
                    writer.write(call.data)
                    await writer.drain()
                except (OSError, ssl.SSLError, RuntimeError) as e:
                    # RuntimeError: uvloop's transport was closed under us (the
                    # peer reset it while an earlier command read its reply)
                    done.set_result(None)
                    self._close_if(mine)
                    lost: ConnectionLost | None = ConnectionLost(
                        "lost the connection to %s: %s" % (self.where, _reason(e)))
                except BaseException:
                    # cancelled while writing: the commands after this one must
                    # not wait for its turn, and its reply would answer them
                    done.set_result(None)
                    self._close_if(mine)
                    raise
                else:
                    lost = None
            try:
                if lost is not None:
                    raise lost
                return await self._reply(call, reader, prev, done, mine)
            except ConnectionLost:
                if generation is not None or self.reconnect is None or not call.idempotent:
                    raise

    def _close_if(self, generation: int) -> None:
        if self._connections == generation:
            self._close()

    async def _reply(self, call: Call[T], reader: asyncio.StreamReader, prev: asyncio.Future[None] | None,
                     done: asyncio.Future[None], mine: int) -> T:
        limit = None if self.timeout is None or call.wait == FOREVER else self.timeout + call.wait
        try:
            if prev is not None:
                await prev          # never fails: each command marks its turn done in the end
            if self._connections != mine or not self.connected:
                raise ConnectionLost("lost the connection to %s before the reply" % self.where)
            return await asyncio.wait_for(self._drive(reader, call.read(self.where)), limit)
        except asyncio.TimeoutError:
            self._close_if(mine)
            raise NoReply("no reply from %s after waiting %gs" % (self.where, limit or 0)) from None
        except (OSError, ssl.SSLError) as e:
            self._close_if(mine)
            raise ConnectionLost("lost the connection to %s: %s" % (self.where, _reason(e))) from None
        except ConnectionLost:
            self._close_if(mine)
            raise
        except BadFormat:
            if call.name == "put":
                self._close_if(mine)    # the body is read as a command: the replies no longer match
            raise
        except UnknownCommand:
            if call.name == "schedule":
                self._close_if(mine)    # a server without schedules reads the body as a command
            raise
        except asyncio.CancelledError:
            self._close_if(mine)        # the reply would answer the next command
            raise
        finally:
            if not done.done():
                done.set_result(None)

    async def _exec(self, call: Call[T]) -> T:
        writer, reader = self._writer, self._reader
        if writer is None or reader is None:
            raise ConnectionLost("not connected to %s" % self.where)
        limit = None if self.timeout is None or call.wait == FOREVER else self.timeout + call.wait
        try:
            writer.write(call.data)
            await writer.drain()
            return await asyncio.wait_for(self._drive(reader, call.read(self.where)), limit)
        except asyncio.TimeoutError:
            self._close()
            raise NoReply("no reply from %s after waiting %gs" % (self.where, limit or 0)) from None
        except (OSError, ssl.SSLError, RuntimeError) as e:     # RuntimeError: as in _run
            self._close()
            raise ConnectionLost("lost the connection to %s: %s" % (self.where, _reason(e))) from None
        except ConnectionLost:
            self._close()
            raise
        except BadFormat:
            if call.name == "put":
                self._close()   # the body is read as a command: the replies no longer match
            raise
        except UnknownCommand:
            if call.name == "schedule":
                self._close()   # a server without schedules reads the body as a command
            raise
        except asyncio.CancelledError:
            self._close()
            raise

    async def _drive(self, reader: asyncio.StreamReader, gen: Reader[T]) -> T:
        try:
            need = next(gen)
            while True:
                if need == LINE:
                    try:
                        line = await reader.readuntil(b"\r\n")
                    except asyncio.IncompleteReadError as e:
                        raise ConnectionLost("%s closed the connection %s" % (
                            self.where, "in the middle of a reply" if e.partial else "without replying")) from None
                    except asyncio.LimitOverrunError:
                        raise alien(self.where, await reader.read(MAX_REPLY_LINE)) from None
                    if len(line) > MAX_REPLY_LINE:
                        raise alien(self.where, line)
                    need = gen.send(line[:-2])
                else:
                    try:
                        data = await reader.readexactly(need + 2)
                    except asyncio.IncompleteReadError:
                        raise ConnectionLost("%s closed the connection in the middle of a reply"
                                             % self.where) from None
                    if data[-2:] != b"\r\n":
                        raise ProtocolError("%s sent a reply body without its closing CRLF" % self.where)
                    need = gen.send(data[:-2])
        except StopIteration as stop:
            result: T = stop.value
            return result

    # -- producing

    async def use(self, tube: str | bytes) -> None:
        """Put new jobs into this tube (sent only when another one is in use)."""
        name = P.tube_bytes(tube)
        if name != self._used or not self.connected:
            await self._run(P.use(name))
            self._used = self._want_used = name

    async def put(self, body: bytes, pri: int = DEFAULT_PRI, delay: int = 0, ttr: int = DEFAULT_TTR) -> int:
        """A new job in the tube in use; its id (see Client.put)."""
        return await self._run(P.put(body, pri, delay, ttr))

    async def put_unique(self, body: bytes, key: str | bytes, cooldown: int = 0, pri: int = DEFAULT_PRI,
                         delay: int = 0, ttr: int = DEFAULT_TTR) -> tuple[int, str | None]:
        """A job unless one put with this key is live (see Client.put_unique)."""
        return await self._run(P.put_unique(body, key, cooldown, pri, delay, ttr))

    async def put_in(self, tube: str | bytes, body: bytes, pri: int = DEFAULT_PRI, delay: int = 0,
                     ttr: int = DEFAULT_TTR, key: str | bytes | None = None,
                     cooldown: int = 0) -> tuple[int, str | None]:
        """use(tube) and put (put_unique with a key) in one write, so that no
        other task sharing the connection can slip a use in between: (id,
        None), or with a key (id, state) as put_unique returns."""
        name = P.tube_bytes(tube)
        self._used = None
        result = await self._run(P.put_in(name, body, pri, delay, ttr, key, cooldown))
        self._used = self._want_used = name
        return result

    # -- consuming

    async def watch(self, tube: str | bytes) -> int:
        name = P.tube_bytes(tube)
        n = await self._run(P.watch(name))
        if name not in self._watched:
            self._watched.append(name)
        return n

    async def ignore(self, tube: str | bytes) -> int:
        name = P.tube_bytes(tube)
        n = await self._run(P.ignore(name))
        if name in self._watched:
            self._watched.remove(name)
        return n

    async def reserve(self, timeout: int | None = None) -> Job:
        return await self._run(P.reserve() if timeout is None else P.reserve_with_timeout(timeout))

    async def reserve_with_timeout(self, seconds: int) -> Job:
        return await self._run(P.reserve_with_timeout(seconds))

    async def reserve_job(self, job_id: int) -> Job:
        return await self._run(P.reserve_job(job_id))

    async def reserve_batch(self, count: int, timeout: int | None = None) -> list[Job]:
        return await self._run(P.reserve_batch(count, timeout))

    async def delete(self, job_id: int) -> None:
        await self._run(P.delete(job_id))

    async def release(self, job_id: int, pri: int = DEFAULT_PRI, delay: int = 0) -> None:
        await self._run(P.release(job_id, pri, delay))

    async def bury(self, job_id: int, pri: int = DEFAULT_PRI) -> None:
        await self._run(P.bury(job_id, pri))

    async def touch(self, job_id: int) -> None:
        await self._run(P.touch(job_id))

    # -- looking

    async def peek(self, job_id: int) -> bytes:
        return await self._run(P.peek(job_id))

    async def peek_state(self, state: str) -> Job:
        return await self._run(P.peek_state(state))

    async def peek_ready(self) -> Job:
        return await self._run(P.peek_state("ready"))

    async def peek_delayed(self) -> Job:
        return await self._run(P.peek_state("delayed"))

    async def peek_buried(self) -> Job:
        return await self._run(P.peek_state("buried"))

    async def stats(self) -> Stats:
        return await self._run(P.stats())

    async def stats_job(self, job_id: int) -> Stats:
        return await self._run(P.stats_job(job_id))

    async def stats_tube(self, tube: str | bytes) -> Stats:
        return await self._run(P.stats_tube(tube))

    async def stats_tubes(self, tubes: Iterable[str]) -> dict[str, Stats]:
        out: dict[str, Stats] = {}
        names = [t.encode("ascii") for t in tubes]
        for start in range(0, len(names), PIPELINE):
            part: dict[str, Stats] = await self._run(P.stats_tubes(names[start:start + PIPELINE]))
            out.update(part)
        return out

    async def fastbean_stats(self) -> Stats:
        return await self._run(P.fastbean_stats())

    async def list_tubes(self) -> list[str]:
        return await self._run(P.list_tubes())

    async def list_tube_used(self) -> str:
        return await self._run(P.list_tube_used())

    async def list_tubes_watched(self) -> list[str]:
        return await self._run(P.list_tubes_watched())

    async def list_tube(self, state: str, cursor: str = "0", count: int = 1000) -> tuple[list[ListedJob], str]:
        return await self._run(P.list_tube(state, cursor, count))

    # -- managing

    async def kick(self, bound: int) -> int:
        return await self._run(P.kick(bound))

    async def kick_job(self, job_id: int) -> None:
        await self._run(P.kick_job(job_id))

    async def pause_tube(self, tube: str | bytes, seconds: int) -> None:
        await self._run(P.pause_tube(tube, seconds))

    async def auth(self, token: str | bytes) -> None:
        await self._run(P.auth(token))
        self.token = token

    async def flush_tube(self, tube: str | bytes) -> int:
        return await self._run(P.flush_tube(tube))

    async def flush_buried(self, tube: str | bytes) -> int:
        return await self._run(P.flush_buried(tube))

    async def retry_limit(self, limit: int | None = None, dead_letter: str | bytes | None = None,
                          default: bool = False) -> tuple[int, str | None]:
        return await self._run(P.retry_limit(limit, dead_letter, default))

    # -- schedules (see Client's)

    async def schedule(self, name: str | bytes, body: bytes, spec: str | bytes, pri: int = 0,
                       ttr: int = DEFAULT_TTR, misfire: str = "fire") -> bool:
        return await self._run(P.schedule(name, body, spec, pri, ttr, misfire))

    async def unschedule(self, name: str | bytes) -> None:
        await self._run(P.unschedule(name))

    async def list_schedules(self) -> list[Stats]:
        return await self._run(P.list_schedules())

    async def fire_schedule(self, name: str | bytes) -> int:
        return await self._run(P.fire_schedule(name))

    async def pause_schedule(self, name: str | bytes) -> None:
        await self._run(P.pause_schedule(name))

    async def resume_schedule(self, name: str | bytes) -> None:
        await self._run(P.resume_schedule(name))

    async def delete_batch(self, ids: Iterable[int]) -> tuple[int, int]:
        return await self._run(P.delete_batch(ids))

    async def delete_each(self, ids: Iterable[int]) -> list[int]:
        return await self._run(P.delete_each(ids))

    async def delete_and_peek(self, job_id: int, state: str) -> tuple[bool, Job | None]:
        return await self._run(P.delete_and_peek(job_id, state))

    async def move_job(self, job_id: int, tube: str | bytes) -> None:
        """Move a ready, delayed or buried job to another tube, keeping its id
        (move-job, a fastbean extension): MOVED, else NotFound."""
        await self._run(P.move_job(job_id, tube))

    async def reprioritize_job(self, job_id: int, pri: int) -> None:
        """Give a job another priority (reprioritize-job, a fastbean extension)."""
        await self._run(P.reprioritize_job(job_id, pri))

    async def quit(self) -> None:
        """Say goodbye and close the connection."""
        if self._writer is not None:
            try:
                self._writer.write(b"quit\r\n")
            except (OSError, RuntimeError):
                pass
        await self.close()


__all__ = ["AsyncClient"]
