"""The asyncio client: the same API as :mod:`airlock`, with coroutines.

    from airlock.aio import Sandbox

    async with Sandbox.create(resources={"memory_mb": 256}) as sb:
        res = await sb.exec("echo hello")
        async for chunk in await sb.start("make"):
            ...

Everything of one client runs on the event loop that started it.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import os
from typing import (IO, Any, AsyncIterator, Awaitable, Callable, Deque, Dict, Generator,
                    List, Mapping, Optional, Sequence, Union)

from . import _protocol as P
from ._errors import AirlockError, ClientClosed, InvalidParams, OutputOverflow, error_from_wire
from ._protocol import (Chunk, Command, Data, Event, ExecResult, FileInfo, Info,
                        PolicyResult, PortForward, ProcessInfo, Usage)
from ._sync import DEFAULT_EVENT_BUFFER, DEFAULT_MAX_BUFFERED_OUTPUT

__all__ = ["Client", "Sandbox", "Process", "Policy", "EventStream"]

PathLike = Union[str, "os.PathLike[str]"]
EventHandler = Callable[[Event], Any]


class _Stream:
    def __init__(self, method: str, max_buffered: int) -> None:
        self.method = method
        self.items: Deque[Chunk] = collections.deque()
        self.buffered = 0
        self.max_buffered = max_buffered
        self.final: Optional[Dict[str, Any]] = None
        self.err: Optional[BaseException] = None
        self.wake = asyncio.Event()
        self.on_overflow: Callable[[], None] = lambda: None

    def deliver(self, msg: Dict[str, Any]) -> bool:
        res = msg.get("result")
        chunk = P.chunk_of(res) if "error" not in msg and isinstance(res, dict) else None
        if chunk is None:
            self.final = msg
        elif self.err is None:
            self.items.append(chunk)
            self.buffered += len(chunk.data)
            if self.buffered > self.max_buffered:
                self.err = OutputOverflow(
                    f"more than {self.max_buffered} bytes of output were not read; the command was cancelled",
                    method=self.method)
                self.on_overflow()
        self.wake.set()
        return chunk is None

    def fail(self, err: BaseException) -> None:
        if self.err is None:
            self.err = err
        self.final = self.final or {}
        self.wake.set()

    async def next(self) -> Optional[Chunk]:
        while not self.items and self.final is None and self.err is None:
            self.wake.clear()
            await self.wake.wait()
        if self.items:
            c = self.items.popleft()
            self.buffered -= len(c.data)
            return c
        if self.err is not None and not isinstance(self.err, OutputOverflow):
            raise self.err
        return None


class _Call:
    __slots__ = ("method", "fut")

    def __init__(self, method: str, fut: "asyncio.Future[Dict[str, Any]]") -> None:
        self.method = method
        self.fut = fut

    def deliver(self, msg: Dict[str, Any]) -> bool:
        if not self.fut.done():
            self.fut.set_result(msg)
        return True

    def fail(self, err: BaseException) -> None:
        if not self.fut.done():
            self.fut.set_exception(err)

    async def result(self) -> Any:
        msg = await self.fut
        if "error" in msg:
            raise error_from_wire(msg["error"], self.method)
        return msg.get("result")


class _EventQueue:
    def __init__(self, sandbox_id: Optional[str], types: Optional[Sequence[str]], size: int) -> None:
        self.sandbox_id = sandbox_id
        self.types = set(types) if types else None
        self.size = size
        self.items: Deque[Event] = collections.deque()
        self.dropped = 0
        self.closed = False
        self.wake = asyncio.Event()

    def wants(self, ev: Event) -> bool:
        return ((self.sandbox_id is None or ev.sandbox_id == self.sandbox_id)
                and (self.types is None or ev.type in self.types))

    def put(self, ev: Event) -> None:
        if len(self.items) >= self.size:
            self.dropped += 1
            return
        self.items.append(ev)
        self.wake.set()

    def close(self) -> None:
        self.closed = True
        self.wake.set()


class EventStream:
    """``async for ev in sb.events()``: ends when the sandbox or client
    closes, or on :meth:`close`; ``timeout`` bounds each wait."""

    def __init__(self, owner: "Client", q: _EventQueue, timeout: Optional[float]) -> None:
        self._owner = owner
        self._q = q
        self.timeout = timeout

    @property
    def dropped(self) -> int:
        return self._q.dropped

    def __aiter__(self) -> "EventStream":
        return self

    async def __anext__(self) -> Event:
        q = self._q
        while not q.items and not q.closed:
            q.wake.clear()
            if self.timeout is None:
                await q.wake.wait()
            else:
                try:
                    await asyncio.wait_for(q.wake.wait(), self.timeout)
                except asyncio.TimeoutError:
                    raise TimeoutError(f"no event in {self.timeout}s") from None
        if q.items:
            return q.items.popleft()
        raise StopAsyncIteration

    def close(self) -> None:
        self._owner._drop_queue(self._q)


class Client:
    """A connection to ``airlock rpc`` for asyncio: ``await Client.start()``."""

    def __init__(self, proc: "asyncio.subprocess.Process", *, stderr: Optional[IO[str]] = None,
                 max_buffered_output: int = DEFAULT_MAX_BUFFERED_OUTPUT,
                 event_buffer: int = DEFAULT_EVENT_BUFFER) -> None:
        self._proc = proc
        self.pid = proc.pid
        self._loop = asyncio.get_running_loop()
        self._next_id = 0
        self._pending: Dict[int, Union[_Call, _Stream]] = {}
        self._closed: Optional[BaseException] = None
        self._max_buffered = max_buffered_output
        # Whether the server can write host files for large reads
        # (read_file's host_path): until it says otherwise.
        self._host_files = True
        self._event_buffer = event_buffer
        self._queues: List[_EventQueue] = []
        self._handlers: List[tuple] = []
        self._stderr_tail: Deque[str] = collections.deque(maxlen=20)
        self._stderr_out = stderr
        self._tasks: "set[asyncio.Task[Any]]" = set()
        self._err_task = self._loop.create_task(self._stderr_loop())
        self._reader = self._loop.create_task(self._read_loop())

    @classmethod
    async def start(cls, *, binary: Optional[str] = None, args: Sequence[str] = (),
                    env: Optional[Mapping[str, str]] = None, stderr: Optional[IO[str]] = None,
                    **options: Any) -> "Client":
        """Runs ``airlock rpc`` (``binary``, else ``$AIRLOCK_BIN``, else PATH)."""
        exe = P.find_binary(binary)
        proc = await asyncio.create_subprocess_exec(
            exe, "rpc", *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=dict(env) if env is not None else None)
        for s in (proc.stdout, proc.stdin):
            t = getattr(s, "_transport", None)
            pipe = t.get_extra_info("pipe") if t is not None else None
            if pipe is not None:
                P.grow_pipe(pipe.fileno())
        return cls(proc, stderr=stderr, **options)

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed is not None

    async def close(self, timeout: float = 30.0) -> Optional[int]:
        """Ends the session (every sandbox it created is torn down) and waits
        up to ``timeout`` seconds for the process to exit, then kills it."""
        await self._close_sandboxes()
        try:
            if self._proc.stdin is not None and not self._proc.stdin.is_closing():
                self._proc.stdin.close()
        except (OSError, RuntimeError):
            pass
        try:
            rc = await asyncio.wait_for(self._proc.wait(), timeout)
        except asyncio.TimeoutError:
            self._proc.kill()
            rc = await self._proc.wait()
        await asyncio.gather(self._reader, self._err_task, return_exceptions=True)
        return rc

    async def _close_sandboxes(self) -> None:
        """With requests in flight, closes every sandbox of the session first
        (see the sync client)."""
        if not self._pending or self._closed is not None:
            return
        try:
            info = await asyncio.wait_for(self._call("info", {}), 5) or {}
            await asyncio.wait_for(asyncio.gather(*[
                self._call("close", {"sandbox_id": s.get("sandbox_id")})
                for s in info.get("sandboxes") or []]), 5)
        except (AirlockError, asyncio.TimeoutError):
            pass  # the server is gone or stuck: close() kills it

    async def wait(self) -> int:
        return await self._proc.wait()

    # ------------------------------------------------------------ the wire

    async def _send(self, method: str, params: Mapping[str, Any], blob_key: Optional[str] = None,
                    blob: Optional[bytes] = None, stream: bool = False) -> "tuple[int, Any]":
        if self._closed is not None:
            raise self._closed
        self._next_id += 1
        rid = self._next_id
        p: Union[_Call, _Stream]
        if stream:
            p = _Stream(method, self._max_buffered)
            sid = params.get("sandbox_id")
            p.on_overflow = lambda: self._spawn(self._send("cancel", P.with_id({"id": rid}, sid)))
        else:
            p = _Call(method, self._loop.create_future())
        self._pending[rid] = p
        line = P.encode_request(rid, method, params, blob_key, blob)
        w = self._proc.stdin
        try:
            assert w is not None
            w.write(line)
            await w.drain()
        except (ConnectionError, RuntimeError, AssertionError, OSError) as e:
            self._pending.pop(rid, None)
            raise self._closed or ClientClosed(f"the airlock process is gone: {e}{self._tail()}") from None
        return rid, p

    def _spawn(self, coro: Awaitable[Any]) -> None:
        async def quiet() -> None:
            try:
                await coro
            except AirlockError:
                pass
        t = self._loop.create_task(quiet())
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _call(self, method: str, params: Mapping[str, Any], blob_key: Optional[str] = None,
                    blob: Optional[bytes] = None) -> Any:
        _, p = await self._send(method, params, blob_key, blob)
        return await p.result()

    async def call(self, method: str, params: Optional[Mapping[str, Any]] = None) -> Any:
        """Sends any request and returns its result (a dict, as sent)."""
        return await self._call(method, params or {})

    async def _read_loop(self) -> None:
        r = self._proc.stdout
        assert r is not None
        pending: List[bytes] = []
        err: Optional[BaseException] = None
        try:
            while True:
                data = await r.read(P.READ_SIZE)
                if not data:
                    break
                lines, pending = P.split_lines(pending, data)
                if pending and sum(len(b) for b in pending) > P.MAX_LINE_BYTES:
                    raise ClientClosed(f"a message from the server is longer than {P.MAX_LINE_BYTES} bytes")
                for line in lines:
                    if line.strip():
                        self._route(line)
        except asyncio.CancelledError:
            err = ClientClosed("the client's reader was cancelled")
        except Exception as e:  # noqa: BLE001 - the reader must fail every caller
            err = e
        await self._fail_all(err)

    def _route(self, line: bytes) -> None:
        msg = P.decode_line(line)
        if "id" in msg and "method" not in msg:
            rid = msg.get("id")
            p = self._pending.get(rid) if isinstance(rid, int) else None
            if p is not None and p.deliver(msg):
                self._pending.pop(rid, None)  # type: ignore[arg-type]
            return
        if msg.get("method") == "event" and isinstance(msg.get("params"), dict):
            ev = Event.from_wire(msg["params"])
            for q in list(self._queues):
                if q.wants(ev):
                    q.put(ev)
            for fn, types, sid in list(self._handlers):
                if (types is None or ev.type in types) and (sid is None or sid == ev.sandbox_id):
                    try:
                        r = fn(ev)
                        if inspect.isawaitable(r):
                            self._spawn(r)
                    except Exception:  # noqa: BLE001 - a handler's error is its own
                        pass

    async def _fail_all(self, err: Optional[BaseException]) -> None:
        try:
            rc: Optional[int] = await asyncio.wait_for(self._proc.wait(), 5)
        except asyncio.TimeoutError:
            rc = None
        try:
            await asyncio.wait_for(asyncio.shield(self._err_task), 2)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001
            pass
        why = f"the airlock process exited with status {rc}" if rc is not None else "the airlock connection ended"
        if err is not None:
            why += f" ({err})"
        closed = ClientClosed(why + self._tail())
        if self._closed is None:
            self._closed = closed
        pending = list(self._pending.values())
        self._pending.clear()
        for p in pending:
            p.fail(closed)
        for q in self._queues:
            q.close()

    async def _stderr_loop(self) -> None:
        r = self._proc.stderr
        assert r is not None
        while True:
            raw = await r.readline()
            if not raw:
                return
            line = raw.decode("utf-8", "replace")
            self._stderr_tail.append(line.rstrip("\n"))
            if self._stderr_out is not None:
                try:
                    self._stderr_out.write(line)
                except Exception:  # noqa: BLE001
                    pass

    def _tail(self) -> str:
        lines = [ln for ln in self._stderr_tail if ln]
        return "; its last words: " + " | ".join(lines[-5:]) if lines else ""

    # ------------------------------------------------------------ events

    def events(self, *, types: Optional[Sequence[str]] = None, timeout: Optional[float] = None,
               buffer: Optional[int] = None, _sandbox_id: Optional[str] = None) -> EventStream:
        q = _EventQueue(_sandbox_id, types, buffer or self._event_buffer)
        if self._closed is not None:
            q.close()
        self._queues.append(q)
        return EventStream(self, q, timeout)

    def _drop_queue(self, q: _EventQueue) -> None:
        if q in self._queues:
            self._queues.remove(q)
        q.close()

    def on_event(self, handler: EventHandler, *, types: Optional[Sequence[str]] = None,
                 _sandbox_id: Optional[str] = None) -> Callable[[], None]:
        """Calls ``handler(event)`` (a function or a coroutine function) for
        each event, on the event loop. Returns a function that removes it."""
        entry = (handler, set(types) if types else None, _sandbox_id)
        self._handlers.append(entry)

        def remove() -> None:
            if entry in self._handlers:
                self._handlers.remove(entry)
        return remove

    async def subscribe(self, types: Sequence[str] = ()) -> List[str]:
        res = await self._call("events.subscribe", {"types": list(types)} if types else {})
        return list(res.get("types") or [])

    async def unsubscribe(self) -> None:
        await self._call("events.unsubscribe", {})

    # ------------------------------------------------------------ sandboxes

    async def info(self) -> Info:
        return Info.from_wire(await self._call("info", {}))

    async def create(self, config: Optional[Mapping[str, Any]] = None, **params: Any) -> "Sandbox":
        res = await self._call("create", P.create_params(config, params))
        return Sandbox(self, res)

    def sandbox(self, sandbox_id: str) -> "Sandbox":
        return Sandbox(self, {"sandbox_id": sandbox_id})

    async def pool_create(self, size: int, config: Optional[Mapping[str, Any]] = None, **params: Any) -> str:
        """Starts a pool of ``size`` ready sandboxes; returns its id, for
        ``create(pool=id)``."""
        p = P.create_params(config, params)
        p["size"] = size
        return str((await self._call("pool.create", p))["pool_id"])

    async def pool_list(self) -> List[Dict[str, Any]]:
        """The session's pools, oldest first (see the sync Client)."""
        return list((await self._call("pool.list", {})).get("pools") or [])

    async def pool_close(self, pool_id: str) -> None:
        """Closes a pool: its waiting sandboxes close; those taken keep running."""
        await self._call("pool.close", {"pool_id": pool_id})


class Process:
    """A streaming command: ``async for chunk in proc``; ``await proc.wait()``."""

    def __init__(self, sandbox: "Sandbox", rid: int, stream: _Stream) -> None:
        self._sb = sandbox
        self.id = rid
        self._stream = stream
        self._result: Optional[ExecResult] = None

    def _ref(self, **kw: Any) -> Dict[str, Any]:
        return P.with_id({"id": self.id, **kw}, self._sb.id)

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[Chunk]:
        while True:
            c = await self._stream.next()
            if c is None:
                return
            yield c

    async def read_chunk(self) -> Optional[Chunk]:
        return await self._stream.next()

    async def write_stdin(self, data: Data) -> None:
        b = P.to_bytes(data)
        for i in range(0, max(len(b), 1), P.MAX_STDIN_CHUNK):
            await self._sb._client._call("stdin", self._ref(data=P.b64(b[i:i + P.MAX_STDIN_CHUNK])))

    async def close_stdin(self) -> None:
        await self._sb._client._call("stdin", self._ref(close=True))

    async def signal(self, sig: Union[str, int]) -> None:
        await self._sb._client._call("signal", self._ref(signal=int(sig) if isinstance(sig, int) else str(sig)))

    async def kill(self) -> None:
        await self.signal("KILL")

    async def cancel(self) -> None:
        await self._sb._client._call("cancel", self._ref())

    async def resize(self, rows: int, cols: int) -> None:
        await self._sb._client._call("resize", self._ref(rows=rows, cols=cols))

    @property
    def done(self) -> bool:
        return self._result is not None

    async def wait(self) -> ExecResult:
        if self._result is not None:
            return self._result
        out: List[bytes] = []
        err: List[bytes] = []
        while True:
            c = await self._stream.next()
            if c is None:
                break
            (out if c.stream == "stdout" else err).append(c.data)
        if self._stream.err is not None:
            raise self._stream.err
        msg = self._stream.final or {}
        if "error" in msg:
            raise error_from_wire(msg["error"], "exec_stream")
        self._result = ExecResult.from_wire(msg.get("result") or {}, b"".join(out), b"".join(err))
        return self._result

    async def __aenter__(self) -> "Process":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._result is None and self._stream.final is None:
            try:
                await self.cancel()
            except AirlockError:
                pass


class Policy:
    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    async def _do(self, method: str, host: Optional[str] = None) -> PolicyResult:
        p: Dict[str, Any] = {} if host is None else {"host": host}
        return PolicyResult.from_wire(await self._sb._client._call(method, P.with_id(p, self._sb.id)))

    async def get(self) -> PolicyResult:
        return await self._do("policy.get")

    async def allow(self, host: str) -> PolicyResult:
        return await self._do("policy.allow", host)

    async def deny(self, host: str) -> PolicyResult:
        return await self._do("policy.deny", host)

    async def remove(self, host: str) -> PolicyResult:
        return await self._do("policy.remove", host)


class _Creating:
    """What :meth:`Sandbox.create` returns: await it, or ``async with`` it."""

    def __init__(self, coro: Awaitable["Sandbox"]) -> None:
        self._coro = coro
        self._sb: Optional[Sandbox] = None

    def __await__(self) -> Generator[Any, None, "Sandbox"]:
        return self._coro.__await__()  # type: ignore[attr-defined,no-any-return]

    async def __aenter__(self) -> "Sandbox":
        self._sb = await self._coro
        return self._sb

    async def __aexit__(self, *exc: Any) -> None:
        if self._sb is not None:
            await self._sb.close()


class Sandbox:
    """A sandbox, for asyncio. ``async with Sandbox.create(...) as sb`` runs
    it in an ``airlock rpc`` process of its own, ended with it."""

    def __init__(self, client: Client, created: Mapping[str, Any], owns_client: bool = False) -> None:
        self._client = client
        self.id: str = str(created.get("sandbox_id", ""))
        self.isolation: str = str(created.get("isolation", ""))
        self.env: Dict[str, str] = dict(created.get("env") or {})
        self.notes: List[str] = list(created.get("notes") or [])
        self.image: Dict[str, Any] = dict(created.get("image") or {})
        self.ports: List[PortForward] = [PortForward.from_wire(x) for x in created.get("ports") or ()]
        self._owns_client = owns_client
        self._closed = False
        self.policy = Policy(self)

    @classmethod
    def create(cls, config: Optional[Mapping[str, Any]] = None, *, binary: Optional[str] = None,
               server_args: Sequence[str] = (), server_env: Optional[Mapping[str, str]] = None,
               stderr: Optional[IO[str]] = None, **params: Any) -> _Creating:
        async def make() -> Sandbox:
            client = await Client.start(binary=binary, args=server_args, env=server_env, stderr=stderr)
            try:
                sb = await client.create(config, **params)
            except BaseException:
                await client.close()
                raise
            sb._owns_client = True
            return sb
        return _Creating(make())

    @property
    def client(self) -> Client:
        return self._client

    async def __aenter__(self) -> "Sandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<airlock.aio.Sandbox {self.id} {self.isolation}>"

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if not self._client.closed:
                await self._client._call("close", P.with_id({}, self.id))
        except ClientClosed:
            pass
        finally:
            if self._owns_client:
                await self._client.close()

    def _p(self, **kw: Any) -> Dict[str, Any]:
        return P.with_id(kw, self.id)

    async def port_forward(self, sandbox_port: int, *, host_port: Optional[int] = None,
                           host_ip: Optional[str] = None, protocol: Optional[str] = None) -> PortForward:
        """Publishes a TCP port of the sandbox on the host; see the sync API."""
        r = await self._client._call("port_forward", P.with_id(
            P.port_forward_params(sandbox_port, host_port, host_ip, protocol), self.id))
        return PortForward.from_wire(r)

    async def port_forward_close(self, host_port: int, *, host_ip: Optional[str] = None) -> List[PortForward]:
        """Stops the ports published at ``host_port`` (on ``host_ip``, or any)."""
        r = await self._client._call("port_forward_close", P.with_id(P.port_close_params(host_port, host_ip), self.id))
        return [PortForward.from_wire(x) for x in r.get("closed") or ()]

    async def exec(self, command: Command, *, working_dir: Optional[str] = None,
                   env: Optional[Mapping[str, str]] = None, user: Optional[str] = None,
                   timeout: Optional[float] = None, stdin: Optional[Data] = None) -> ExecResult:
        p = P.exec_params(command, working_dir=working_dir, env=env, user=user, timeout=timeout,
                          stdin=stdin, sandbox_id=self.id)
        return ExecResult.from_wire(await self._client._call("exec", p))

    async def start(self, command: Command, *, working_dir: Optional[str] = None,
                    env: Optional[Mapping[str, str]] = None, user: Optional[str] = None,
                    timeout: Optional[float] = None, stdin: Optional[Data] = None,
                    open_stdin: bool = False, tty: bool = False, rows: Optional[int] = None,
                    cols: Optional[int] = None) -> Process:
        p = P.exec_params(command, working_dir=working_dir, env=env, user=user, timeout=timeout,
                          stdin=stdin, open_stdin=open_stdin, tty=tty, rows=rows, cols=cols,
                          sandbox_id=self.id)
        rid, stream = await self._client._send("exec_stream", p, stream=True)
        return Process(self, rid, stream)

    exec_stream = start

    async def start_detached(self, command: Command, *, working_dir: Optional[str] = None,
                             env: Optional[Mapping[str, str]] = None, user: Optional[str] = None,
                             timeout: Optional[float] = None, stdin: Optional[Data] = None) -> int:
        p = P.exec_params(command, working_dir=working_dir, env=env, user=user, timeout=timeout,
                          stdin=stdin, sandbox_id=self.id)
        p["detach"] = True
        return int((await self._client._call("exec", p))["pid"])

    async def write_file(self, path: str, data: Data, mode: int = 0o644, *,
                         offset: Optional[int] = None, truncate: bool = False) -> int:
        p = self._p(path=path, mode=mode)
        if offset is not None:
            p["offset"] = offset
        if truncate:
            p["truncate"] = True
        res = await self._client._call("write_file", p, "content", P.to_bytes(data))
        return int(res.get("size", 0))

    async def read_file(self, path: str, *, max_bytes: Optional[int] = None,
                        offset: Optional[int] = None, length: Optional[int] = None) -> bytes:
        if offset or length:
            p = self._p(path=path)
            if max_bytes:
                p["max_bytes"] = max_bytes
            if offset:
                p["offset"] = offset
            if length:
                p["length"] = length
            return P.content_of(await self._client._call("read_file", p))
        c = self._client
        part = min(P.READ_PART_BYTES, max_bytes or P.READ_PART_BYTES)
        first = await c._call("read_file", self._p(path=path, length=min(part, P.INLINE_READ_BYTES)))
        data = P.content_of(first)
        size = int(first.get("file_size", 0))
        P.check_read_size(path, size, max_bytes)
        if len(data) >= size:
            return data
        rest = await self._read_via_host(path, len(data), size - len(data))
        if rest is not None:
            return data + rest
        calls = [(await c._send("read_file", self._p(path=path, offset=at, length=min(part, size - at))))[1]
                 for at in range(len(data), size, part)]
        parts = [data]
        for call in calls:
            parts.append(P.content_of(await call.result()))
        return b"".join(parts)

    async def _read_via_host(self, path: str, offset: int, length: int) -> Optional[bytes]:
        """Reads a part through a host file that the server writes, or
        returns None when it cannot (see the sync API)."""
        c = self._client
        if not c._host_files:
            return None
        tmp = P.host_file()
        try:
            await c._call("read_file", self._p(path=path, offset=offset, length=length, host_path=tmp))
        except InvalidParams:
            P.remove_host_file(tmp)
            c._host_files = False
            return None
        except BaseException:
            P.remove_host_file(tmp)
            raise
        return await asyncio.get_running_loop().run_in_executor(None, P.take_host_file, tmp)

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read_file(path)).decode(encoding)

    async def iter_file(self, path: str, *, part_size: int = P.DEFAULT_PART_BYTES,
                        offset: int = 0) -> AsyncIterator[bytes]:
        """Reads a file of any size in parts, two requests in flight."""
        c = self._client
        nxt = offset

        async def ask(at: int) -> Any:
            return (await c._send("read_file", self._p(path=path, offset=at, length=part_size)))[1]
        first = await (await ask(nxt)).result()
        data = P.content_of(first)
        size = int(first.get("file_size", 0))
        nxt += len(data)
        ahead = await ask(nxt) if nxt < size else None
        while True:
            if data:
                yield data
            if ahead is None:
                return
            res = await ahead.result()
            data = P.content_of(res)
            if not data:
                return
            nxt += len(data)
            size = max(size, int(res.get("file_size", 0)))
            ahead = await ask(nxt) if nxt < size else None

    async def download(self, path: str, dest: Union[PathLike, IO[bytes]], *,
                       part_size: int = P.DEFAULT_PART_BYTES) -> int:
        """Copies a sandbox file of any size to a host path or binary file object."""
        if not hasattr(dest, "write"):
            with open(dest, "wb") as f:  # type: ignore[arg-type]
                if self._client._host_files:
                    # The server writes the host file itself when it can.
                    try:
                        res = await self._client._call("read_file", self._p(
                            path=path, host_path=os.path.abspath(os.fspath(dest))))  # type: ignore[arg-type]
                        return int(res.get("size", 0))
                    except InvalidParams:
                        pass  # not a path it may write (a link, another host): in parts
                return await self.download(path, f, part_size=part_size)
        n = 0
        async for part in self.iter_file(path, part_size=part_size):
            dest.write(part)  # type: ignore[union-attr]
            n += len(part)
        return n

    async def upload(self, src: Union[PathLike, IO[bytes], bytes], path: str, mode: int = 0o644, *,
                     part_size: int = P.DEFAULT_PART_BYTES) -> int:
        """Writes a host path, binary file object or bytes to a sandbox file of any size."""
        if isinstance(src, (bytes, bytearray, memoryview)):
            import io
            return await self.upload(io.BytesIO(bytes(src)), path, mode, part_size=part_size)
        if not hasattr(src, "read"):
            with open(src, "rb") as f:  # type: ignore[arg-type]
                return await self.upload(f, path, mode, part_size=part_size)
        off = 0
        first = True
        while True:
            part = src.read(part_size)  # type: ignore[union-attr]
            if not part and not first:
                return off
            await self.write_file(path, part, mode, offset=off, truncate=first)
            off += len(part)
            first = False
            if not part:
                return off

    async def list_files(self, path: str) -> List[FileInfo]:
        res = await self._client._call("list_files", self._p(path=path))
        return [FileInfo.from_wire(f) for f in res.get("files") or []]

    async def pause(self) -> None:
        """Stop every process of the sandbox where it is, until :meth:`resume`.

        Meanwhile exec and the file methods raise :class:`SandboxPaused`;
        policy, ports, usage and close are served.
        """
        await self._client._call("pause", P.with_id({}, self.id))

    async def resume(self) -> None:
        """Let the processes of a paused sandbox run on."""
        await self._client._call("resume", P.with_id({}, self.id))

    async def processes(self) -> List[ProcessInfo]:
        """The processes of the sandbox's commands by pid, as ps inside it would
        show them (docker top); at most 512."""
        r = await self._client._call("processes", P.with_id({}, self.id))
        return [ProcessInfo.from_wire(x) for x in r.get("processes") or ()]

    async def usage(self) -> Usage:
        """What the sandbox uses now: CPU time so far, memory, processes, network bytes."""
        return Usage.from_wire(await self._client._call("stats", P.with_id({}, self.id)))

    async def stat(self, path: str) -> FileInfo:
        return FileInfo.from_wire(await self._client._call("stat", self._p(path=path)))

    async def mkdir(self, path: str, mode: int = 0o755, *, parents: bool = False) -> None:
        await self._client._call("mkdir", self._p(path=path, mode=mode, parents=parents))

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        await self._client._call("remove", self._p(path=path, recursive=recursive))

    async def symlink(self, target: str, path: str) -> None:
        await self._client._call("symlink", self._p(path=path, target=target))

    def on_event(self, handler: EventHandler, *, types: Optional[Sequence[str]] = None) -> Callable[[], None]:
        return self._client.on_event(handler, types=types, _sandbox_id=self.id)

    def events(self, *, types: Optional[Sequence[str]] = None, timeout: Optional[float] = None,
               buffer: Optional[int] = None) -> EventStream:
        return self._client.events(types=types, timeout=timeout, buffer=buffer, _sandbox_id=self.id)
