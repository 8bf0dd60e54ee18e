package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/airlock-sandbox/airlock/api"
)

// Sentinel errors. An *Error from the server matches the sentinel of its
// code with errors.Is, so callers need not compare codes.
var (
	// ErrClosed reports that the client was closed or that its server went
	// away (the subprocess exited or the connection dropped). The error
	// returned wraps it together with the cause: the exit status and the
	// last lines of the server's stderr when they are known.
	ErrClosed = errors.New("airlock client is closed")

	// ErrOutputOverflow reports that a streaming command produced more
	// output than the process buffer holds because nothing read it. The
	// command is cancelled when this happens.
	ErrOutputOverflow = errors.New("command output not read fast enough")

	// ErrStartFailed matches api.CodeStartFailed: the sandbox could not be
	// started.
	ErrStartFailed = errors.New("sandbox could not be started")
	// ErrNotFound matches api.CodeNotFound: no such sandbox or exec (or,
	// for RemoveHost, a pattern in neither host list).
	ErrNotFound = errors.New("not found")
	// ErrNotRunning matches api.CodeNotRunning: the sandbox has stopped
	// (closed, timed out or crashed).
	ErrNotRunning = errors.New("sandbox is not running")
	// ErrLimitExceeded matches api.CodeLimitExceeded: a message, output,
	// file or request-count limit was reached.
	ErrLimitExceeded = errors.New("limit exceeded")
	// ErrPolicyDenied matches api.CodePolicyDenied: refused by network or
	// file policy.
	ErrPolicyDenied = errors.New("denied by policy")
	// ErrCommandFailed matches api.CodeCommandFailed: the command could not
	// be started. See IsCommandNotFound and (*Error).ExitCode.
	ErrCommandFailed = errors.New("command could not be started")
	// ErrCancelled matches api.CodeCancelled: the request was cancelled or
	// the session ended.
	ErrCancelled = errors.New("request cancelled")
	// ErrUnsupported matches api.CodeUnsupported: a feature this build or
	// platform of the server does not offer, or the sandbox lacks (the
	// policy methods of a sandbox created without a network). Such errors
	// also match errors.ErrUnsupported.
	ErrUnsupported = errors.New("unsupported by this server")
	// ErrPermissionDenied matches api.CodePermissionError: the caller may
	// not do this (for example create on a control socket).
	ErrPermissionDenied = errors.New("not permitted on this connection")
	// ErrPaused matches api.CodePaused: the sandbox is paused (resume
	// it first), or a pause or resume found it already so.
	ErrPaused = errors.New("sandbox is paused")
	// ErrInvalidParams matches api.CodeInvalidParams.
	ErrInvalidParams = errors.New("invalid params")
	// ErrMethodNotFound matches api.CodeMethodNotFound: the server does not
	// know the method (it is probably older than this client).
	ErrMethodNotFound = errors.New("method not found")
)

// File error kinds (the Kind of api.FileErrorData).
const (
	FileNotFound   = "not_found"
	FileExists     = "exists"
	FilePermission = "permission"
	FileIsDir      = "is_dir"
	FileNotDir     = "not_dir"
	FileNotEmpty   = "not_empty"
	FileNoSpace    = "no_space"
	FileTooLarge   = "too_large"
	FileInvalid    = "invalid"
)

// Error is a JSON-RPC error returned by the server.
//
// It matches, with errors.Is, the sentinel of its code (ErrNotRunning,
// ErrNotFound, ErrUnsupported, ...). A file error (api.CodeFileError) also
// matches fs.ErrNotExist, fs.ErrExist or fs.ErrPermission according to its
// kind, so the usual io/fs checks work on sandbox files.
type Error struct {
	// Method is the request that failed.
	Method string
	// Code is one of the api.Code* constants.
	Code int
	// Message says what failed and what to do, in the server's words.
	Message string
	// Data carries machine-readable details, as sent (api.FileErrorData,
	// api.CommandFailedData, ...).
	Data json.RawMessage
}

// Error returns the method and the server's message.
func (e *Error) Error() string {
	if e.Method == "" {
		return fmt.Sprintf("airlock: %s (code %d)", e.Message, e.Code)
	}
	return fmt.Sprintf("airlock %s: %s (code %d)", e.Method, e.Message, e.Code)
}

// Is reports whether target is the sentinel of e's code or, for file
// errors, the io/fs error of its kind.
func (e *Error) Is(target error) bool {
	switch target {
	case fs.ErrNotExist:
		return e.FileErrorKind() == FileNotFound
	case fs.ErrExist:
		return e.FileErrorKind() == FileExists
	case fs.ErrPermission:
		return e.FileErrorKind() == FilePermission
	case errors.ErrUnsupported:
		return e.Code == api.CodeUnsupported
	}
	s := codeSentinel(e.Code)
	return s != nil && s == target
}

func codeSentinel(code int) error {
	switch code {
	case api.CodeStartFailed:
		return ErrStartFailed
	case api.CodeNotFound:
		return ErrNotFound
	case api.CodeNotRunning:
		return ErrNotRunning
	case api.CodeLimitExceeded:
		return ErrLimitExceeded
	case api.CodePolicyDenied:
		return ErrPolicyDenied
	case api.CodeCommandFailed:
		return ErrCommandFailed
	case api.CodeCancelled:
		return ErrCancelled
	case api.CodeUnsupported:
		return ErrUnsupported
	case api.CodePermissionError:
		return ErrPermissionDenied
	case api.CodePaused:
		return ErrPaused
	case api.CodeInvalidParams:
		return ErrInvalidParams
	case api.CodeMethodNotFound:
		return ErrMethodNotFound
	}
	return nil
}

// FileError returns the details of a file error (api.CodeFileError), and
// false for any other error.
func (e *Error) FileError() (api.FileErrorData, bool) {
	var d api.FileErrorData
	if e.Code != api.CodeFileError || len(e.Data) == 0 || json.Unmarshal(e.Data, &d) != nil {
		return api.FileErrorData{}, false
	}
	return d, true
}

// FileErrorKind returns the kind of a file error (FileNotFound,
// FileExists, ...), or "" for any other error.
func (e *Error) FileErrorKind() string {
	d, _ := e.FileError()
	return d.Kind
}

// ExitCode returns, for api.CodeCommandFailed, the code a shell would have
// returned (127 not found, 126 not executable), and -1 for any other error.
func (e *Error) ExitCode() int {
	var d api.CommandFailedData
	if e.Code != api.CodeCommandFailed || len(e.Data) == 0 || json.Unmarshal(e.Data, &d) != nil {
		return -1
	}
	return d.ExitCode
}

// IsCommandNotFound reports whether err says that a command could not be
// started because it does not exist (exit code 127).
func IsCommandNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == api.CodeCommandFailed && e.ExitCode() == 127
}

// closedError is ErrClosed together with why the client closed.
type closedError struct{ cause error }

func (e *closedError) Error() string {
	if e.cause == nil {
		return ErrClosed.Error()
	}
	return ErrClosed.Error() + ": " + e.cause.Error()
}

func (e *closedError) Is(target error) bool { return target == ErrClosed }
func (e *closedError) Unwrap() error        { return e.cause }

// errClosedByCaller is the cause when Close was called.
var errClosedByCaller = errors.New("closed by Client.Close")
