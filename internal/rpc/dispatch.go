package rpc

import (
	"context"
	"encoding/json"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/api"
)

// job is one request being handled.
type job struct {
	req  *request
	spec methodSpec
	// op is the running exec or attach this request starts, registered
	// when it was read (nil for a notification).
	op *opEntry
	// stdin is a "stdin" request, queued behind the earlier ones for the
	// same exec when it was read.
	stdin *stdinJob
	// early is an error found while reading; it is the answer.
	early *api.Error
	// releaseLine gives back the request line's bytes to the in-flight
	// budget; handlers of long requests call it once the params are
	// decoded. It may be called more than once.
	releaseLine func()
	// after, for a request in the session's order (see inOrder), is
	// closed when the one before it in that order is done; turn is
	// closed (endTurn) when this one is.
	after, turn chan struct{}
	turnOnce    sync.Once
}

// endTurn lets the next request in the session's order start.
func (j *job) endTurn() {
	if j.turn != nil {
		j.turnOnce.Do(func() { close(j.turn) })
	}
}

// inOrder says whether a request takes its turn in the session's order:
// create, pool.create, pool.close, and every request on a sandbox that
// names none (the session's own, as a script piped in names it). Such
// requests run one after another, in the order they were read, so that
// `airlock rpc < file` does what the file says: an exec after a
// write_file sees the file, a request after a create finds its sandbox
// (or pool), and a close waits for the stream before it to end. Requests
// that name their sandbox (as the SDKs' do) run at once, as do the
// requests on a running exec (stdin, signal, resize, cancel), info,
// pool.list and subscriptions.
func inOrder(req *request) bool {
	switch req.method {
	case api.MethodCreate:
		return true
	case api.MethodStdin, api.MethodSignal, api.MethodResize, api.MethodCancel, api.MethodInfo,
		api.MethodSubscribe, api.MethodUnsubscribe, api.MethodPoolList:
		return false
	}
	var p struct {
		SandboxID string `json:"sandbox_id"`
	}
	if len(req.params) > 0 && json.Unmarshal(req.params, &p) != nil {
		return false // its handler says what is wrong with its params
	}
	return p.SandboxID == ""
}

// stdinJob is a decoded "stdin" request in its exec's queue.
type stdinJob struct {
	op        *opEntry
	prev      chan struct{} // closed when the previous one is done
	done      chan struct{} // closed when this one is done
	sandboxID string
	data      []byte
	close     bool
}

// methodFunc handles one method: it returns the result, or an error
// (*api.Error, or any other error reported as internal).
type methodFunc func(ss *session, ctx context.Context, j *job) (any, error)

type methodSpec struct {
	fn methodFunc
	// control methods are quick and may use the reserved slots, so that
	// a cancel gets through when long execs fill the session.
	control bool
}

// methodNames lists the methods, for error messages.
func methodNames() []string {
	return []string{
		api.MethodCreate, api.MethodExec, api.MethodExecStream, api.MethodStdin, api.MethodSignal,
		api.MethodResize, api.MethodCancel, api.MethodWriteFile, api.MethodReadFile, api.MethodListFiles,
		api.MethodStat, api.MethodMkdir, api.MethodRemove, api.MethodSymlink, api.MethodSetAttr, api.MethodClose, api.MethodSubscribe,
		api.MethodUnsubscribe, api.MethodInfo, api.MethodAttach,
		api.MethodPolicyGet, api.MethodPolicyAllow, api.MethodPolicyDeny, api.MethodPolicyRemove, api.MethodStats,
		api.MethodPause, api.MethodResume, api.MethodProcesses,
		api.MethodPortForward, api.MethodPortForwardClose,
		api.MethodPoolCreate, api.MethodPoolClose, api.MethodPoolList,
	}
}

func methodList() string { return strings.Join(methodNames(), ", ") }

// lookupMethod returns the handler of a method.
func lookupMethod(name string) (methodSpec, bool) {
	switch name {
	case api.MethodCreate:
		return methodSpec{fn: (*session).create}, true
	case api.MethodExec:
		return methodSpec{fn: (*session).exec}, true
	case api.MethodExecStream:
		return methodSpec{fn: (*session).execStream}, true
	case api.MethodStdin:
		return methodSpec{fn: (*session).stdin}, true
	case api.MethodSignal:
		return methodSpec{fn: (*session).signal, control: true}, true
	case api.MethodResize:
		return methodSpec{fn: (*session).resize, control: true}, true
	case api.MethodCancel:
		return methodSpec{fn: (*session).cancelOp, control: true}, true
	case api.MethodWriteFile:
		return methodSpec{fn: (*session).writeFile}, true
	case api.MethodReadFile:
		return methodSpec{fn: (*session).readFile}, true
	case api.MethodListFiles:
		return methodSpec{fn: (*session).listFiles}, true
	case api.MethodStat:
		return methodSpec{fn: (*session).stat}, true
	case api.MethodMkdir:
		return methodSpec{fn: (*session).mkdir}, true
	case api.MethodRemove:
		return methodSpec{fn: (*session).remove}, true
	case api.MethodSymlink:
		return methodSpec{fn: (*session).symlink}, true
	case api.MethodSetAttr:
		return methodSpec{fn: (*session).setAttr}, true
	case api.MethodClose:
		return methodSpec{fn: (*session).closeSandbox, control: true}, true
	case api.MethodSubscribe:
		return methodSpec{fn: (*session).subscribe, control: true}, true
	case api.MethodUnsubscribe:
		return methodSpec{fn: (*session).unsubscribe, control: true}, true
	case api.MethodInfo:
		return methodSpec{fn: (*session).info, control: true}, true
	case api.MethodAttach:
		return methodSpec{fn: (*session).attach}, true
	// Policy changes are quick, and may be what the running execs wait
	// for.
	case api.MethodPolicyGet:
		return methodSpec{fn: (*session).policyGet, control: true}, true
	case api.MethodPolicyAllow:
		return methodSpec{fn: (*session).policyAllow, control: true}, true
	case api.MethodPolicyDeny:
		return methodSpec{fn: (*session).policyDeny, control: true}, true
	case api.MethodPolicyRemove:
		return methodSpec{fn: (*session).policyRemove, control: true}, true
	case api.MethodStats:
		return methodSpec{fn: (*session).stats, control: true}, true
	// Pausing is quick, and a resume may be what the running requests
	// wait for.
	case api.MethodPause:
		return methodSpec{fn: (*session).pause, control: true}, true
	case api.MethodResume:
		return methodSpec{fn: (*session).resume, control: true}, true
	case api.MethodProcesses:
		return methodSpec{fn: (*session).processes}, true
	// So are port changes: a listener opened or closed.
	case api.MethodPortForward:
		return methodSpec{fn: (*session).portForward, control: true}, true
	case api.MethodPortForwardClose:
		return methodSpec{fn: (*session).portForwardClose, control: true}, true
	// A pool's start may get an image first; closing and listing pools
	// are quick.
	case api.MethodPoolCreate:
		return methodSpec{fn: (*session).poolCreate}, true
	case api.MethodPoolClose:
		return methodSpec{fn: (*session).poolClose, control: true}, true
	case api.MethodPoolList:
		return methodSpec{fn: (*session).poolList, control: true}, true
	}
	return methodSpec{}, false
}

// prepare does, in the order requests arrive, what must not wait for a
// handler to run: it registers an exec's id so that the requests that
// follow it find it, and queues "stdin" requests in order.
func (ss *session) prepare(j *job) {
	switch j.req.method {
	case api.MethodExec, api.MethodExecStream, api.MethodAttach:
		if j.req.id == nil {
			return // a notification: nothing can refer to it
		}
		op := newOpEntry(j.req.id)
		ss.mu.Lock()
		defer ss.mu.Unlock()
		if _, dup := ss.ops[op.key]; dup {
			j.early = rpcError(api.CodeInvalidRequest, "id %s is already used by a running %s: give each request its own id", op.key, j.req.method)
			return
		}
		ss.ops[op.key] = op
		j.op = op
	case api.MethodStdin:
		var p api.StdinParams
		if e := decodeParams(api.MethodStdin, j.req.params, &p); e != nil {
			j.early = e
			return
		}
		if len(p.ID) == 0 {
			j.early = invalidParams(`stdin params: "id" is required: give the id of the exec_stream (or exec) request started with open_stdin`)
			return
		}
		data, e := decodeBase64(api.MethodStdin, "data", p.Data)
		if e != nil {
			j.early = e
			return
		}
		key := idKey(p.ID)
		ss.mu.Lock()
		defer ss.mu.Unlock()
		op := ss.ops[key]
		if op == nil {
			j.early = noSuchExec(key)
			return
		}
		sj := &stdinJob{op: op, prev: op.stdinTail, done: make(chan struct{}), sandboxID: p.SandboxID, data: data, close: p.Close}
		op.stdinTail = sj.done
		j.stdin = sj
	}
}

func noSuchExec(key string) *api.Error {
	return rpcError(api.CodeNotFound, "no running exec with id %s in this session: it may have ended (its final response was sent)", key)
}

// findOp returns the running exec or attach with this id, once it has
// started.
func (ss *session) findOp(ctx context.Context, id []byte, sandboxID string) (*opEntry, error) {
	if len(id) == 0 {
		return nil, invalidParams(`"id" is required: give the id of the exec_stream or exec request`)
	}
	key := idKey(id)
	ss.mu.Lock()
	op := ss.ops[key]
	ss.mu.Unlock()
	if op == nil {
		return nil, noSuchExec(key)
	}
	return op, waitStarted(ctx, op, sandboxID)
}

// waitStarted waits until op has started, and checks that it runs in the
// sandbox named (if any).
func waitStarted(ctx context.Context, op *opEntry, sandboxID string) error {
	select {
	case <-op.ready:
	case <-ctx.Done():
		return commonError(ctx, nil, ctx.Err())
	}
	if op.tgt == nil {
		return noSuchExec(op.key)
	}
	if sandboxID != "" && sandboxID != op.sandboxID {
		return rpcError(api.CodeNotFound, "exec %s runs in sandbox %s, not %s: give its sandbox_id or none", op.key, op.sandboxID, quote(sandboxID))
	}
	return nil
}
