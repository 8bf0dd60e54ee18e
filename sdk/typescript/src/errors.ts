// Errors: one class per JSON-RPC error code of the protocol (api/api.go),
// and two of the client's own (ClosedError, AirlockNotInstalledError).

/** JSON-RPC error codes, as api/api.go defines them. */
export const Codes = {
  ParseError: -32700,
  InvalidRequest: -32600,
  MethodNotFound: -32601,
  InvalidParams: -32602,
  Internal: -32603,
  StartFailed: -32000,
  NotFound: -32001,
  NotRunning: -32002,
  LimitExceeded: -32003,
  PolicyDenied: -32004,
  CommandFailed: -32005,
  FileError: -32006,
  Cancelled: -32007,
  Unsupported: -32008,
  PermissionError: -32009,
  Paused: -32010,
} as const;

/** Kinds of a file error (FileError.kind). */
export type FileErrorKind =
  | 'not_found' | 'exists' | 'permission' | 'is_dir' | 'not_dir'
  | 'not_empty' | 'no_space' | 'too_large' | 'invalid';

const posixCodes: Record<string, string> = {
  not_found: 'ENOENT', exists: 'EEXIST', permission: 'EACCES', is_dir: 'EISDIR',
  not_dir: 'ENOTDIR', not_empty: 'ENOTEMPTY', no_space: 'ENOSPC', too_large: 'EFBIG',
  invalid: 'EINVAL',
};

/** Base class of every error the server returns. */
export class AirlockError extends Error {
  /** The JSON-RPC error code. */
  readonly code: number;
  /** Machine-readable details, when the server gave some. */
  readonly data: unknown;
  /** The method that failed. */
  readonly method: string;
  constructor(code: number, message: string, data?: unknown, method = '') {
    super(method ? `airlock ${method}: ${message}` : message);
    this.name = new.target.name;
    this.code = code;
    this.data = data;
    this.method = method;
  }
}

/** -32700: the line was not JSON. */
export class ParseError extends AirlockError {}
/** -32600: not a JSON-RPC 2.0 request object, or a reused id of a running exec. */
export class InvalidRequestError extends AirlockError {}
/** -32601: the server does not know the method (it is probably older than this SDK). */
export class MethodNotFoundError extends AirlockError {}
/** -32602: params missing, of the wrong type, or invalid; the message names the field. */
export class InvalidParamsError extends AirlockError {}
/** -32603: an internal error of the server. */
export class InternalError extends AirlockError {}
/** -32000: the sandbox could not be started. */
export class StartFailedError extends AirlockError {}
/** -32001: no such sandbox or exec, or (policy.remove) a pattern in neither list. */
export class NotFoundError extends AirlockError {}
/** -32002: the sandbox has stopped (closed, timed out, crashed). */
export class NotRunningError extends AirlockError {}
/** -32003: a message, output, file or request-count limit was reached. */
export class LimitExceededError extends AirlockError {}
/** -32004: refused by network or file policy. */
export class PolicyDeniedError extends AirlockError {}
/** -32005: the command could not be started; exitCode is 127 (not found) or 126. */
export class CommandFailedError extends AirlockError {
  get exitCode(): number | undefined {
    const d = this.data as { exit_code?: number } | undefined;
    return d?.exit_code;
  }
}
/** -32006: a file operation failed; kind says how. */
export class FileError extends AirlockError {
  /** not_found, exists, permission, is_dir, not_dir, not_empty, no_space, too_large or invalid. */
  get kind(): FileErrorKind | undefined {
    return (this.data as { kind?: FileErrorKind } | undefined)?.kind;
  }
  /** The sandbox path concerned, when the server named it. */
  get path(): string | undefined {
    return (this.data as { path?: string } | undefined)?.path;
  }
  /** The POSIX error name of kind: ENOENT, EEXIST, EACCES, ... */
  get posixCode(): string | undefined {
    const k = this.kind;
    return k ? posixCodes[k] : undefined;
  }
}
/** A FileError of kind not_found. */
export class FileNotFoundError extends FileError {}
/** A FileError of kind exists. */
export class FileExistsError extends FileError {}
/** -32007: the request was cancelled, or the session ended first. */
export class CancelledError extends AirlockError {}
/** -32008: a feature this build, platform or sandbox does not offer (policy.* without a network). */
export class UnsupportedError extends AirlockError {}
/** -32009: the caller may not do this here (create on a control socket). */
export class PermissionDeniedError extends AirlockError {}
/** -32010: the sandbox is paused (resume it first), or a pause or resume found it already so. */
export class SandboxPausedError extends AirlockError {}

/** The client was closed, or its `airlock rpc` process went away. */
export class ClosedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ClosedError';
  }
}

/** No airlock executable was found; the message says how to install one. */
export class AirlockNotInstalledError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'AirlockNotInstalledError';
  }
}

const byCode = new Map<number, new (code: number, message: string, data?: unknown, method?: string) => AirlockError>([
  [Codes.ParseError, ParseError],
  [Codes.InvalidRequest, InvalidRequestError],
  [Codes.MethodNotFound, MethodNotFoundError],
  [Codes.InvalidParams, InvalidParamsError],
  [Codes.Internal, InternalError],
  [Codes.StartFailed, StartFailedError],
  [Codes.NotFound, NotFoundError],
  [Codes.NotRunning, NotRunningError],
  [Codes.LimitExceeded, LimitExceededError],
  [Codes.PolicyDenied, PolicyDeniedError],
  [Codes.CommandFailed, CommandFailedError],
  [Codes.FileError, FileError],
  [Codes.Cancelled, CancelledError],
  [Codes.Unsupported, UnsupportedError],
  [Codes.PermissionError, PermissionDeniedError],
  [Codes.Paused, SandboxPausedError],
]);

/** The error of a JSON-RPC error object, as the class of its code. */
export function errorFromWire(e: { code: number; message: string; data?: unknown }, method = ''): AirlockError {
  if (e.code === Codes.FileError) {
    const kind = (e.data as { kind?: string } | undefined)?.kind;
    if (kind === 'not_found') return new FileNotFoundError(e.code, e.message, e.data, method);
    if (kind === 'exists') return new FileExistsError(e.code, e.message, e.data, method);
  }
  const C = byCode.get(e.code) ?? AirlockError;
  return new C(e.code, e.message, e.data, method);
}
