package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/api"
)

// stdin writes to, or closes, a running exec's stdin, in the order the
// "stdin" requests arrived.
func (ss *session) stdin(ctx context.Context, j *job) (any, error) {
	sj := j.stdin
	select {
	case <-sj.prev:
	case <-ctx.Done():
		return nil, commonError(ctx, nil, ctx.Err())
	}
	op := sj.op
	if err := waitStarted(ctx, op, sj.sandboxID); err != nil {
		return nil, err
	}
	if len(sj.data) > 0 {
		if err := op.tgt.writeStdin(sj.data); err != nil {
			return nil, targetError(ctx, op, "write to stdin", err)
		}
	}
	if sj.close {
		if err := op.tgt.closeStdin(); err != nil {
			return nil, targetError(ctx, op, "close stdin", err)
		}
	}
	return struct{}{}, nil
}

// signal sends a signal to a running exec's process group.
func (ss *session) signal(ctx context.Context, j *job) (any, error) {
	var p api.SignalParams
	if e := decodeParams(api.MethodSignal, j.req.params, &p); e != nil {
		return nil, e
	}
	sig, e := parseSignal(p.Signal)
	if e != nil {
		return nil, e
	}
	op, err := ss.findOp(ctx, p.ID, p.SandboxID)
	if err != nil {
		return nil, err
	}
	if err := op.tgt.signal(sig); err != nil {
		return nil, targetError(ctx, op, "signal", err)
	}
	return struct{}{}, nil
}

// resize changes a TTY exec's window size.
func (ss *session) resize(ctx context.Context, j *job) (any, error) {
	var p api.ResizeParams
	if e := decodeParams(api.MethodResize, j.req.params, &p); e != nil {
		return nil, e
	}
	if p.Rows == 0 || p.Cols == 0 {
		return nil, invalidParams("resize params: rows and cols must both be given, from 1 to 65535")
	}
	op, err := ss.findOp(ctx, p.ID, p.SandboxID)
	if err != nil {
		return nil, err
	}
	if err := op.tgt.resize(p.Rows, p.Cols); err != nil {
		return nil, targetError(ctx, op, "resize", err)
	}
	return struct{}{}, nil
}

// cancelOp kills a running exec and every process it started (its final
// response then says killed_by "signal"), or detaches an attach.
func (ss *session) cancelOp(ctx context.Context, j *job) (any, error) {
	var p api.ExecRefParams
	if e := decodeParams(api.MethodCancel, j.req.params, &p); e != nil {
		return nil, e
	}
	op, err := ss.findOp(ctx, p.ID, p.SandboxID)
	if err != nil {
		return nil, err
	}
	op.cancelled.Store(true)
	if err := op.tgt.cancel(); err != nil && !op.tgt.ended() {
		return nil, targetError(ctx, op, "cancel", err)
	}
	return struct{}{}, nil
}

// targetError maps a failure to act on a running exec or attach.
func targetError(ctx context.Context, op *opEntry, what string, err error) error {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae
	}
	if ce := commonError(ctx, nil, err); ce != nil {
		return ce
	}
	if op.tgt.ended() {
		return rpcError(api.CodeNotFound, "%s: exec %s has ended", what, op.key)
	}
	return internalError(what+" exec "+op.key, err)
}

// linuxSignals are the signals by name; their numbers are Linux's, the
// sandbox's, whatever the host.
func linuxSignals() []string {
	return []string{1: "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2",
		"PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG", "XCPU", "XFSZ",
		"VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS"}
}

// parseSignal reads a signal given by number (1-64) or by name, with or
// without "SIG", in any case.
func parseSignal(raw json.RawMessage) (syscall.Signal, *api.Error) {
	bad := invalidParams(`signal params: "signal" must be a signal name such as "TERM" or "SIGINT", or a number from 1 to 64`)
	if len(raw) == 0 {
		return 0, bad
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		s = string(raw)
	}
	s = strings.TrimSpace(s)
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > 64 {
			return 0, bad
		}
		return syscall.Signal(n), nil
	}
	name := strings.TrimPrefix(strings.ToUpper(s), "SIG")
	switch name {
	case "IOT":
		name = "ABRT"
	case "CLD":
		name = "CHLD"
	case "POLL":
		name = "IO"
	}
	for n, known := range linuxSignals() {
		if n > 0 && known == name {
			return syscall.Signal(n), nil
		}
	}
	return 0, bad
}
