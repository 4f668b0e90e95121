"""Tasks: functions that run on a worker, sent as JSON jobs.

    app = fastbean.Tasks(("127.0.0.1", 11300))

    @app.task(tube="email", retries=5, ttr=120)
    def send_email(to, subject=""):
        ...

    send_email.delay("ada@example.com", subject="hi")     # a job in tube email
    send_email.delay_for(3600, "bob@example.com")         # ready in an hour

and `fastbean-worker myapp:app` runs every task of the app. A job's body is
{"task": name, "args": [...], "kwargs": {...}}: any beanstalk client can
send one. inline() (the fastbean_tasks fixture of the pytest plugin) runs
tasks at once, in-process, with no server.
"""
from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import inspect
import json
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Dict, Generic, List, NamedTuple, Optional, Tuple, TypeVar, Union, overload

from fastbean.client import (
    DEFAULT_PRI,
    DEFAULT_TTR,
    TIMEOUT,
    Address,
    Client,
    Node,
    Pool,
    addresses_of,
    check_tube,
    parse_address,
)
from fastbean.worker import Dispatch, Job, RetryPolicy

R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])
KEY_MAX = 200


class Sent(NamedTuple):
    """What sending a task did: the job's id (None inline), the state of the
    job that already held its unique key ("ready", "reserved", "delayed",
    "buried", "deleted" in a cooldown; None for a new job), its node's index
    in a pool (else None), and, inline, the task's return value."""
    id: Optional[int]
    existing: Optional[str] = None
    node: Optional[int] = None
    value: Any = None


class Call(NamedTuple):
    """One task run inline: its name, arguments and return value."""
    task: str
    args: Tuple[Any, ...]
    kwargs: Dict[str, Any]
    value: Any


class Inline:
    """Tasks run inline while it is active; `calls` lists them in order."""

    def __init__(self) -> None:
        self.calls: List[Call] = []

    def called(self, task: str) -> List[Call]:
        """The runs of one task (by name, or the Task itself)."""
        name = task.name if isinstance(task, Task) else task
        return [c for c in self.calls if c.task == name]


_inline: List[Inline] = []          # the active inline() blocks, innermost last
_inline_lock = threading.Lock()


@contextlib.contextmanager
def inline() -> Iterator[Inline]:
    """Within the block, every task of every app runs when sent, in this
    process, with no server: its arguments go through JSON as on a real send,
    its exceptions propagate, and Sent.value is its return value."""
    rec = Inline()
    with _inline_lock:
        _inline.append(rec)
    try:
        yield rec
    finally:
        with _inline_lock:
            _inline.remove(rec)


def _seconds_until(when: datetime.datetime) -> int:
    """Whole seconds from now to `when` (naive: local time), 0 if past."""
    return max(0, math.ceil(when.timestamp() - time.time()))


class Task(Generic[R]):
    """A function registered with @app.task. Call it to run it here; send it
    with delay(), delay_for(), apply_at() or apply()."""

    def __init__(self, app: Tasks, fn: Callable[..., R], name: str, tube: str, retries: Optional[int],
                 ttr: int, priority: int, delay: int, unique: bool,
                 unique_key: Union[str, Callable[..., str], None], cooldown: int, bind: bool) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.tube = tube
        self.retries = retries
        self.ttr = ttr
        self.priority = priority
        self.default_delay = delay
        self.unique = unique or unique_key is not None
        self.unique_key = unique_key
        self.cooldown = cooldown
        self.bind = bind
        self.is_async = inspect.iscoroutinefunction(fn)
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", name)

    def __repr__(self) -> str:
        return "<Task %s on tube %s>" % (self.name, self.tube)

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        return self.fn(*args, **kwargs)

    def delay(self, *args: Any, **kwargs: Any) -> Sent:
        """Send it to run as soon as a worker takes it (after the task's default delay)."""
        return self.apply(args, kwargs)

    def delay_for(self, seconds: Union[int, float, datetime.timedelta], *args: Any, **kwargs: Any) -> Sent:
        """Send it to run in `seconds` (a number or a timedelta; rounded up)."""
        if isinstance(seconds, datetime.timedelta):
            seconds = seconds.total_seconds()
        return self.apply(args, kwargs, delay=max(0, math.ceil(seconds)))

    def apply_at(self, when: datetime.datetime, *args: Any, **kwargs: Any) -> Sent:
        """Send it to run at `when` (a datetime; naive means local time)."""
        return self.apply(args, kwargs, at=when)

    def key_for(self, args: Sequence[Any], kwargs: Dict[str, Any]) -> Optional[str]:
        """The idempotency key a send with these arguments carries, or None."""
        if not self.unique:
            return None
        if callable(self.unique_key):
            key = str(self.unique_key(*args, **kwargs))
        elif self.unique_key is not None:
            key = self.unique_key
        else:
            digest = hashlib.sha256(_dumps({"args": list(args), "kwargs": kwargs})).hexdigest()[:32]
            key = "%s/%s" % (self.name, digest)
        raw = key.encode("utf-8", "replace")
        if not 1 <= len(raw) <= KEY_MAX or any(c <= 32 or c > 126 or c == 58 for c in raw):
            # any text works as a key: one the server would refuse (spaces, colons...) is hashed
            key = "%s/%s" % (self.name[:100].replace(":", "."), hashlib.sha256(raw).hexdigest()[:40])
        return key

    def apply(self, args: Sequence[Any] = (), kwargs: Optional[Dict[str, Any]] = None, *,
              delay: Optional[int] = None, at: Optional[datetime.datetime] = None,
              priority: Optional[int] = None, ttr: Optional[int] = None,
              unique_key: Optional[str] = None) -> Sent:
        """Send it with every option: delay (seconds) or at (a datetime),
        priority, ttr, and unique_key (this send's idempotency key: no second
        job while one with it is in the tube)."""
        kwargs = dict(kwargs or {})
        body = _dumps({"task": self.name, "args": list(args), "kwargs": kwargs})
        if _inline or self.app.eager:
            return self._run_inline(body)
        if at is not None:
            delay = _seconds_until(at)
        key = unique_key or self.key_for(args, kwargs)
        return self.app._send(self.tube, body, self.priority if priority is None else priority,
                              self.default_delay if delay is None else delay,
                              self.ttr if ttr is None else ttr, key, self.cooldown)

    def _run_inline(self, body: bytes) -> Sent:
        doc = json.loads(body)
        args, kwargs = tuple(doc["args"]), doc["kwargs"]
        call_args = ((_InlineJob(body, self.tube),) if self.bind else ()) + args
        value: Any = self.fn(*call_args, **kwargs)
        if inspect.iscoroutine(value):
            value = _run_coroutine(value)
        with _inline_lock:
            recorders = list(_inline)
        for rec in recorders:
            rec.calls.append(Call(self.name, args, kwargs, value))
        return Sent(None, None, None, value)


class _InlineJob:
    """What a bound task receives inline in place of a worker's Job."""

    def __init__(self, body: bytes, tube: str) -> None:
        self.id = 0
        self.body = body
        self.tube = tube

    def touch(self) -> None:
        pass

    async def atouch(self) -> None:
        pass


def _run_coroutine(coro: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # a test that is itself a coroutine: run the task's on a loop of its own
    out: List[Any] = []
    failure: List[BaseException] = []

    def run() -> None:
        try:
            out.append(asyncio.run(coro))
        except BaseException as e:
            failure.append(e)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    if failure:
        raise failure[0]
    return out[0]


def _dumps(doc: Dict[str, Any]) -> bytes:
    try:
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    except (TypeError, ValueError) as e:
        raise TypeError("a task's arguments must be JSON: %s" % e) from None


class UnknownTask(LookupError):
    """A job names a task this app does not have (or is not a task's JSON)."""


class Tasks:
    """An app: tasks, where they are sent, and how a worker runs them.

    target: a server's address ((host, port), "host:port" or "unix:PATH"), a
    list of nodes (each an address or an HA group's list: a Pool spreads the
    tubes), or a Client or Pool to send through. tube, retries, ttr,
    priority: the defaults of its tasks. retries: failed runs retried before
    the job is buried (None: leave it to the server's retry-limit). backoff:
    the retry delays (base, factor, max seconds). eager: run every task
    inline (as inline() does), for tests or scripts.
    The other arguments are those of Client."""

    def __init__(self, target: Union[Address, Sequence[Node], Client, Pool, None] = None, *,
                 tube: str = "default", retries: Optional[int] = 3, ttr: int = DEFAULT_TTR,
                 priority: int = DEFAULT_PRI, backoff: Tuple[float, float, float] = (1.0, 2.0, 300.0),
                 eager: bool = False, timeout: Optional[float] = TIMEOUT, tls: Any = None,
                 server_hostname: Optional[str] = None, token: Optional[str] = None) -> None:
        check_tube(tube)
        self.tube = tube
        self.retries = retries
        self.ttr = ttr
        self.priority = priority
        self.backoff = backoff
        self.eager = eager
        self.registry: Dict[str, Task[Any]] = {}
        self._client: Union[Client, Pool, None] = None
        self.nodes: Optional[List[Node]] = None
        self._options: Dict[str, Any] = dict(timeout=timeout, tls=tls, server_hostname=server_hostname,
                                             token=token, reconnect=True)
        if isinstance(target, (Client, Pool)):
            self._client = target
            self.nodes = [target.addresses] if isinstance(target, Client) else list(target.nodes)
        elif isinstance(target, str):
            self.nodes = [parse_address(target)]
        elif isinstance(target, tuple):
            self.nodes = [addresses_of(target)[0]]
        elif target is not None:
            self.nodes = list(target)
        self._lock = threading.Lock()

    @property
    def tubes(self) -> List[str]:
        """The tubes of its tasks (a worker of the app watches them)."""
        return sorted({t.tube for t in self.registry.values()}) or [self.tube]

    @overload
    def task(self, fn: Callable[..., R]) -> Task[R]: ...

    @overload
    def task(self, fn: None = None, *, name: Optional[str] = None, tube: Optional[str] = None,
             retries: Union[int, None, str] = "default", ttr: Optional[int] = None,
             priority: Optional[int] = None, delay: int = 0, unique: bool = False,
             unique_key: Union[str, Callable[..., str], None] = None, cooldown: int = 0,
             bind: bool = False) -> Callable[[Callable[..., R]], Task[R]]: ...

    def task(self, fn: Optional[Callable[..., R]] = None, *, name: Optional[str] = None,
             tube: Optional[str] = None, retries: Union[int, None, str] = "default",
             ttr: Optional[int] = None, priority: Optional[int] = None, delay: int = 0,
             unique: bool = False, unique_key: Union[str, Callable[..., str], None] = None,
             cooldown: int = 0, bind: bool = False) -> Union[Task[R], Callable[[Callable[..., R]], Task[R]]]:
        """Register a function as a task (as @app.task or @app.task(...)).

        name: its name in jobs (default module.function). tube, retries, ttr,
        priority: the app's defaults otherwise. delay: seconds every send
        waits by default. unique: at most one job per task and arguments in
        the tube (an idp: key from their hash); unique_key: the key itself, or
        a function of the arguments that makes it; cooldown: seconds the key
        still holds after its job is deleted. bind: the function gets the
        worker's Job first (to touch it, or read job.id)."""
        def register(f: Callable[..., R]) -> Task[R]:
            task_name = name or "%s.%s" % (f.__module__, f.__qualname__)
            if task_name in self.registry:
                raise ValueError("a task named %r is registered already" % task_name)
            t = Task(self, f, task_name, tube or self.tube,
                     self.retries if retries == "default" else retries,  # type: ignore[arg-type]
                     self.ttr if ttr is None else ttr, self.priority if priority is None else priority,
                     delay, unique, unique_key, cooldown, bind)
            check_tube(t.tube)
            self.registry[task_name] = t
            return t
        return register(fn) if fn is not None else register

    # -- sending

    def _connection(self) -> Union[Client, Pool]:
        if self._client is None:
            if not self.nodes:
                raise ValueError("this Tasks app has no server: give Tasks(address), or run it inline")
            o = self._options
            if len(self.nodes) == 1:
                self._client = Client(self.nodes[0], o["timeout"], tls=o["tls"],
                                      server_hostname=o["server_hostname"], token=o["token"],
                                      reconnect=True)
            else:
                self._client = Pool(self.nodes, o["timeout"], tls=o["tls"],
                                    server_hostname=o["server_hostname"], token=o["token"])
        return self._client

    def _send(self, tube: str, body: bytes, pri: int, delay: int, ttr: int, key: Optional[str],
              cooldown: int) -> Sent:
        with self._lock:
            c = self._connection()
            if isinstance(c, Pool):
                if key is None:
                    pj = c.put(tube, body, pri, delay, ttr)
                    return Sent(pj.id, None, pj.node)
                pj, state = c.put_unique(tube, body, key, cooldown, pri, delay, ttr)
                return Sent(pj.id, state, pj.node)
            c.use(tube)
            if key is None:
                return Sent(c.put(body, pri, delay, ttr))
            jid, state = c.put_unique(body, key, cooldown, pri, delay, ttr)
            return Sent(jid, state)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # -- running (the worker)

    def retry_policy(self, task: Task[Any]) -> RetryPolicy:
        base, factor, most = self.backoff
        return RetryPolicy(None if task.retries is None else task.retries + 1, base, factor, most)

    def decode(self, body: bytes) -> Tuple[Task[Any], List[Any], Dict[str, Any]]:
        """A job's body -> (its task, args, kwargs); UnknownTask if it is none of ours."""
        try:
            doc = json.loads(body)
            name, args, kwargs = doc["task"], doc.get("args", []), doc.get("kwargs", {})
        except (ValueError, TypeError, KeyError):
            raise UnknownTask("not a task's job: %r" % body[:80]) from None
        task = self.registry.get(name)
        if task is None or not isinstance(args, list) or not isinstance(kwargs, dict):
            raise UnknownTask("no task named %r here (known: %s)" % (name, ", ".join(sorted(self.registry))))
        return task, args, kwargs

    def dispatch(self, job: Job) -> Dispatch:
        """What the worker runs for a job (fastbean.worker.Dispatch)."""
        try:
            task, args, kwargs = self.decode(job.body)
        except UnknownTask as e:
            error = e

            def fail(job: Job) -> None:
                raise error
            return Dispatch(fail, False, None)
        if job.tube is None:
            job.tube = task.tube        # the worker need not ask the server
        call_args = ((job,) if task.bind else ()) + tuple(args)
        fn = task.fn
        return Dispatch(lambda _job: fn(*call_args, **kwargs), task.is_async, self.retry_policy(task))


__all__ = ["Tasks", "Task", "Sent", "Call", "Inline", "inline", "UnknownTask"]
