package agentproto

import (
	"errors"
	"io/fs"
	"syscall"
)

// Code classifies an Error so that each side can map it to a typed error.
type Code string

// Error codes.
const (
	CodeNotFound   Code = "not_found"
	CodeExists     Code = "exists"
	CodePermission Code = "permission"
	CodeInvalid    Code = "invalid"
	CodeTooLarge   Code = "too_large"
	CodeIsDir      Code = "is_dir"
	CodeNotDir     Code = "not_dir"
	CodeNotEmpty   Code = "not_empty"
	CodeNoSpace    Code = "no_space"
	CodeStart      Code = "start_failed"
	CodeInternal   Code = "internal"
	// CodeUnsupported: the agent does not do this here.
	CodeUnsupported Code = "unsupported"
)

// Error is an error that crossed the host-agent boundary.
type Error struct {
	Code    Code   `cbor:"c"`
	Message string `cbor:"m"`
}

func (e *Error) Error() string { return e.Message }

// Is lets errors.Is match an Error against the io/fs sentinel errors.
func (e *Error) Is(target error) bool {
	switch e.Code {
	case CodeNotFound:
		return target == fs.ErrNotExist
	case CodeExists, CodeNotEmpty:
		// As with the errno: Go files ENOTEMPTY under fs.ErrExist too.
		return target == fs.ErrExist
	case CodePermission:
		return target == fs.ErrPermission
	case CodeInvalid:
		return target == fs.ErrInvalid
	}
	return false
}

// ToError converts a local error into one that can be sent to the peer.
func ToError(err error) *Error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	// The errno, when there is one, is the most precise: Go also files
	// ENOTEMPTY under fs.ErrExist, and EROFS under nothing.
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if code, ok := errnoCode(errno); ok {
			return &Error{Code: code, Message: err.Error()}
		}
	}
	code := CodeInternal
	switch {
	case errors.Is(err, fs.ErrNotExist):
		code = CodeNotFound
	case errors.Is(err, fs.ErrExist):
		code = CodeExists
	case errors.Is(err, fs.ErrPermission):
		code = CodePermission
	case errors.Is(err, fs.ErrInvalid):
		code = CodeInvalid
	}
	return &Error{Code: code, Message: err.Error()}
}

// errnoCode classifies the errors file operations meet.
func errnoCode(errno syscall.Errno) (Code, bool) {
	switch errno {
	case syscall.ENOENT:
		return CodeNotFound, true
	case syscall.EEXIST:
		return CodeExists, true
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		return CodePermission, true
	case syscall.EISDIR:
		return CodeIsDir, true
	case syscall.ENOTDIR:
		return CodeNotDir, true
	case syscall.ENOTEMPTY:
		return CodeNotEmpty, true
	case syscall.ENOSPC, syscall.EDQUOT:
		return CodeNoSpace, true
	case syscall.EFBIG:
		return CodeTooLarge, true
	case syscall.EINVAL:
		return CodeInvalid, true
	}
	return "", false
}

// Errorf builds an Error with a code.
func Errorf(code Code, msg string) *Error { return &Error{Code: code, Message: msg} }
