"""The wire: JSON-RPC 2.0 lines of ``airlock rpc`` (api/api.go), shared by
the sync and the asyncio clients."""

from __future__ import annotations

import base64
import binascii
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ._errors import BinaryNotFound

#: Lines longer than this from the server are a protocol error.
MAX_LINE_BYTES = 256 << 20
#: Largest piece read or written per request by the streaming file methods.
DEFAULT_PART_BYTES = 8 << 20
#: Piece size of read_file on a file larger than one message (parts in flight
#: at once; one request measured faster than parts up to the message size).
READ_PART_BYTES = 64 << 20
#: read_file's bound by default: what one message holds (as the server's).
DEFAULT_MAX_READ = 64 << 20
#: What read_file asks for in its first request; the rest of a larger file
#: goes through a host file (see host_file) when the server can write one.
INLINE_READ_BYTES = 1 << 20
#: Largest piece of stdin per request.
MAX_STDIN_CHUNK = 1 << 20

INSTALL_HINT = (
    "airlock is not installed: set AIRLOCK_BIN to the airlock executable or put "
    "airlock on PATH. From a checkout of github.com/airlock-sandbox/airlock, "
    "`make build` builds bin/airlock and bin/airlock-guest (keep them side by side) "
    "and `make install` copies both to /usr/local/bin."
)

#: Bytes asked of each read of the server's output.
READ_SIZE = 1 << 20
_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Linux), not named before Python 3.10


def host_file() -> str:
    """A new, empty, private (0600) temporary file for read_file's
    ``host_path``: the server, on this host, writes a large read's bytes
    there instead of into its answer, which spares base64 both ways."""
    import tempfile
    fd, path = tempfile.mkstemp(prefix="airlock-read-")
    os.close(fd)
    return path


def take_host_file(path: str) -> bytes:
    """The contents of a host_file, which is then removed."""
    try:
        with open(path, "rb") as f:
            return f.read()
    finally:
        remove_host_file(path)


def remove_host_file(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def grow_pipe(fd: int, size: int = 1 << 20) -> None:
    """Enlarges a pipe's buffer (Linux): large messages then cross it in
    far fewer wake-ups. Best effort."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import fcntl
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", _F_SETPIPE_SZ), size)
    except (OSError, ImportError):
        pass


Command = Union[str, Sequence[str]]
Data = Union[bytes, bytearray, memoryview, str]


def find_binary(binary: Optional[str] = None) -> str:
    """The airlock executable: ``binary``, else ``$AIRLOCK_BIN``, else ``airlock`` on PATH."""
    b = binary or os.environ.get("AIRLOCK_BIN") or ""
    if b:
        if os.sep in b:
            if not (os.path.isfile(b) and os.access(b, os.X_OK)):
                raise BinaryNotFound(f"{b} is not an executable file. {INSTALL_HINT}")
            return b
        found = shutil.which(b)
        if not found:
            raise BinaryNotFound(f"{b} is not on PATH. {INSTALL_HINT}")
        return found
    found = shutil.which("airlock")
    if not found:
        raise BinaryNotFound(INSTALL_HINT)
    return found


def to_bytes(data: Data) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    return bytes(data)


def b64(data: Data) -> str:
    return base64.b64encode(to_bytes(data)).decode("ascii")


if sys.version_info >= (3, 11):

    def unb64(s: Union[str, bytes, memoryview]) -> bytes:
        if not s:
            return b""
        try:
            return binascii.a2b_base64(s, strict_mode=True)
        except binascii.Error:
            return binascii.a2b_base64(s)

else:

    def unb64(s: Union[str, bytes, memoryview]) -> bytes:
        if not s:
            return b""
        return binascii.a2b_base64(s)


# ---------------------------------------------------------------- encoding

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def encode_request(id: Optional[int], method: str, params: Mapping[str, Any],
                   blob_key: Optional[str] = None, blob: Optional[bytes] = None) -> bytes:
    """One request line. ``blob`` (bytes) goes into params[blob_key] as base64
    without passing through the JSON encoder."""
    head = {"jsonrpc": "2.0", "method": method}
    if id is not None:
        head["id"] = id  # type: ignore[assignment]
    p = _dumps(dict(params)).encode("utf-8")
    if blob_key is None or blob is None:
        return _dumps(head).encode("utf-8")[:-1] + b',"params":' + p + b"}\n"
    enc = base64.b64encode(blob)
    sep = b"," if p != b"{}" else b""
    return (_dumps(head).encode("utf-8")[:-1] + b',"params":{"' + blob_key.encode() +
            b'":"' + enc + b'"' + sep + p[1:] + b"}\n")


# ---------------------------------------------------------------- decoding

_CONTENT_PREFIX = b'{"jsonrpc":"2.0","result":{"content":"'


def decode_line(line: bytes) -> Dict[str, Any]:
    """A message from the server. A read_file result's content is left as a
    memoryview of the base64 (under result["content_b64"]) rather than
    scanned by the JSON decoder, which is most of the cost of large reads."""
    if line.startswith(_CONTENT_PREFIX):
        start = len(_CONTENT_PREFIX)
        end = line.find(b'"', start)
        if end > 0:
            msg = json.loads(line[:start] + line[end:])
            res = msg.get("result")
            if isinstance(res, dict):
                res["content_b64"] = memoryview(line)[start:end]
                return msg  # type: ignore[no-any-return]
    return json.loads(line)  # type: ignore[no-any-return]


def content_of(result: Mapping[str, Any]) -> bytes:
    raw = result.get("content_b64")
    if raw is not None:
        return unb64(raw)
    return unb64(result.get("content") or "")


def check_read_size(path: str, size: int, max_bytes: Optional[int]) -> None:
    """read_file's bound, as the server applies it to a whole-file read."""
    limit = max_bytes or DEFAULT_MAX_READ
    if size > limit:
        from ._errors import FILE_ERROR, FileTooLarge
        raise FileTooLarge(
            f"read {path!r}: the file is {size} bytes, more than max_bytes ({limit}): "
            "read it in parts (offset and length) or with download()",
            code=FILE_ERROR, data={"kind": "too_large", "path": path}, method="read_file")


# ---------------------------------------------------------------- params

def exec_params(command: Command, *, working_dir: Optional[str] = None,
                env: Optional[Mapping[str, str]] = None, user: Optional[str] = None,
                timeout: Optional[float] = None, stdin: Optional[Data] = None,
                open_stdin: bool = False, tty: bool = False,
                rows: Optional[int] = None, cols: Optional[int] = None,
                sandbox_id: Optional[str] = None) -> Dict[str, Any]:
    """ExecParams: a string runs through /bin/sh -c, a sequence as argv."""
    p: Dict[str, Any] = {}
    if sandbox_id:
        p["sandbox_id"] = sandbox_id
    if isinstance(command, str):
        p["command"] = command
    else:
        argv = list(command)
        if not argv or not all(isinstance(a, str) for a in argv):
            raise TypeError("command: a string for /bin/sh -c, or a non-empty sequence of strings (argv)")
        p["argv"] = argv
    if working_dir:
        p["working_dir"] = working_dir
    if env:
        p["env"] = dict(env)
    if user:
        p["user"] = user
    if timeout:
        p["timeout_seconds"] = float(timeout)
    if stdin is not None:
        p["stdin"] = b64(stdin)
    if open_stdin:
        p["open_stdin"] = True
    if tty:
        p["tty"] = True
    if rows:
        p["rows"] = rows
    if cols:
        p["cols"] = cols
    return p


def with_id(params: Dict[str, Any], sandbox_id: Optional[str]) -> Dict[str, Any]:
    if sandbox_id:
        params["sandbox_id"] = sandbox_id
    return params


# ---------------------------------------------------------------- results

@dataclass(frozen=True)
class ExecResult:
    """What a finished command did. ``stdout``/``stderr`` are bytes;
    ``stdout_text``/``stderr_text`` decode them as UTF-8 (invalid bytes replaced)."""

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: int = 0
    cpu_time_ms: int = 0
    peak_memory_bytes: int = 0
    killed_by: Optional[str] = None  # "timeout", "oom", "signal" or None
    signal: int = 0
    limits_hit: Tuple[str, ...] = ()

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.killed_by is None

    @classmethod
    def from_wire(cls, r: Mapping[str, Any], stdout: Optional[bytes] = None,
                  stderr: Optional[bytes] = None) -> "ExecResult":
        return cls(
            exit_code=int(r.get("exit_code", 0)),
            stdout=unb64(r.get("stdout") or "") if stdout is None else stdout,
            stderr=unb64(r.get("stderr") or "") if stderr is None else stderr,
            stdout_truncated=bool(r.get("stdout_truncated")),
            stderr_truncated=bool(r.get("stderr_truncated")),
            duration_ms=int(r.get("duration_ms") or 0),
            cpu_time_ms=int(r.get("cpu_time_ms") or 0),
            peak_memory_bytes=int(r.get("peak_memory_bytes") or 0),
            killed_by=r.get("killed_by") or None,
            signal=int(r.get("signal") or 0),
            limits_hit=tuple(r.get("limits_hit") or ()),
        )


@dataclass(frozen=True)
class Chunk:
    """A piece of a streaming command's output: ``stream`` is "stdout" or "stderr"."""

    stream: str
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


@dataclass(frozen=True)
class FileInfo:
    """A file: ``mode`` holds the permission bits (and Go io/fs type bits)."""

    name: str
    size: int
    mode: int
    is_dir: bool
    mod_time: Optional[datetime] = None
    link: str = ""

    @property
    def permissions(self) -> int:
        return self.mode & 0o777

    @classmethod
    def from_wire(cls, r: Mapping[str, Any]) -> "FileInfo":
        return cls(name=str(r.get("name", "")), size=int(r.get("size") or 0),
                   mode=int(r.get("mode") or 0), is_dir=bool(r.get("is_dir")),
                   mod_time=parse_time(r.get("mod_time")), link=str(r.get("link") or ""))


def parse_time(s: Any) -> Optional[datetime]:
    """An RFC 3339 time as Go writes it (nanoseconds cut to microseconds)."""
    if not isinstance(s, str) or not s:
        return None
    t = s.replace("Z", "+00:00")
    if "." in t:
        head, rest = t.split(".", 1)
        i = 0
        while i < len(rest) and rest[i].isdigit():
            i += 1
        t = head + "." + rest[:i][:6].ljust(6, "0") + rest[i:]
    try:
        return datetime.fromisoformat(t)
    except ValueError:
        return None


@dataclass(frozen=True)
class PolicyResult:
    """The host patterns in force; a denied pattern wins over every allowed one."""

    allowed_hosts: Tuple[str, ...]
    denied_hosts: Tuple[str, ...]

    @classmethod
    def from_wire(cls, r: Mapping[str, Any]) -> "PolicyResult":
        return cls(tuple(r.get("allowed_hosts") or ()), tuple(r.get("denied_hosts") or ()))


@dataclass(frozen=True)
class Usage:
    """What a sandbox uses now (``sb.usage()``): CPU time so far, memory,
    processes and network bytes, against its limits (0: none)."""

    time: str
    cpu_nanos: int
    cpus: float
    memory_bytes: int
    memory_peak_bytes: int
    memory_limit_bytes: int
    pids: int
    pids_limit: int
    oom_kills: int
    pids_limit_hits: int
    net_rx_bytes: int
    net_tx_bytes: int

    @classmethod
    def from_wire(cls, r: Mapping[str, Any]) -> "Usage":
        return cls(str(r.get("time", "")), int(r.get("cpu_nanos", 0)), float(r.get("cpus", 0)),
                   int(r.get("memory_bytes", 0)), int(r.get("memory_peak_bytes", 0)),
                   int(r.get("memory_limit_bytes", 0)), int(r.get("pids", 0)), int(r.get("pids_limit", 0)),
                   int(r.get("oom_kills", 0)), int(r.get("pids_limit_hits", 0)),
                   int(r.get("net_rx_bytes", 0)), int(r.get("net_tx_bytes", 0)))


@dataclass(frozen=True)
class ProcessInfo:
    """A process of a sandbox's commands (``sb.processes()``), as ps inside
    it would show it; ``state`` is the kernel's letter (R, S, D, Z, T)."""

    pid: int
    ppid: int
    uid: int
    state: str
    cpu_nanos: int
    rss_bytes: int
    elapsed_ms: int
    command: Tuple[str, ...]

    @classmethod
    def from_wire(cls, r: Mapping[str, Any]) -> "ProcessInfo":
        return cls(int(r.get("pid", 0)), int(r.get("ppid", 0)), int(r.get("uid", 0)), str(r.get("state", "")),
                   int(r.get("cpu_nanos", 0)), int(r.get("rss_bytes", 0)), int(r.get("elapsed_ms", 0)),
                   tuple(str(a) for a in r.get("command") or ()))


@dataclass(frozen=True)
class PortForward:
    """A published port: the host address bound and the sandbox port it
    leads to."""

    host_ip: str
    host_port: int
    sandbox_port: int
    protocol: str = "tcp"

    @classmethod
    def from_wire(cls, r: Mapping[str, Any]) -> "PortForward":
        return cls(str(r.get("host_ip", "")), int(r.get("host_port", 0)), int(r.get("sandbox_port", 0)),
                   str(r.get("protocol", "tcp")))


def port_forward_params(sandbox_port: int, host_port: Optional[int], host_ip: Optional[str],
                        protocol: Optional[str]) -> Dict[str, Any]:
    p: Dict[str, Any] = {"sandbox_port": sandbox_port}
    if host_port is not None:
        p["host_port"] = host_port
    if host_ip is not None:
        p["host_ip"] = host_ip
    if protocol is not None:
        p["protocol"] = protocol
    return p


def port_close_params(host_port: int, host_ip: Optional[str]) -> Dict[str, Any]:
    p: Dict[str, Any] = {"host_port": host_port}
    if host_ip is not None:
        p["host_ip"] = host_ip
    return p


@dataclass(frozen=True)
class Event:
    """An event: ``type`` is exec, file, network or lifecycle and ``detail``
    its object (ExecEvent, FileEvent, ... of api/api.go, as a dict).
    ``dropped`` counts events dropped just before this one."""

    type: str
    timestamp: int
    sandbox_id: str
    detail: Dict[str, Any] = field(default_factory=dict)
    dropped: int = 0

    def __getitem__(self, key: str) -> Any:  # ev["type"], ev["file"]: the wire's shape
        if key == self.type:
            return self.detail
        return self.as_dict()[key]

    def as_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"type": self.type, "timestamp": self.timestamp,
                             "sandbox_id": self.sandbox_id, self.type: self.detail}
        if self.dropped:
            d["dropped"] = self.dropped
        return d

    @classmethod
    def from_wire(cls, p: Mapping[str, Any]) -> "Event":
        t = str(p.get("type", ""))
        detail = p.get(t)
        return cls(type=t, timestamp=int(p.get("timestamp") or 0),
                   sandbox_id=str(p.get("sandbox_id") or ""),
                   detail=dict(detail) if isinstance(detail, dict) else {},
                   dropped=int(p.get("dropped") or 0))


@dataclass(frozen=True)
class Info:
    """The server and its sandboxes (``info``)."""

    version: str
    protocol: int
    max_message_bytes: int
    sandboxes: Tuple[Dict[str, Any], ...]
    events_dropped: int

    @classmethod
    def from_wire(cls, r: Mapping[str, Any]) -> "Info":
        return cls(str(r.get("version", "")), int(r.get("protocol") or 0),
                   int(r.get("max_message_bytes") or 0), tuple(r.get("sandboxes") or ()),
                   int(r.get("events_dropped") or 0))


def create_params(config: Optional[Mapping[str, Any]], params: Mapping[str, Any]) -> Dict[str, Any]:
    """CreateParams from a dict (the wire's shape) and keyword arguments."""
    p: Dict[str, Any] = dict(config or {})
    p.update({k: v for k, v in params.items() if v is not None})
    return p


def chunk_of(result: Mapping[str, Any]) -> Optional[Chunk]:
    if "stdout" in result and not result.get("done"):
        return Chunk("stdout", unb64(result["stdout"]))
    if "stderr" in result and not result.get("done"):
        return Chunk("stderr", unb64(result["stderr"]))
    return None


def split_lines(pending: List[bytes], data: bytes) -> Tuple[List[bytes], List[bytes]]:
    """Cuts newline-terminated lines out of what was read: returns the complete
    lines and what is left of an unfinished one (as pieces, joined once)."""
    lines: List[bytes] = []
    start = 0
    while True:
        i = data.find(b"\n", start)
        if i < 0:
            break
        if pending:
            pending.append(data[start:i])
            lines.append(b"".join(pending))
            pending = []
        else:
            lines.append(data[start:i])
        start = i + 1
    if start < len(data):
        pending.append(data[start:] if start else data)
    return lines, pending
