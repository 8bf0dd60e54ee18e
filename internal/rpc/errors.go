package rpc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// errSessionEnded cancels what is in flight when a session ends.
var errSessionEnded = errors.New("the session ended")

// errLastSandboxClosed ends a session that serves one sandbox
// (Options.EndWithLastSandbox) once it is closed: a normal end.
var errLastSandboxClosed = errors.New("the session's sandbox was closed")

func rpcError(code int, format string, args ...any) *api.Error {
	return &api.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// commonError maps the failures any sandbox operation can have: the
// request cancelled, the sandbox stopped. It returns nil for others.
func commonError(ctx context.Context, e *sandboxEntry, err error) *api.Error {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae
	}
	// A crash says more than the cancellation it causes: a supervisor
	// ends its control sessions when its sandbox stops, and that may
	// cancel a request before its own read of the dead channel fails.
	if e != nil && stopped(e.sb) {
		if _, crashed := errors.AsType[*airlock.CrashError](e.sb.Err()); crashed {
			return notRunning(e.sb)
		}
	}
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		cause := context.Cause(ctx)
		if cause == nil {
			cause = err
		}
		return rpcError(api.CodeCancelled, "request cancelled: %v: send it again in a live session", cause)
	}
	if errors.Is(err, airlock.ErrPaused) || errors.Is(err, airlock.ErrNotPaused) {
		return rpcError(api.CodePaused, "%v", err)
	}
	if e != nil && (errors.Is(err, airlock.ErrClosed) || stopped(e.sb)) {
		return notRunning(e.sb)
	}
	if errors.Is(err, airlock.ErrClosed) {
		return rpcError(api.CodeNotRunning, "%v: create a new sandbox", err)
	}
	return nil
}

func stopped(sb *airlock.Sandbox) bool {
	select {
	case <-sb.Done():
		return true
	default:
		return false
	}
}

func notRunning(sb *airlock.Sandbox) *api.Error {
	reason := sb.Err()
	if reason == nil {
		reason = airlock.ErrClosed
	}
	return rpcError(api.CodeNotRunning, "sandbox %s is not running (%v): create a new sandbox", sb.ID(), reason)
}

// internalError reports an unexpected failure. The request may have
// taken effect before it failed, so the advice is to look before doing it
// again, never to repeat it blindly.
func internalError(op string, err error) *api.Error {
	return rpcError(api.CodeInternal, "%s: %v: it may have taken effect: check the sandbox before sending it again, or close the sandbox and create a new one", op, err)
}

// execError maps a failure to run a command.
func execError(ctx context.Context, e *sandboxEntry, argv []string, err error) *api.Error {
	var se *airlock.StartError
	if errors.As(err, &se) {
		msg := fmt.Sprintf("cannot run %s: %v", quote(argv0(argv)), se.Err)
		switch why := se.Err.Error(); {
		case se.NotFound:
			msg += ": check the program name (it is looked up in PATH inside the sandbox) or use command to run it through /bin/sh"
		case strings.Contains(why, "permission denied") || strings.Contains(why, "exec format error"):
			msg += ": check that it is an executable file (chmod +x) for this machine"
		}
		return &api.Error{
			Code:    api.CodeCommandFailed,
			Message: msg,
			Data:    api.CommandFailedData{ExitCode: se.ExitCode()},
		}
	}
	if ae := commonError(ctx, e, err); ae != nil {
		return ae
	}
	var pe *agentproto.Error
	if errors.As(err, &pe) && pe.Code == agentproto.CodeInvalid {
		return rpcError(api.CodeInvalidParams, "the sandbox refused the command: %v: fix the command, its environment or working_dir", pe)
	}
	return rpcError(api.CodeInternal, "exec: %v: the command may have run, and its result is lost: check what it does before running it again, or close the sandbox and create a new one", err)
}

func argv0(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	return argv[0]
}

// fileHint says what to do about a kind of file error; "" for a kind
// that is not a file error.
func fileHint(kind string) string {
	switch kind {
	case "not_found":
		return "check the path (list_files shows what exists)"
	case "exists":
		return "remove it first or choose another path"
	case "permission":
		return "the path is read-only (the system directories are) or closed to file operations (/proc and other kernel file systems: read them with a command): use a path under /workspace or /tmp"
	case "is_dir":
		return "it is a directory: list it with list_files, or remove it with recursive true"
	case "not_dir":
		return "a component of the path is not a directory"
	case "not_empty":
		return "remove it with recursive true"
	case "no_space":
		return "the sandbox's disk is full: free space, or create the sandbox with a larger disk_mb"
	case "too_large":
		return "the file is larger than allowed: raise max_bytes, or read it in parts with exec (for example with dd)"
	case "invalid":
		return "give an absolute path inside the sandbox"
	}
	return ""
}

// fileError maps a failed file operation on path.
func fileError(ctx context.Context, e *sandboxEntry, op, path string, err error) *api.Error {
	if ae := commonError(ctx, e, err); ae != nil {
		return ae
	}
	kind := ""
	var pe *agentproto.Error
	switch {
	case errors.As(err, &pe):
		kind = string(pe.Code)
	case errors.Is(err, fs.ErrNotExist):
		kind = "not_found"
	case errors.Is(err, fs.ErrExist):
		kind = "exists"
	case errors.Is(err, fs.ErrPermission):
		kind = "permission"
	case errors.Is(err, fs.ErrInvalid):
		kind = "invalid"
	}
	hint := fileHint(kind)
	if hint == "" {
		return internalError(op+" "+quote(path), err)
	}
	// The agent's own message, when there is one, without the operation
	// and path that the embed API puts in front of it.
	detail := err.Error()
	if pe != nil {
		detail = pe.Message
	}
	return &api.Error{
		Code:    api.CodeFileError,
		Message: fmt.Sprintf("%s %s: %s: %s", op, quote(path), detail, hint),
		Data:    api.FileErrorData{Kind: kind, Path: path},
	}
}
