"""Exceptions: one class per JSON-RPC error code of airlock's protocol.

Every error the server sends becomes an :class:`AirlockError` subclass
chosen by its code (and, for file errors, by ``data.kind``), so callers
catch what they mean rather than compare codes. File errors also derive
from the matching built-in ``OSError`` subclass: ``except
FileNotFoundError`` works on sandbox files.
"""

from __future__ import annotations

import errno as _errno
from typing import Any, Dict, Optional, Type

# Error codes (api/api.go).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
START_FAILED = -32000
NOT_FOUND = -32001
NOT_RUNNING = -32002
LIMIT_EXCEEDED = -32003
POLICY_DENIED = -32004
COMMAND_FAILED = -32005
FILE_ERROR = -32006
CANCELLED = -32007
UNSUPPORTED = -32008
PERMISSION_ERROR = -32009
PAUSED = -32010


class AirlockError(Exception):
    """An error from airlock: the server's, or the client's own.

    ``code`` is the JSON-RPC error code (None for errors of the client
    itself), ``message`` the server's words on what failed and what to
    do, ``data`` its machine-readable details and ``method`` the request
    that failed.
    """

    code: Optional[int] = None

    def __init__(
        self,
        message: str,
        *,
        code: Optional[int] = None,
        data: Any = None,
        method: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.data = data
        self.method = method

    def __str__(self) -> str:
        where = f"airlock {self.method}: " if self.method else "airlock: "
        code = f" (code {self.code})" if self.code is not None else ""
        return f"{where}{self.message}{code}"

    def __reduce__(self) -> Any:  # keep pickling (multiprocessing) working
        return (_rebuild, (type(self), self.message, self.code, self.data, self.method))


def _rebuild(cls: Type[AirlockError], message: str, code: Any, data: Any, method: Any) -> AirlockError:
    return cls(message, code=code, data=data, method=method)


class ClientClosed(AirlockError):
    """The client was closed, or its ``airlock`` process went away."""


class BinaryNotFound(AirlockError, FileNotFoundError):
    """No ``airlock`` executable: neither ``$AIRLOCK_BIN`` nor on PATH."""


class OutputOverflow(AirlockError):
    """A streaming command's output was not read fast enough; it was cancelled."""


class ParseError(AirlockError):
    code = PARSE_ERROR


class InvalidRequest(AirlockError):
    code = INVALID_REQUEST


class MethodNotFound(AirlockError):
    """The server does not know the method (it is probably older than this SDK)."""

    code = METHOD_NOT_FOUND


class InvalidParams(AirlockError, ValueError):
    """Params missing, of the wrong type, unknown (the message names the field) or invalid."""

    code = INVALID_PARAMS


class InternalError(AirlockError):
    code = INTERNAL_ERROR


class StartFailed(AirlockError):
    """The sandbox could not be started."""

    code = START_FAILED


class SandboxNotFound(AirlockError, LookupError):
    """No such sandbox or exec, or (``policy.remove``) a host pattern in neither list."""

    code = NOT_FOUND


NotFound = SandboxNotFound


class SandboxNotRunning(AirlockError):
    """The sandbox has stopped (closed, timed out, crashed); the message says why."""

    code = NOT_RUNNING


class LimitExceeded(AirlockError):
    """A message, output, file or request-count limit was reached."""

    code = LIMIT_EXCEEDED


class PolicyDenied(AirlockError, PermissionError):
    """Refused by the network or file policy."""

    code = POLICY_DENIED


class CommandFailed(AirlockError):
    """The command could not be started; ``exit_code`` is 127 (not found) or 126."""

    code = COMMAND_FAILED

    @property
    def exit_code(self) -> int:
        if isinstance(self.data, dict) and isinstance(self.data.get("exit_code"), int):
            return int(self.data["exit_code"])
        return -1


class Cancelled(AirlockError):
    """The request was cancelled, or the session ended first."""

    code = CANCELLED


class Unsupported(AirlockError):
    """Not offered by this build, platform or sandbox (policy.* without a network, ...)."""

    code = UNSUPPORTED


class PermissionDenied(AirlockError, PermissionError):
    """Not allowed on this connection (for example create on a control socket)."""

    code = PERMISSION_ERROR


class SandboxPaused(AirlockError):
    """The sandbox is paused (resume it first), or a pause or resume found it already so."""

    code = PAUSED


class FileError(AirlockError, OSError):
    """A file operation failed; ``kind`` says how and ``path`` where."""

    code = FILE_ERROR
    _errno: Optional[int] = None

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        d = self.data if isinstance(self.data, dict) else {}
        self.kind: str = str(d.get("kind", ""))
        self.path: Optional[str] = d.get("path")
        self.errno = self._errno
        self.filename = self.path
        self.strerror = message

    def __str__(self) -> str:
        return AirlockError.__str__(self)


class FileNotFound(FileError, FileNotFoundError):
    _errno = _errno.ENOENT


class FileExists(FileError, FileExistsError):
    _errno = _errno.EEXIST


class FilePermission(FileError, PermissionError):
    _errno = _errno.EACCES


class IsADirectory(FileError, IsADirectoryError):
    _errno = _errno.EISDIR


class NotADirectory(FileError, NotADirectoryError):
    _errno = _errno.ENOTDIR


class DirectoryNotEmpty(FileError):
    _errno = _errno.ENOTEMPTY


class NoSpace(FileError):
    _errno = _errno.ENOSPC


class FileTooLarge(FileError):
    _errno = _errno.EFBIG


class InvalidPath(FileError):
    _errno = _errno.EINVAL


_BY_CODE: Dict[int, Type[AirlockError]] = {
    c.code: c  # type: ignore[misc]
    for c in (
        ParseError, InvalidRequest, MethodNotFound, InvalidParams, InternalError,
        StartFailed, SandboxNotFound, SandboxNotRunning, LimitExceeded, PolicyDenied,
        CommandFailed, FileError, Cancelled, Unsupported, PermissionDenied, SandboxPaused,
    )
}

_BY_KIND: Dict[str, Type[FileError]] = {
    "not_found": FileNotFound,
    "exists": FileExists,
    "permission": FilePermission,
    "is_dir": IsADirectory,
    "not_dir": NotADirectory,
    "not_empty": DirectoryNotEmpty,
    "no_space": NoSpace,
    "too_large": FileTooLarge,
    "invalid": InvalidPath,
}


def error_from_wire(err: Any, method: Optional[str] = None) -> AirlockError:
    """The exception for a JSON-RPC error object."""
    if not isinstance(err, dict):
        return InternalError(f"malformed error: {err!r}", code=INTERNAL_ERROR, method=method)
    code = err.get("code")
    message = str(err.get("message", ""))
    data = err.get("data")
    cls: Type[AirlockError] = AirlockError
    if isinstance(code, int):
        cls = _BY_CODE.get(code, AirlockError)
        if code == FILE_ERROR and isinstance(data, dict):
            cls = _BY_KIND.get(str(data.get("kind")), FileError)
    return cls(message, code=code if isinstance(code, int) else None, data=data, method=method)
