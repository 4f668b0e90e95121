"""fastbean-worker: reserve jobs, run a handler on each, delete, retry or bury.

Worker(handler, tubes, ...) from Python, `fastbean-worker MODULE:CALLABLE
--tube NAME` from a shell. It runs on asyncio (uvloop when installed) with
AsyncClient connections ("lanes"): each lane reserves a batch of jobs
(reserve-batch, or reserve-with-timeout on a server without it), runs them,
and deletes, releases or buries each on the connection that reserved it,
as the protocol wants. A lane blocks in a reserve only while it holds no
job, so a delete never waits behind a reserve; a lane that holds some jobs
and has free slots asks for more without waiting, and again each second.
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import importlib
import inspect
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

from fastbean import __version__
from fastbean.client import (
    DEFAULT_PRI,
    TIMEOUT,
    Address,
    AsyncClient,
    Backoff,
    BadFormat,
    ClientError,
    ConnectError,
    ConnectionLost,
    DeadlineSoon,
    NotFound,
    NotPermitted,
    ServerError,
    Stats,
    TimedOut,
    UnknownCommand,
    check_tube,
    owner,
    parse_address,
)
from fastbean.client import (
    Job as ClientJob,
)
from fastbean.client import _protocol as P
from fastbean.client import node_key as _node_key
from fastbean.logs import event

log = logging.getLogger("fastbean.worker")

BLOCK_S = 5                 # a lane's blocking reserve-with-timeout, seconds
POLL_S = 1.0                # a lane with jobs and free slots asks for more this often
FIRST_CHECK_S = 0.5         # a job still running after this gets its TTR looked up
MAX_BATCH = 16              # jobs one lane holds at most (reserve-batch's count)
RECONNECT = Backoff(0.05, 2.0, 2.0)     # the connections' default: quick, never gives up
GRACE_S = 30.0              # SIGTERM: seconds running jobs get to finish
METRIC_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class RetryPolicy:
    """What a failed job gets: released with a delay of full jitter over
    min(max_delay, base * factor ** (attempt - 1)) seconds (rounded up to whole
    seconds, as the protocol counts), and buried once it has been reserved
    `attempts` times (stats-job's `reserves`: every reservation, timeouts
    included). attempts=None: always release, leaving the end to a server
    retry-limit (fastbean-ctl retry-limit TUBE N)."""

    __slots__ = ("attempts", "base", "factor", "max_delay")

    def __init__(self, attempts: Optional[int] = 5, base: float = 1.0, factor: float = 2.0,
                 max_delay: float = 300.0) -> None:
        if attempts is not None and attempts < 1:
            raise ValueError("attempts is 1 or more, or None")
        self.attempts, self.base, self.factor, self.max_delay = attempts, base, factor, max_delay

    def delay(self, attempt: int) -> int:
        """The release delay after the `attempt`-th attempt failed (from 1)."""
        return math.ceil(Backoff(self.base, self.factor, self.max_delay).delay(max(0, attempt - 1)))

    def __repr__(self) -> str:
        return "RetryPolicy(attempts=%r, base=%g, factor=%g, max_delay=%g)" % (
            self.attempts, self.base, self.factor, self.max_delay)


class Job:
    """A reserved job, as a handler receives it: id, body, tube (None when the
    worker watches several tubes of a node and was told not to look it up),
    attempt (this one's number, known once the job failed or ran long; else
    None). stats() and touch() ask the server (from a thread handler);
    astats() and atouch() from a coroutine handler."""

    __slots__ = ("id", "body", "tube", "reserved_at", "_lane", "_loop", "ttr", "_gen", "_run")

    def __init__(self, id: int, body: bytes, tube: Optional[str], lane: _Lane,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.id = id
        self.body = body
        self.tube = tube
        self.reserved_at = time.monotonic()
        self.ttr: Optional[int] = None
        self._gen = lane.client.generation      # its reservation is this connection's
        self._run = 0
        self._lane = lane
        self._loop = loop

    def __repr__(self) -> str:
        return "<fastbean.worker.Job %d in %s>" % (self.id, self.tube)

    async def astats(self) -> Stats:
        return await self._lane.client.call(P.stats_job(self.id), self._gen)

    async def atouch(self) -> None:
        await self._lane.client.call(P.touch(self.id), self._gen)

    def _call(self, coro: Awaitable[Any]) -> Any:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise RuntimeError("in a coroutine handler, await job.astats() or job.atouch()")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()  # type: ignore[arg-type]

    def stats(self) -> Stats:
        """stats-job of this job (its tube, pri, reserves, time-left...)."""
        result: Stats = self._call(self.astats())
        return result

    def touch(self) -> None:
        """Start the job's TTR again (the worker also does so near its end)."""
        self._call(self.atouch())


class Dispatch(NamedTuple):
    """What a dispatching handler (one with a `dispatch(job)` method, such as
    fastbean.Tasks) says about one job: the callable to run with it, whether
    that is a coroutine function, and its retry policy (None: the worker's)."""
    call: Callable[[Job], Any]
    is_async: bool
    retry: Optional[RetryPolicy]


Handler = Callable[[Job], Any]


class Metrics:
    """Counts and timings, as Prometheus text (exposition())."""

    def __init__(self) -> None:
        self.reserved = 0
        self.outcomes: Dict[str, int] = {"deleted": 0, "released": 0, "buried": 0, "lost": 0}
        self.touches = 0
        self.running = 0
        self.buckets = [0] * (len(METRIC_BUCKETS) + 1)
        self.seconds_sum = 0.0
        self.batch_reserves = 0
        self.reconnects = 0

    def observe(self, seconds: float) -> None:
        i = 0
        while i < len(METRIC_BUCKETS) and seconds > METRIC_BUCKETS[i]:
            i += 1
        self.buckets[i] += 1
        self.seconds_sum += seconds

    def exposition(self) -> str:
        out = []

        def metric(name: str, kind: str, help_text: str, samples: Iterable[Tuple[str, float]]) -> None:
            out.append("# HELP %s %s\n# TYPE %s %s\n" % (name, help_text, name, kind))
            for labels, value in samples:
                out.append("%s%s %s\n" % (name, labels, repr(value) if isinstance(value, float) else value))

        metric("fastbean_worker_jobs_reserved_total", "counter", "Jobs reserved.", [("", self.reserved)])
        metric("fastbean_worker_jobs_total", "counter",
               "Jobs finished, by outcome: deleted (done), released (to retry), buried, lost "
               "(the reservation ended first).",
               [('{outcome="%s"}' % k, v) for k, v in self.outcomes.items()])
        metric("fastbean_worker_jobs_running", "gauge", "Jobs running now.", [("", self.running)])
        metric("fastbean_worker_touches_total", "counter", "Jobs touched as their TTR ran out.",
               [("", self.touches)])
        metric("fastbean_worker_reconnects_total", "counter", "Connections made again after a loss.",
               [("", self.reconnects)])
        out.append("# HELP fastbean_worker_job_seconds Time from reserve to the end of the handler.\n"
                   "# TYPE fastbean_worker_job_seconds histogram\n")
        cum = 0
        for bound, n in zip([repr(b) for b in METRIC_BUCKETS] + ["+Inf"], self.buckets):
            cum += n
            out.append('fastbean_worker_job_seconds_bucket{le="%s"} %d\n' % (bound, cum))
        out.append("fastbean_worker_job_seconds_sum %r\nfastbean_worker_job_seconds_count %d\n"
                   % (self.seconds_sum, cum))
        return "".join(out)

    async def serve(self, host: str, port: int) -> asyncio.Server:
        """An HTTP endpoint with GET /metrics, on host:port (0: any free port)."""
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                path = request.split(b" ", 2)[1] if request.count(b" ") >= 2 else b"/"
                if path.split(b"?")[0] == b"/metrics":
                    body, status = self.exposition().encode(), b"200 OK"
                    kind = b"text/plain; version=0.0.4; charset=utf-8"
                else:
                    body, status, kind = b"not found\n", b"404 Not Found", b"text/plain"
                writer.write(b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
                             b"Connection: close\r\n\r\n%s" % (status, kind, len(body), body))
                await writer.drain()
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(handle, host, port)
        host, port = server.sockets[0].getsockname()[:2]
        _event(logging.INFO, "worker-metrics", "metrics on http://%(host)s:%(port)d/metrics", host=host, port=port)
        return server


class _Lane:
    """One connection, the jobs it reserved, and its loop."""

    def __init__(self, client: AsyncClient, tubes: List[str], capacity: int) -> None:
        self.client = client
        self.tubes = tubes
        self.capacity = capacity
        self.running: Dict[int, asyncio.Future[Any]] = {}
        self.wake = asyncio.Event()
        self.blocking = False           # in a reserve that waits: safe to cancel
        self.batch: Optional[bool] = None   # reserve-batch works here (None: not tried)
        self.task: Optional[asyncio.Task[None]] = None

    async def open(self, backoff: Backoff, stopping: Callable[[], bool]) -> None:
        """Connect, watch the tubes and ignore default, trying again with
        backoff until it works or stopping()."""
        c = self.client
        attempt = 0
        while True:
            try:
                await c.connect()
                for tube in self.tubes:
                    await c.watch(tube)
                if "default" not in self.tubes:
                    await c.ignore("default")
                return
            except (ConnectError, ConnectionLost) as e:
                if stopping():
                    return
                _event(logging.WARNING, "worker-connect-failed", "%(error)s; trying again", error=str(e))
                await asyncio.sleep(backoff.delay(attempt))
                attempt += 1

    async def fetch(self, count: int, block: bool, metrics: Metrics) -> List[ClientJob]:
        """Up to count jobs (reserve-batch where the server has it); waits
        BLOCK_S for one if block, else none."""
        c = self.client
        if self.batch is not False and self.capacity > 1:
            try:
                jobs = await c.reserve_batch(count, BLOCK_S if block else None)
                self.batch = True
                metrics.batch_reserves += 1
                return jobs
            except (UnknownCommand, BadFormat):
                self.batch = False      # beanstalkd, or fastbean --strict
                _event(logging.INFO, "worker-no-batch", "%(node)s has no reserve-batch: reserving "
                       "one job at a time", node=c.where)
            except DeadlineSoon:
                return []
        try:
            return [await c.reserve_with_timeout(BLOCK_S if block else 0)]
        except (TimedOut, DeadlineSoon):
            return []


def _event(level: int, name: str, text: str, **fields: Any) -> None:
    """A named log event (fastbean.logs), skipped at once below the level."""
    if log.isEnabledFor(level):
        event(level, name, text, **fields)


class Worker:
    """Runs `handler` on the jobs of `tubes`.

    handler: a function (run in a thread pool of `concurrency` threads) or a
    coroutine function (run as tasks), called with a Job; returning deletes
    the job, raising releases it with a backoff delay or buries it (retry).
    An object with a dispatch(job) method (fastbean.Tasks) chooses per job.

    address: one server, or a list of addresses (an HA group). nodes: instead,
    several nodes (each an address or an HA group's list), each tube served by
    the node that owns it (fastbean.client.owner, as Pool puts them).
    concurrency: jobs run at once. batch: jobs a lane reserves at once (default
    min(concurrency, 16)). grace: seconds running jobs get after stop().
    fetch_tube: with several tubes on a node, look up each job's tube
    (stats-job, one round trip) so that job.tube is set; a dispatching
    handler sets it itself. reconnect: the connections' Backoff.

    await run() (or run_forever() from a thread with no loop) until stop().
    `ready` is set once every lane is connected and watching."""

    def __init__(self, handler: Handler | Any, tubes: Sequence[str], *,
                 address: Union[Address, Sequence[Address], None] = None,
                 nodes: Optional[Sequence[Union[Address, Sequence[Address]]]] = None,
                 concurrency: int = 1, batch: Optional[int] = None, retry: Optional[RetryPolicy] = None,
                 grace: float = GRACE_S, timeout: Optional[float] = TIMEOUT, tls: Any = None,
                 server_hostname: Optional[str] = None, token: Optional[str] = None,
                 reconnect: Optional[Backoff] = None, fetch_tube: bool = True,
                 metrics_port: Optional[int] = None, metrics_host: str = "127.0.0.1") -> None:
        if not tubes:
            raise ValueError("a worker needs at least one tube")
        for t in tubes:
            check_tube(t)
        if concurrency < 1:
            raise ValueError("concurrency is 1 or more")
        if (address is None) == (nodes is None):
            raise ValueError("give address or nodes, one of them")
        self.handler = handler
        self.tubes = list(dict.fromkeys(tubes))
        self.node_list: List[Union[Address, Sequence[Address]]] = [address] if address is not None \
            else list(nodes or [])
        self.concurrency = concurrency
        self.batch = max(1, min(batch or min(concurrency, MAX_BATCH), concurrency, 1000))
        self.retry = retry or RetryPolicy()
        self.grace = grace
        self.client_options: Dict[str, Any] = dict(timeout=timeout, tls=tls, server_hostname=server_hostname,
                                                   token=token, reconnect=reconnect or RECONNECT)
        self.fetch_tube = fetch_tube
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.metrics = Metrics()
        self.ready = threading.Event()
        self.stopping = False
        self.exit_now = False
        self._dispatch: Optional[Callable[[Job], Dispatch]] = getattr(handler, "dispatch", None)
        self._is_async = inspect.iscoroutinefunction(handler) or \
            inspect.iscoroutinefunction(type(handler).__call__)
        self._lanes: List[_Lane] = []
        self._runs = 0
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop: Optional[asyncio.Event] = None
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._metrics_server: Optional[asyncio.Server] = None
        self.metrics_address: Optional[Tuple[str, int]] = None

    # -- running

    def _plan(self) -> List[Tuple[Union[Address, Sequence[Address]], List[str]]]:
        """(node, its tubes) for each node that owns some of self.tubes."""
        keys = [_node_key(n) for n in self.node_list]
        plan: Dict[int, List[str]] = {}
        for tube in self.tubes:
            plan.setdefault(owner(tube, keys) if len(keys) > 1 else 0, []).append(tube)
        return [(self.node_list[i], ts) for i, ts in sorted(plan.items())]

    async def run(self) -> None:
        """Work until stop(): then stop reserving, give running jobs `grace`
        seconds, and give back (by closing their connection) those still
        running."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self.stopping:
            self._stop.set()
        if self._dispatch is not None or not self._is_async:
            self._pool = concurrent.futures.ThreadPoolExecutor(self.concurrency, "fastbean-worker")
        plan = self._plan()
        lanes_per_node = max(1, math.ceil(self.concurrency / self.batch))
        for node, tubes in plan:
            for _ in range(lanes_per_node):
                client = AsyncClient(node, **self.client_options)
                self._lanes.append(_Lane(client, tubes, self.batch))
        if self.metrics_port is not None:
            self._metrics_server = await self.metrics.serve(self.metrics_host, self.metrics_port)
            self.metrics_address = self._metrics_server.sockets[0].getsockname()[:2]
        try:
            await asyncio.gather(*(lane.open(self.client_options["reconnect"], lambda: self.stopping)
                                   for lane in self._lanes))
            for lane in self._lanes:
                lane.task = asyncio.ensure_future(self._lane_loop(lane))
            self.ready.set()
            _event(logging.INFO, "worker-start", "working on %(tubes)s with %(concurrency)d at once",
                   tubes=",".join(self.tubes), concurrency=self.concurrency,
                   nodes=";".join(_node_key(n) for n, _ in plan))
            await self._stop.wait()
            await self._shut_down()
        finally:
            for lane in self._lanes:
                if lane.task is not None and not lane.task.done():
                    lane.task.cancel()
                await lane.client.close()
            if self._metrics_server is not None:
                self._metrics_server.close()
            if self._pool is not None:
                self._pool.shutdown(wait=False)

    def stop(self) -> None:
        """Stop reserving and finish (thread-safe; from a signal handler too)."""
        self.stopping = True
        loop, ev = self._loop, self._stop
        if loop is not None and ev is not None:
            loop.call_soon_threadsafe(self._begin_stop)

    def _begin_stop(self) -> None:
        assert self._stop is not None
        if self._stop.is_set():
            return
        self._stop.set()
        for lane in self._lanes:
            lane.wake.set()
            # a lane that waits in a reserve holds no job: its connection can go now
            if lane.blocking and lane.task is not None:
                lane.task.cancel()

    async def _shut_down(self) -> None:
        running = [f for lane in self._lanes for f in lane.running.values()]
        _event(logging.INFO, "worker-stop", "stopping: %(running)d jobs running, %(grace)gs to finish",
               running=len(running), grace=self.grace)
        if running:
            await asyncio.wait(running, timeout=self.grace)
        left = 0
        for lane in self._lanes:
            if lane.running:
                left += len(lane.running)
                # closing the connection gives its reserved jobs back, ready, with their
                # priority; unlike a release, that is not an attempt for a retry limit
                await lane.client.close()
                for f in list(lane.running.values()):
                    f.cancel()
        if left:
            _event(logging.WARNING, "worker-released", "%(count)d jobs did not finish in %(grace)gs: "
                   "given back to the server", count=left, grace=self.grace)
        for lane in self._lanes:
            if lane.task is not None:
                lane.task.cancel()
                try:
                    await lane.task
                except BaseException:
                    pass

    def run_forever(self, signals: bool = True) -> int:
        """Run in a new event loop (uvloop when installed) until SIGTERM or SIGINT
        (signals=True) or stop(); 0 after a graceful stop. A second SIGINT exits
        at once, with status 130."""
        return run_in_new_loop(self, signals)

    # -- lanes

    async def _lane_loop(self, lane: _Lane) -> None:
        assert self._stop is not None
        c = lane.client
        seen_reconnects = c.reconnects
        while not self._stop.is_set():
            lane.wake.clear()       # before looking: a job that ends from here on wakes the lane
            free = min(lane.capacity - len(lane.running), self.concurrency - self.metrics.running)
            if free <= 0:
                await lane.wake.wait()
                continue
            block = not lane.running
            try:
                lane.blocking = block
                jobs = await lane.fetch(free, block, self.metrics)
            except (ConnectError, ConnectionLost) as e:
                lane.blocking = False
                if lane.running:
                    _event(logging.WARNING, "worker-connection-lost",
                           "lost the connection holding %(count)d running jobs: %(error)s; the server "
                           "gives them to a worker again after their TTR or at once",
                           count=len(lane.running), error=str(e))
                await asyncio.sleep(self.client_options["reconnect"].delay(0))
                continue
            finally:
                lane.blocking = False
            if c.reconnects != seen_reconnects:
                self.metrics.reconnects += c.reconnects - seen_reconnects
                seen_reconnects = c.reconnects
                _event(logging.INFO, "worker-reconnected", "connected again to %(node)s", node=c.where)
            if self._stop.is_set():
                # reserved as the stop came: give them back at once, with their priority
                if jobs and not lane.running:
                    await c.close()         # a close gives them back, and is not an attempt
                for j in jobs if lane.running else ():
                    try:
                        pri = int((await c.stats_job(j.id)).get("pri", DEFAULT_PRI))
                        await c.release(j.id, pri, 0)
                    except ClientError:
                        pass
                break
            for j in jobs:
                self._start(lane, j)
            if not jobs and not block:
                try:
                    await asyncio.wait_for(lane.wake.wait(), POLL_S)
                except asyncio.TimeoutError:
                    pass

    # -- jobs

    def _start(self, lane: _Lane, cj: ClientJob) -> None:
        loop = self._loop
        assert loop is not None
        tube = lane.tubes[0] if len(lane.tubes) == 1 else None
        job = Job(cj.id, cj.body, tube, lane, loop)
        self.metrics.reserved += 1
        self.metrics.running += 1
        self._runs += 1
        job._run = self._runs
        lane.running[job._run] = loop.create_task(self._run_job(lane, job))

    async def _run_job(self, lane: _Lane, job: Job) -> None:
        loop = self._loop
        assert loop is not None
        keeper: Optional[asyncio.Task[None]] = None
        check = loop.call_later(FIRST_CHECK_S, lambda: _start_keeper())

        def _start_keeper() -> None:
            nonlocal keeper
            keeper = loop.create_task(keep_alive(lane.client, job, self.metrics))

        outcome, error = "deleted", None
        try:
            if job.tube is None and self.fetch_tube and self._dispatch is None:
                try:
                    job.tube = str((await lane.client.call(P.stats_job(job.id), job._gen)).get("tube"))
                except ServerError:
                    pass
            retry = self.retry
            try:
                if self._dispatch is not None:
                    d = self._dispatch(job)
                    retry = d.retry or self.retry
                    call, is_async = d.call, d.is_async
                else:
                    call, is_async = self.handler, self._is_async
                if is_async:
                    await call(job)
                else:
                    await loop.run_in_executor(self._pool, call, job)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                error = e
            check.cancel()
            if keeper is not None:
                keeper.cancel()
            if error is None:
                try:
                    await lane.client.call(P.delete(job.id), job._gen)
                except NotFound:
                    outcome = "lost"
            else:
                outcome = await settle_failure(lane.client, job, retry)
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except ClientError as e:
            outcome, error = "lost", e
        except Exception as e:      # a fault of the worker's own: logged, the job left to its TTR
            event(logging.ERROR, "worker-fault", "job %(id)d: the worker failed handling it",
                  exc_info=True, id=job.id)
            outcome, error = "lost", e
        finally:
            check.cancel()
            if keeper is not None:
                keeper.cancel()
            seconds = time.monotonic() - job.reserved_at
            lane.running.pop(job._run, None)
            self.metrics.running -= 1
            if outcome in self.metrics.outcomes:
                self.metrics.outcomes[outcome] += 1
            self.metrics.observe(seconds)
            log_job(job, outcome, seconds, error)
            for other in self._lanes:
                other.wake.set()

def log_job(job: Job, outcome: str, seconds: float, error: Optional[BaseException]) -> None:
    """The job-* event of a job's end."""
    if outcome == "deleted":
        _event(logging.INFO, "job-done", "job %(id)d done in %(seconds).3fs", id=job.id, tube=job.tube,
               seconds=round(seconds, 6))
    elif outcome == "lost":
        _event(logging.WARNING, "job-lost", "job %(id)d: its reservation ended before it finished "
               "(TTR, or a lost connection); the server gives it out again", id=job.id, tube=job.tube,
               seconds=round(seconds, 6), error=None if error is None else str(error))
    elif outcome == "cancelled":
        _event(logging.WARNING, "job-given-back", "job %(id)d did not finish before the stop",
               id=job.id, tube=job.tube, seconds=round(seconds, 6))
    else:
        _event(logging.WARNING, "job-" + outcome, "job %(id)d failed (%(error)s): " + outcome,
               id=job.id, tube=job.tube, seconds=round(seconds, 6), error="%s: %s" % (
                   type(error).__name__, error))

async def settle_failure(c: AsyncClient, job: Job, retry: RetryPolicy) -> str:
    """A job whose handler raised: released with retry's delay, or buried
    once it has had retry.attempts reserves; its outcome."""
    pri, attempt = DEFAULT_PRI, 1
    try:
        st = await c.call(P.stats_job(job.id), job._gen)
        pri, attempt = int(st.get("pri", DEFAULT_PRI)), int(st.get("reserves", 1))
    except NotFound:
        return "lost"
    except NotPermitted:
        pass                # a token without monitor on the tube: no attempt count
    if retry.attempts is not None and attempt >= retry.attempts:
        await c.call(P.bury(job.id, pri), job._gen)
        return "buried"
    try:
        await c.call(P.release(job.id, pri, retry.delay(attempt)), job._gen)
    except NotFound:
        return "lost"
    return "released"

async def keep_alive(c: AsyncClient, job: Job, metrics: Metrics) -> None:
    """Touch the job before DEADLINE_SOON's last second of its TTR, for as
    long as its handler runs."""
    try:
        st = await c.call(P.stats_job(job.id), job._gen)
        ttr, left = int(st["ttr"]), int(st["time-left"])
        job.ttr = ttr
        wait = max(0.0, (left - 1) / 2)
        while True:
            await asyncio.sleep(wait)
            await c.call(P.touch(job.id), job._gen)
            metrics.touches += 1
            wait = max(0.1, (ttr - 1) / 2)
    except (ClientError, KeyError, ValueError):
        return


def run_in_new_loop(worker: Worker, signals: bool) -> int:
    """Worker.run_forever."""
    try:
        import uvloop
        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    interrupts = [0]

    def interrupted() -> None:
        interrupts[0] += 1
        if interrupts[0] > 1:
            _event(logging.WARNING, "worker-exit", "second interrupt: exiting at once")
            logging.shutdown()
            os._exit(EXIT_INTERRUPTED)
        worker.stop()

    try:
        asyncio.set_event_loop(loop)
        if signals:
            loop.add_signal_handler(signal.SIGTERM, worker.stop)
            loop.add_signal_handler(signal.SIGINT, interrupted)
        loop.run_until_complete(worker.run())
    finally:
        loop.close()
        asyncio.set_event_loop(None)
    return 0


# -- the command line

PROG = "fastbean-worker"


def load(target: str) -> Any:
    """MODULE:NAME (NAME may be dotted) -> the object; the current directory is
    on the import path, as for `python -m`."""
    module, sep, name = target.partition(":")
    if not sep or not module or not name:
        raise ValueError("%r: give MODULE:CALLABLE, e.g. myapp.jobs:send_email" % target)
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError("not a whole number above 0: %r" % text)
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError("not a number of seconds: %r" % text)
    return value


def build_parser() -> argparse.ArgumentParser:
    from fastbean.ctl.main import add_connection_options
    parser = argparse.ArgumentParser(
        prog=PROG, description="Run MODULE:CALLABLE on each job of the tubes: returning deletes "
        "the job, raising releases it with a backoff delay, and buries it after --attempts. "
        "MODULE:APP of a fastbean.Tasks app runs every task of the app on its tubes.",
        epilog="SIGTERM (or SIGINT) stops reserving, gives running jobs --grace seconds and gives "
               "back the others; exit status 0. A second SIGINT exits at once (130).")
    parser.add_argument("target", metavar="MODULE:CALLABLE")
    parser.add_argument("-t", "--tube", dest="tubes", action="append", metavar="NAME",
                        help="a tube to work on (repeat for more; default: a Tasks app's tubes)")
    parser.add_argument("-c", "--concurrency", type=_positive_int, default=1, metavar="N",
                        help="jobs run at once (default: 1)")
    parser.add_argument("--batch", type=_positive_int, default=None, metavar="N",
                        help="jobs reserved in one round trip (default: the concurrency, at most %d)"
                        % MAX_BATCH)
    parser.add_argument("--node", action="append", metavar="ADDR[,ADDR...]",
                        help="a node (host:port, or unix:PATH; an HA group's addresses joined by "
                             "commas); repeat for several nodes, each tube on the node that owns it "
                             "(instead of -l and -p)")
    parser.add_argument("--attempts", type=_positive_int, default=5, metavar="N",
                        help="bury a job once it has been reserved N times (default: 5)")
    parser.add_argument("--server-retry-limit", action="store_true",
                        help="never bury: release every failed job, and leave the end to the "
                             "server's retry-limit")
    parser.add_argument("--backoff-base", type=_seconds, default=1.0, metavar="SECONDS",
                        help="first retry's longest delay (default: 1)")
    parser.add_argument("--backoff-factor", type=_seconds, default=2.0, metavar="X",
                        help="each retry's longest delay is X times the previous (default: 2)")
    parser.add_argument("--backoff-max", type=_seconds, default=300.0, metavar="SECONDS",
                        help="longest retry delay (default: 300)")
    parser.add_argument("--grace", type=_seconds, default=GRACE_S, metavar="SECONDS",
                        help="on SIGTERM, seconds running jobs get to finish (default: %g)" % GRACE_S)
    parser.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help="serve Prometheus metrics on http://HOST:PORT/metrics (0: a free port)")
    parser.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                        help="the metrics endpoint's address (default: 127.0.0.1)")
    parser.add_argument("--log-format", choices=("json", "text"), default="json",
                        help="one JSON object per line (default) or text")
    parser.add_argument("-q", "--quiet", action="store_true", help="log only failures, not every job")
    parser.add_argument("--version", action="version", version="%s %s" % (PROG, __version__))
    add_connection_options(parser, json=False)
    return parser


def _setup_logs(fmt: str, quiet: bool) -> None:
    from fastbean import logs
    setup: Callable[..., None] = logs.setup
    setup(fmt, 0)
    logging.getLogger("fastbean").setLevel(logging.WARNING if quiet else logging.INFO)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from fastbean.ctl.commands import UsageError
    from fastbean.ctl.main import address_of, fill_defaults, tls_of, token_of
    parser = build_parser()
    args = parser.parse_args(argv)
    given_address = hasattr(args, "addr") or hasattr(args, "port")
    fill_defaults(args)
    _setup_logs(args.log_format, args.quiet)
    try:
        try:
            target = load(args.target)
        except (ValueError, ImportError, AttributeError) as e:
            raise UsageError("cannot load %s: %s" % (args.target, e)) from None
        tubes = args.tubes or list(getattr(target, "tubes", None) or [])
        if not tubes:
            raise UsageError("no tube: give --tube NAME")
        for t in tubes:
            try:
                check_tube(t)
            except ValueError as e:
                raise UsageError(str(e)) from None
        if not callable(target) and getattr(target, "dispatch", None) is None:
            raise UsageError("%s is not callable" % args.target)
        nodes: Optional[List[Union[Address, List[Address]]]] = None
        address: Union[Address, List[Address], None] = None
        if args.node:
            nodes = []
            for text in args.node:
                group = [parse_address(a) for a in text.split(",") if a]
                nodes.append(group[0] if len(group) == 1 else group)
        elif not given_address and getattr(target, "nodes", None):
            nodes = list(target.nodes)
        else:
            address = address_of(args.addr, args.port)
        retry = RetryPolicy(None if args.server_retry_limit else args.attempts, args.backoff_base,
                            args.backoff_factor, args.backoff_max)
        worker = Worker(target, tubes, address=address, nodes=nodes, concurrency=args.concurrency,
                        batch=args.batch, retry=retry, grace=args.grace, timeout=args.timeout,
                        tls=tls_of(args), server_hostname=args.tls_server_name, token=token_of(args),
                        metrics_port=args.metrics_port, metrics_host=args.metrics_host)
    except UsageError as e:
        sys.stderr.write("%s: %s (see %s -h)\n" % (PROG, e, PROG))
        return EXIT_USAGE
    status = worker.run_forever()
    _event(logging.INFO, "worker-exit", "stopped")
    logging.shutdown()
    if any(t.name.startswith("fastbean-worker") and t.is_alive() for t in threading.enumerate()):
        os._exit(status)    # a thread handler still runs past the grace period: do not wait for it
    return status


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["Worker", "Job", "RetryPolicy", "Dispatch", "Metrics", "main", "load"]
