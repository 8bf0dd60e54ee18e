"""The synchronous client: ``airlock rpc`` as a subprocess, safe to use from
many threads at once."""

from __future__ import annotations

import collections
import os
import subprocess
import threading
import weakref
from typing import (IO, Any, Callable, Deque, Dict, Iterator, List, Mapping, Optional,
                    Sequence, Union)

from . import _protocol as P
from ._errors import AirlockError, ClientClosed, InvalidParams, OutputOverflow, error_from_wire
from ._protocol import (Chunk, Command, Data, Event, ExecResult, FileInfo, Info,
                        PolicyResult, PortForward, ProcessInfo, Usage)

PathLike = Union[str, "os.PathLike[str]"]
EventHandler = Callable[[Event], Any]

#: Output a streaming command may hold unread before it is cancelled.
DEFAULT_MAX_BUFFERED_OUTPUT = 64 << 20
#: Events an iterator or the callback queue may hold before dropping (counted).
DEFAULT_EVENT_BUFFER = 1024


class _Call:
    """One request waiting for its response. A lock held until the reader
    releases it is the cheapest hand-over between threads."""

    __slots__ = ("method", "msg", "err", "_lock")

    def __init__(self, method: str) -> None:
        self.method = method
        self.msg: Optional[Dict[str, Any]] = None
        self.err: Optional[BaseException] = None
        self._lock = threading.Lock()
        self._lock.acquire()

    def deliver(self, msg: Dict[str, Any]) -> bool:
        self.msg = msg
        self._lock.release()
        return True  # final

    def fail(self, err: BaseException) -> None:
        self.err = err
        self._lock.release()

    def result(self, timeout: Optional[float] = None) -> Any:
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            raise TimeoutError(f"airlock {self.method}: no answer in {timeout}s")
        if self.err is not None:
            raise self.err
        msg = self.msg or {}
        if "error" in msg:
            raise error_from_wire(msg["error"], self.method)
        return msg.get("result")


class _Stream:
    """The responses of one exec_stream: chunks, then the final result."""

    def __init__(self, method: str, max_buffered: int, on_overflow: Callable[[], None]) -> None:
        self.method = method
        self.cond = threading.Condition(threading.Lock())
        self.items: Deque[Chunk] = collections.deque()
        self.buffered = 0
        self.max_buffered = max_buffered
        self.on_overflow = on_overflow
        self.final: Optional[Dict[str, Any]] = None
        self.err: Optional[BaseException] = None

    def deliver(self, msg: Dict[str, Any]) -> bool:
        res = msg.get("result")
        chunk = P.chunk_of(res) if "error" not in msg and isinstance(res, dict) else None
        overflow = False
        with self.cond:
            if chunk is None:
                self.final = msg
            elif self.err is None:
                self.items.append(chunk)
                self.buffered += len(chunk.data)
                if self.buffered > self.max_buffered:
                    self.err = OutputOverflow(
                        f"more than {self.max_buffered} bytes of output were not read; the command was cancelled",
                        method=self.method)
                    overflow = True
            self.cond.notify_all()
        if overflow:
            self.on_overflow()
        return chunk is None

    def fail(self, err: BaseException) -> None:
        with self.cond:
            if self.err is None:
                self.err = err
            self.final = self.final or {}
            self.cond.notify_all()

    def next(self, timeout: Optional[float] = None) -> Optional[Chunk]:
        """The next chunk, or None at the end."""
        with self.cond:
            while not self.items and self.final is None and self.err is None:
                if not self.cond.wait(timeout):
                    raise TimeoutError(f"airlock {self.method}: no output in {timeout}s")
            if self.items:
                c = self.items.popleft()
                self.buffered -= len(c.data)
                return c
            if self.err is not None and not isinstance(self.err, OutputOverflow):
                raise self.err
            return None


class _EventQueue:
    """A bounded queue of events; what overflows is dropped and counted."""

    def __init__(self, sandbox_id: Optional[str], types: Optional[Sequence[str]], size: int) -> None:
        self.sandbox_id = sandbox_id
        self.types = set(types) if types else None
        self.size = size
        self.cond = threading.Condition(threading.Lock())
        self.items: Deque[Event] = collections.deque()
        self.dropped = 0
        self.closed = False

    def wants(self, ev: Event) -> bool:
        return ((self.sandbox_id is None or ev.sandbox_id == self.sandbox_id)
                and (self.types is None or ev.type in self.types))

    def put(self, ev: Event) -> None:
        with self.cond:
            if len(self.items) >= self.size:
                self.dropped += 1
                return
            self.items.append(ev)
            self.cond.notify()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def get(self, timeout: Optional[float]) -> Optional[Event]:
        with self.cond:
            while not self.items and not self.closed:
                if not self.cond.wait(timeout):
                    raise TimeoutError(f"no event in {timeout}s")
            return self.items.popleft() if self.items else None


class EventStream:
    """An iterator over events, from :meth:`Client.events` or
    :meth:`Sandbox.events`. It ends when the sandbox or client closes, or
    on :meth:`close`; ``timeout`` bounds each wait (TimeoutError)."""

    def __init__(self, owner: "Client", q: _EventQueue, timeout: Optional[float]) -> None:
        self._owner = owner
        self._q = q
        self.timeout = timeout

    @property
    def dropped(self) -> int:
        """Events dropped because this iterator was read too slowly."""
        return self._q.dropped

    def __iter__(self) -> "EventStream":
        return self

    def __next__(self) -> Event:
        ev = self._q.get(self.timeout)
        if ev is None:
            raise StopIteration
        return ev

    def close(self) -> None:
        self._owner._drop_queue(self._q)

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Client:
    """A connection to ``airlock rpc`` (one subprocess, any number of
    sandboxes). Use :meth:`start`; ``with`` closes it, which tears down every
    sandbox it created and waits for the process to exit."""

    def __init__(self, proc: "subprocess.Popen[bytes]", *, stderr: Optional[IO[str]] = None,
                 max_buffered_output: int = DEFAULT_MAX_BUFFERED_OUTPUT,
                 event_buffer: int = DEFAULT_EVENT_BUFFER) -> None:
        self._proc = proc
        self.pid = proc.pid
        self._wfd = proc.stdin.fileno()  # type: ignore[union-attr]
        self._rfd = proc.stdout.fileno()  # type: ignore[union-attr]
        P.grow_pipe(self._rfd)
        P.grow_pipe(self._wfd)
        self._wlock = threading.Lock()
        self._lock = threading.Lock()
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
        self._handler_q: Optional[_EventQueue] = None
        self._progress: List[Callable[[Dict[str, Any]], Any]] = []
        self._stderr_tail: Deque[str] = collections.deque(maxlen=20)
        self._stderr_out = stderr
        self._reader = threading.Thread(target=self._read_loop, name="airlock-reader", daemon=True)
        self._reader.start()
        self._err_reader = threading.Thread(target=self._stderr_loop, name="airlock-stderr", daemon=True)
        self._err_reader.start()
        # A client dropped without close still ends its process (stdin closes).
        self._finalizer = weakref.finalize(self, _close_pipe, proc)

    # ------------------------------------------------------------ lifecycle

    @classmethod
    def start(cls, *, binary: Optional[str] = None, args: Sequence[str] = (),
              env: Optional[Mapping[str, str]] = None, stderr: Optional[IO[str]] = None,
              **options: Any) -> "Client":
        """Runs ``airlock rpc`` (``binary``, else ``$AIRLOCK_BIN``, else PATH).
        ``args`` are extra arguments after ``rpc``; ``env`` the process's
        environment (default this one's); ``stderr`` receives its log lines
        (by default only the last ones are kept, to explain a failure)."""
        exe = P.find_binary(binary)
        proc = subprocess.Popen([exe, "rpc", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, bufsize=0,
                                env=dict(env) if env is not None else None)
        return cls(proc, stderr=stderr, **options)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def close(self, timeout: float = 30.0) -> Optional[int]:
        """Ends the session: the server tears down every sandbox it created and
        exits. Waits up to ``timeout`` seconds, then kills it. Returns its exit status."""
        self._close_sandboxes()
        _close_pipe(self._proc)
        try:
            rc = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            rc = self._proc.wait()
        self._reader.join(timeout)
        self._err_reader.join(timeout)
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()
        self._finalizer.detach()
        return rc

    def _close_sandboxes(self) -> None:
        """With requests in flight, closes every sandbox of the session first:
        at the end of its input the server answers what is in flight before it
        ends, and a command that runs on would keep it from ending."""
        with self._lock:
            busy = bool(self._pending) and self._closed is None
        if not busy:
            return
        try:
            info = self._send("info", {})[1].result(5) or {}
            calls = [self._send("close", {"sandbox_id": s.get("sandbox_id")})[1]
                     for s in info.get("sandboxes") or []]
            for call in calls:
                call.result(5)
        except (AirlockError, TimeoutError):
            pass  # the server is gone or stuck: close() kills it

    def wait(self, timeout: Optional[float] = None) -> int:
        """Waits for the server process to exit; returns its status."""
        return self._proc.wait(timeout)

    # ------------------------------------------------------------ the wire

    def _send(self, method: str, params: Mapping[str, Any], blob_key: Optional[str] = None,
              blob: Optional[bytes] = None, stream: bool = False) -> "tuple[int, Any]":
        p: Union[_Call, _Stream]
        if stream:
            p = _Stream(method, self._max_buffered, lambda: None)
        else:
            p = _Call(method)
        with self._lock:
            if self._closed is not None:
                raise self._closed
            self._next_id += 1
            rid = self._next_id
            self._pending[rid] = p
        if stream:
            sid = params.get("sandbox_id")
            p.on_overflow = lambda: self._notify_quiet("cancel", P.with_id({"id": rid}, sid))  # type: ignore[union-attr]
        line = P.encode_request(rid, method, params, blob_key, blob)
        try:
            self._write(line)
        except BaseException:
            with self._lock:
                self._pending.pop(rid, None)
            raise
        return rid, p

    def _write(self, line: bytes) -> None:
        view = memoryview(line)
        with self._wlock:
            try:
                while view:
                    n = os.write(self._wfd, view)
                    view = view[n:]
            except (BrokenPipeError, OSError, ValueError) as e:
                raise self._closed or ClientClosed(f"the airlock process is gone: {e}{self._tail()}") from None

    def call(self, method: str, params: Optional[Mapping[str, Any]] = None, *,
             timeout: Optional[float] = None) -> Any:
        """Sends any request and returns its result (a dict, as sent)."""
        return self._send(method, params or {})[1].result(timeout)

    def _call(self, method: str, params: Mapping[str, Any], blob_key: Optional[str] = None,
              blob: Optional[bytes] = None) -> Any:
        return self._send(method, params, blob_key, blob)[1].result()

    def _notify_quiet(self, method: str, params: Mapping[str, Any]) -> None:
        """Sends a request whose answer nobody waits for."""
        try:
            self._send(method, params)
        except AirlockError:
            pass

    def _read_loop(self) -> None:
        pending: List[bytes] = []
        size = 0
        err: Optional[BaseException] = None
        try:
            while True:
                data = os.read(self._rfd, P.READ_SIZE)
                if not data:
                    break
                lines, pending = P.split_lines(pending, data)
                size = sum(len(b) for b in pending) if pending else 0
                if size > P.MAX_LINE_BYTES:
                    raise ClientClosed(f"a message from the server is longer than {P.MAX_LINE_BYTES} bytes")
                for line in lines:
                    if line.strip():
                        self._route(line)
        except BaseException as e:  # noqa: BLE001 - the reader must fail every caller
            err = e
        self._fail_all(err)

    def _route(self, line: bytes) -> None:
        msg = P.decode_line(line)
        if "id" in msg and "method" not in msg:
            rid = msg.get("id")
            with self._lock:
                p = self._pending.get(rid) if isinstance(rid, int) else None
            if p is None:
                return
            if p.deliver(msg):
                with self._lock:
                    self._pending.pop(rid, None)
            return
        method = msg.get("method")
        params = msg.get("params")
        if method == "event" and isinstance(params, dict):
            self._event(Event.from_wire(params))
        elif method == "image.progress" and isinstance(params, dict):
            for fn in list(self._progress):
                try:
                    fn(params)
                except Exception:  # noqa: BLE001 - a callback's error is its own
                    pass

    def _event(self, ev: Event) -> None:
        with self._lock:
            queues = list(self._queues)
            hq = self._handler_q
        for q in queues:
            if q.wants(ev):
                q.put(ev)
        if hq is not None:
            hq.put(ev)

    def _fail_all(self, err: Optional[BaseException]) -> None:
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self._err_reader.join(2)
        rc = self._proc.poll()
        why = f"the airlock process exited with status {rc}" if rc is not None else "the airlock connection ended"
        if err is not None:
            why += f" ({err})"
        closed = ClientClosed(why + self._tail())
        with self._lock:
            if self._closed is None:
                self._closed = closed
            pending = list(self._pending.values())
            self._pending.clear()
            queues = list(self._queues)
            hq = self._handler_q
        for p in pending:
            p.fail(closed)
        for q in queues:
            q.close()
        if hq is not None:
            hq.close()

    def _stderr_loop(self) -> None:
        assert self._proc.stderr is not None
        for raw in iter(self._proc.stderr.readline, b""):
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
        """An iterator over the events of every sandbox of this client, from now on."""
        q = _EventQueue(_sandbox_id, types, buffer or self._event_buffer)
        with self._lock:
            if self._closed is not None:
                q.close()
            self._queues.append(q)
        return EventStream(self, q, timeout)

    def _drop_queue(self, q: _EventQueue) -> None:
        with self._lock:
            if q in self._queues:
                self._queues.remove(q)
        q.close()

    def on_event(self, handler: EventHandler, *, types: Optional[Sequence[str]] = None,
                 _sandbox_id: Optional[str] = None) -> Callable[[], None]:
        """Calls ``handler(event)`` for each event, on a thread of the client's
        own (so it may call the client). Returns a function that removes it."""
        entry = (handler, set(types) if types else None, _sandbox_id)
        with self._lock:
            self._handlers.append(entry)
            if self._handler_q is None:
                self._handler_q = _EventQueue(None, None, self._event_buffer)
                if self._closed is not None:
                    self._handler_q.close()
                threading.Thread(target=self._handler_loop, args=(self._handler_q,),
                                 name="airlock-events", daemon=True).start()

        def remove() -> None:
            with self._lock:
                if entry in self._handlers:
                    self._handlers.remove(entry)
        return remove

    def _handler_loop(self, q: _EventQueue) -> None:
        while True:
            ev = q.get(None)
            if ev is None:
                return
            with self._lock:
                handlers = list(self._handlers)
            for fn, types, sid in handlers:
                if (types is None or ev.type in types) and (sid is None or sid == ev.sandbox_id):
                    try:
                        fn(ev)
                    except Exception:  # noqa: BLE001 - a handler's error is its own
                        pass

    def on_image_progress(self, handler: Callable[[Dict[str, Any]], Any]) -> None:
        """Calls ``handler(params)`` for each image.progress notification (on the reader thread)."""
        self._progress.append(handler)

    def subscribe(self, types: Sequence[str] = ()) -> List[str]:
        """Selects the event types the server sends (empty: all)."""
        return list(self._call("events.subscribe", {"types": list(types)} if types else {}).get("types") or [])

    def unsubscribe(self) -> None:
        self._call("events.unsubscribe", {})

    # ------------------------------------------------------------ sandboxes

    def info(self) -> Info:
        return Info.from_wire(self._call("info", {}))

    def create(self, config: Optional[Mapping[str, Any]] = None, **params: Any) -> "Sandbox":
        """Creates a sandbox. ``config`` and ``params`` are create's params
        (image, resources, env, network, vfs, ...: the README's JSON-RPC table)."""
        res = self._call("create", P.create_params(config, params))
        return Sandbox(self, res)

    def sandbox(self, sandbox_id: str) -> "Sandbox":
        """A handle on a sandbox of this session by id."""
        return Sandbox(self, {"sandbox_id": sandbox_id})

    # ------------------------------------------------------------ pools

    def pool_create(self, size: int, config: Optional[Mapping[str, Any]] = None, **params: Any) -> str:
        """Starts a pool that keeps ``size`` sandboxes (1 to 64) of create's
        params started and ready, and returns its id: ``create(pool=id)``
        then takes a ready sandbox at once. The pool ends with the session,
        or with :meth:`pool_close`."""
        p = P.create_params(config, params)
        p["size"] = size
        return str(self._call("pool.create", p)["pool_id"])

    def pool_list(self) -> List[Dict[str, Any]]:
        """The session's pools, oldest first: dicts with ``pool_id``,
        ``isolation``, ``size``, ``ready``, ``started``, ``failed`` and
        ``discarded``."""
        return list(self._call("pool.list", {}).get("pools") or [])

    def pool_close(self, pool_id: str) -> None:
        """Closes a pool: the sandboxes waiting in it are closed; those taken
        from it keep running."""
        self._call("pool.close", {"pool_id": pool_id})


def _close_pipe(proc: "subprocess.Popen[bytes]") -> None:
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass


class Process:
    """A command started by :meth:`Sandbox.start`. Iterate over it for its
    output :class:`Chunk`\\ s; :meth:`wait` returns its :class:`ExecResult`,
    whose stdout/stderr hold what was not iterated over."""

    def __init__(self, sandbox: "Sandbox", rid: int, stream: _Stream) -> None:
        self._sb = sandbox
        self.id = rid
        self._stream = stream
        self._result: Optional[ExecResult] = None

    def _ref(self, **kw: Any) -> Dict[str, Any]:
        return P.with_id({"id": self.id, **kw}, self._sb.id)

    def __iter__(self) -> Iterator[Chunk]:
        while True:
            c = self._stream.next()
            if c is None:
                return
            yield c

    def read_chunk(self, timeout: Optional[float] = None) -> Optional[Chunk]:
        """The next output chunk, or None once the command has ended."""
        return self._stream.next(timeout)

    def write_stdin(self, data: Data) -> None:
        """Writes to the command's stdin (start it with ``open_stdin=True``)."""
        b = P.to_bytes(data)
        for i in range(0, max(len(b), 1), P.MAX_STDIN_CHUNK):
            self._sb._client._call("stdin", self._ref(data=P.b64(b[i:i + P.MAX_STDIN_CHUNK])))

    def close_stdin(self) -> None:
        self._sb._client._call("stdin", self._ref(close=True))

    def signal(self, sig: Union[str, int]) -> None:
        """Sends a signal: a name ("TERM", "SIGINT") or a number."""
        self._sb._client._call("signal", self._ref(signal=int(sig) if isinstance(sig, int) else str(sig)))

    def kill(self) -> None:
        """Kills the command and every process it started."""
        self.signal("KILL")

    def cancel(self) -> None:
        """Cancels the command; its result says killed_by "signal"."""
        self._sb._client._call("cancel", self._ref())

    def resize(self, rows: int, cols: int) -> None:
        self._sb._client._call("resize", self._ref(rows=rows, cols=cols))

    @property
    def done(self) -> bool:
        return self._result is not None

    def wait(self, timeout: Optional[float] = None) -> ExecResult:
        """Waits for the command to end; the result holds the output not iterated over."""
        if self._result is not None:
            return self._result
        out: List[bytes] = []
        err: List[bytes] = []
        while True:
            c = self._stream.next(timeout)
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

    def __enter__(self) -> "Process":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._result is None and self._stream.final is None:
            try:
                self.cancel()
            except AirlockError:
                pass


class Policy:
    """The host lists of a sandbox's network policy (``sb.policy``)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def _do(self, method: str, host: Optional[str] = None) -> PolicyResult:
        p: Dict[str, Any] = {} if host is None else {"host": host}
        return PolicyResult.from_wire(self._sb._client._call(method, P.with_id(p, self._sb.id)))

    def get(self) -> PolicyResult:
        return self._do("policy.get")

    def allow(self, host: str) -> PolicyResult:
        """Allows a host pattern: "api.example.com", "*.example.com", "*", with ":PORT" for other ports."""
        return self._do("policy.allow", host)

    def deny(self, host: str) -> PolicyResult:
        return self._do("policy.deny", host)

    def remove(self, host: str) -> PolicyResult:
        return self._do("policy.remove", host)


class Sandbox:
    """A sandbox. :meth:`create` starts one in an ``airlock rpc`` process of
    its own, which ends when the sandbox is closed (``with`` closes it)."""

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
               stderr: Optional[IO[str]] = None, **params: Any) -> "Sandbox":
        """Starts ``airlock rpc`` and creates a sandbox in it. ``config`` and
        ``params`` are create's params (image, resources, env, network, vfs,
        ...). Close it (or use ``with``) to end both."""
        client = Client.start(binary=binary, args=server_args, env=server_env, stderr=stderr)
        try:
            sb = client.create(config, **params)
        except BaseException:
            client.close()
            raise
        sb._owns_client = True
        return sb

    @property
    def client(self) -> Client:
        return self._client

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<airlock.Sandbox {self.id} {self.isolation}>"

    def close(self) -> None:
        """Tears the sandbox down (and, made by :meth:`create`, its process)."""
        if self._closed:
            return
        self._closed = True
        try:
            if not self._client.closed:
                self._client._call("close", P.with_id({}, self.id))
        except (ClientClosed, P.BinaryNotFound):
            pass
        finally:
            if self._owns_client:
                self._client.close()

    def _p(self, **kw: Any) -> Dict[str, Any]:
        return P.with_id(kw, self.id)

    # ------------------------------------------------------------ ports

    def port_forward(self, sandbox_port: int, *, host_port: Optional[int] = None,
                     host_ip: Optional[str] = None, protocol: Optional[str] = None) -> PortForward:
        """Publishes a TCP port of the sandbox on the host (127.0.0.1 unless
        ``host_ip`` says otherwise; ``host_port`` None or 0: a free one) and
        returns the address bound. A server in the sandbox must listen on
        0.0.0.0. No egress opens."""
        r = self._client._call("port_forward", P.with_id(
            P.port_forward_params(sandbox_port, host_port, host_ip, protocol), self.id))
        return PortForward.from_wire(r)

    def port_forward_close(self, host_port: int, *, host_ip: Optional[str] = None) -> List[PortForward]:
        """Stops the ports published at ``host_port`` (on ``host_ip``, or any)."""
        r = self._client._call("port_forward_close", P.with_id(P.port_close_params(host_port, host_ip), self.id))
        return [PortForward.from_wire(x) for x in r.get("closed") or ()]

    # ------------------------------------------------------------ exec

    def exec(self, command: Command, *, working_dir: Optional[str] = None,
             env: Optional[Mapping[str, str]] = None, user: Optional[str] = None,
             timeout: Optional[float] = None, stdin: Optional[Data] = None) -> ExecResult:
        """Runs a command (a string through /bin/sh -c, or an argv list) and
        returns its buffered result."""
        p = P.exec_params(command, working_dir=working_dir, env=env, user=user, timeout=timeout,
                          stdin=stdin, sandbox_id=self.id)
        return ExecResult.from_wire(self._client._call("exec", p))

    def start(self, command: Command, *, working_dir: Optional[str] = None,
              env: Optional[Mapping[str, str]] = None, user: Optional[str] = None,
              timeout: Optional[float] = None, stdin: Optional[Data] = None,
              open_stdin: bool = False, tty: bool = False, rows: Optional[int] = None,
              cols: Optional[int] = None) -> Process:
        """Starts a command whose output streams: iterate over the returned
        :class:`Process`. ``open_stdin`` keeps stdin open for ``write_stdin``."""
        p = P.exec_params(command, working_dir=working_dir, env=env, user=user, timeout=timeout,
                          stdin=stdin, open_stdin=open_stdin, tty=tty, rows=rows, cols=cols,
                          sandbox_id=self.id)
        rid, stream = self._client._send("exec_stream", p, stream=True)
        return Process(self, rid, stream)

    exec_stream = start

    def start_detached(self, command: Command, *, working_dir: Optional[str] = None,
                       env: Optional[Mapping[str, str]] = None, user: Optional[str] = None,
                       timeout: Optional[float] = None, stdin: Optional[Data] = None) -> int:
        """Starts a command that runs on by itself, as ``docker exec -d``
        does, and returns its pid in the sandbox: its output is discarded,
        and it ends when it exits, ``timeout`` passes or the sandbox stops
        (the ``exec`` event reports its end)."""
        p = P.exec_params(command, working_dir=working_dir, env=env, user=user, timeout=timeout,
                          stdin=stdin, sandbox_id=self.id)
        p["detach"] = True
        return int(self._client._call("exec", p)["pid"])

    # ------------------------------------------------------------ files

    def write_file(self, path: str, data: Data, mode: int = 0o644, *,
                   offset: Optional[int] = None, truncate: bool = False) -> int:
        """Writes a whole file (or, with ``offset``, into it in place). Returns its size."""
        p = self._p(path=path, mode=mode)
        if offset is not None:
            p["offset"] = offset
        if truncate:
            p["truncate"] = True
        return int(self._client._call("write_file", p, "content", P.to_bytes(data)).get("size", 0))

    def read_file(self, path: str, *, max_bytes: Optional[int] = None,
                  offset: Optional[int] = None, length: Optional[int] = None) -> bytes:
        """Reads a whole file (at most ``max_bytes``: by default what fits in
        one message, 64 MiB), or ``length`` bytes from ``offset``. A large
        file is read in parts, several in flight. Larger files: :meth:`download`."""
        if offset or length:
            p = self._p(path=path)
            if max_bytes:
                p["max_bytes"] = max_bytes
            if offset:
                p["offset"] = offset
            if length:
                p["length"] = length
            return P.content_of(self._client._call("read_file", p))
        c = self._client
        part = min(P.READ_PART_BYTES, max_bytes or P.READ_PART_BYTES)
        first = c._call("read_file", self._p(path=path, length=min(part, P.INLINE_READ_BYTES)))
        data = P.content_of(first)
        size = int(first.get("file_size", 0))
        P.check_read_size(path, size, max_bytes)
        if len(data) >= size:
            return data
        rest = self._read_via_host(path, len(data), size - len(data))
        if rest is not None:
            return data + rest
        calls = [c._send("read_file", self._p(path=path, offset=at, length=min(part, size - at)))[1]
                 for at in range(len(data), size, part)]
        parts = [data]
        for call in calls:
            parts.append(P.content_of(call.result()))
        return b"".join(parts)

    def _read_via_host(self, path: str, offset: int, length: int) -> Optional[bytes]:
        """Reads a part through a host file that the server writes (read_file's
        host_path), or returns None when the server cannot write one (it runs
        on another host, or as a user that cannot open it)."""
        c = self._client
        if not c._host_files:
            return None
        tmp = P.host_file()
        try:
            c._call("read_file", self._p(path=path, offset=offset, length=length, host_path=tmp))
        except InvalidParams:
            P.remove_host_file(tmp)
            c._host_files = False
            return None
        except BaseException:
            P.remove_host_file(tmp)
            raise
        return P.take_host_file(tmp)

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read_file(path).decode(encoding)

    def iter_file(self, path: str, *, part_size: int = P.DEFAULT_PART_BYTES,
                  offset: int = 0) -> Iterator[bytes]:
        """Reads a file of any size in parts of ``part_size`` bytes, two
        requests in flight, holding only those in memory."""
        c = self._client
        nxt = offset

        def ask(at: int) -> Any:
            return c._send("read_file", self._p(path=path, offset=at, length=part_size))[1]
        first = ask(nxt).result()
        data = P.content_of(first)
        size = int(first.get("file_size", 0))
        nxt += len(data)
        ahead = ask(nxt) if nxt < size else None
        while True:
            if data:
                yield data
            if ahead is None:
                return
            res = ahead.result()
            data = P.content_of(res)
            if not data:
                return
            nxt += len(data)
            size = max(size, int(res.get("file_size", 0)))
            ahead = ask(nxt) if nxt < size else None

    def download(self, path: str, dest: Union[PathLike, IO[bytes]], *,
                 part_size: int = P.DEFAULT_PART_BYTES) -> int:
        """Copies a sandbox file of any size to ``dest`` (a host path or a
        binary file object) in parts. Returns the bytes copied."""
        n = 0
        if hasattr(dest, "write"):
            for part in self.iter_file(path, part_size=part_size):
                dest.write(part)  # type: ignore[union-attr]
                n += len(part)
            return n
        with open(dest, "wb") as f:  # type: ignore[arg-type]
            if self._client._host_files:
                # The server writes the host file itself when it can.
                try:
                    res = self._client._call("read_file", self._p(
                        path=path, host_path=os.path.abspath(os.fspath(dest))))  # type: ignore[arg-type]
                    return int(res.get("size", 0))
                except InvalidParams:
                    pass  # not a path it may write (a link, another host): in parts
            return self.download(path, f, part_size=part_size)

    def upload(self, src: Union[PathLike, IO[bytes], bytes], path: str, mode: int = 0o644, *,
               part_size: int = P.DEFAULT_PART_BYTES) -> int:
        """Writes ``src`` (a host path, a binary file object or bytes) to a
        sandbox file of any size, in parts. Returns its size."""
        if isinstance(src, (bytes, bytearray, memoryview)):
            import io
            return self.upload(io.BytesIO(bytes(src)), path, mode, part_size=part_size)
        if not hasattr(src, "read"):
            with open(src, "rb") as f:  # type: ignore[arg-type]
                return self.upload(f, path, mode, part_size=part_size)
        off = 0
        first = True
        while True:
            part = src.read(part_size)  # type: ignore[union-attr]
            if not part and not first:
                return off
            self.write_file(path, part, mode, offset=off, truncate=first)
            off += len(part)
            first = False
            if not part:
                return off

    def list_files(self, path: str) -> List[FileInfo]:
        res = self._client._call("list_files", self._p(path=path))
        return [FileInfo.from_wire(f) for f in res.get("files") or []]

    def pause(self) -> None:
        """Stop every process of the sandbox where it is, until :meth:`resume`.

        Meanwhile exec and the file methods raise :class:`SandboxPaused`;
        policy, ports, usage and close are served.
        """
        self._client._call("pause", P.with_id({}, self.id))

    def resume(self) -> None:
        """Let the processes of a paused sandbox run on."""
        self._client._call("resume", P.with_id({}, self.id))

    def processes(self) -> List[ProcessInfo]:
        """The processes of the sandbox's commands by pid, as ps inside it would
        show them (docker top); at most 512."""
        r = self._client._call("processes", P.with_id({}, self.id))
        return [ProcessInfo.from_wire(x) for x in r.get("processes") or ()]

    def usage(self) -> Usage:
        """What the sandbox uses now: CPU time so far, memory, processes, network bytes."""
        return Usage.from_wire(self._client._call("stats", P.with_id({}, self.id)))

    def stat(self, path: str) -> FileInfo:
        return FileInfo.from_wire(self._client._call("stat", self._p(path=path)))

    def mkdir(self, path: str, mode: int = 0o755, *, parents: bool = False) -> None:
        self._client._call("mkdir", self._p(path=path, mode=mode, parents=parents))

    def remove(self, path: str, *, recursive: bool = False) -> None:
        self._client._call("remove", self._p(path=path, recursive=recursive))

    def symlink(self, target: str, path: str) -> None:
        """Makes ``path`` a symbolic link to ``target`` (stored as given)."""
        self._client._call("symlink", self._p(path=path, target=target))

    # ------------------------------------------------------------ events

    def on_event(self, handler: EventHandler, *, types: Optional[Sequence[str]] = None) -> Callable[[], None]:
        """Calls ``handler(event)`` for this sandbox's events (on a thread of
        the client's). Returns a function that removes the handler."""
        return self._client.on_event(handler, types=types, _sandbox_id=self.id)

    def events(self, *, types: Optional[Sequence[str]] = None, timeout: Optional[float] = None,
               buffer: Optional[int] = None) -> EventStream:
        """An iterator over this sandbox's events from now on."""
        return self._client.events(types=types, timeout=timeout, buffer=buffer, _sandbox_id=self.id)
