"""airlock: run untrusted code in sandboxes, from Python.

The SDK drives ``airlock rpc`` (JSON-RPC over stdio) as a subprocess. It is
pure standard library. ``airlock`` is found in ``$AIRLOCK_BIN`` or on PATH.

    import airlock

    with airlock.Sandbox.create(resources={"memory_mb": 256}) as sb:
        print(sb.exec("echo hello").stdout_text)

:mod:`airlock.aio` has the same API for asyncio.
"""

from ._errors import (AirlockError, BinaryNotFound, Cancelled, ClientClosed, CommandFailed,
                      DirectoryNotEmpty, FileError, FileExists, FileNotFound, FilePermission,
                      FileTooLarge, InternalError, InvalidParams, InvalidPath, InvalidRequest,
                      IsADirectory, LimitExceeded, MethodNotFound, NoSpace, NotADirectory,
                      NotFound, OutputOverflow, ParseError, PermissionDenied, PolicyDenied,
                      SandboxNotFound, SandboxNotRunning, SandboxPaused, StartFailed, Unsupported,
                      error_from_wire)
from ._protocol import (Chunk, Event, ExecResult, FileInfo, Info, PolicyResult, PortForward, ProcessInfo, Usage,
                        find_binary)
from ._sync import Client, EventStream, Policy, Process, Sandbox

__version__ = "0.1.0"

__all__ = [
    "AirlockError", "BinaryNotFound", "Cancelled", "Chunk", "Client", "ClientClosed",
    "CommandFailed", "DirectoryNotEmpty", "Event", "EventStream", "ExecResult", "FileError",
    "FileExists", "FileInfo", "FileNotFound", "FilePermission", "FileTooLarge", "Info",
    "InternalError", "InvalidParams", "InvalidPath", "InvalidRequest", "IsADirectory",
    "LimitExceeded", "MethodNotFound", "NoSpace", "NotADirectory", "NotFound", "OutputOverflow",
    "ParseError", "PermissionDenied", "Policy", "PolicyDenied", "PolicyResult", "PortForward", "Process", "ProcessInfo", "Usage",
    "Sandbox", "SandboxNotFound", "SandboxNotRunning", "SandboxPaused", "StartFailed", "Unsupported",
    "error_from_wire", "find_binary",
]
