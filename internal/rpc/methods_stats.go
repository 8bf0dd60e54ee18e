package rpc

import (
	"context"
	"errors"

	"github.com/airlock-sandbox/airlock/api"
)

// stats answers with what a running sandbox uses now.
func (ss *session) stats(ctx context.Context, j *job) (any, error) {
	var p api.SandboxParams
	if e := decodeParams(api.MethodStats, j.req.params, &p); e != nil {
		return nil, e
	}
	e, err := ss.policySandbox(p.SandboxID)
	if err != nil {
		return nil, err
	}
	u, err := e.sb.Usage()
	if errors.Is(err, errors.ErrUnsupported) {
		return nil, rpcError(api.CodeUnsupported, "%v", err)
	}
	if err != nil {
		if ae := commonError(ctx, e, err); ae != nil {
			return nil, ae
		}
		return nil, rpcError(api.CodeInternal, "%v", err)
	}
	return u, nil
}

// processes lists the processes of a running sandbox's commands.
func (ss *session) processes(ctx context.Context, j *job) (any, error) {
	var p api.SandboxParams
	if e := decodeParams(api.MethodProcesses, j.req.params, &p); e != nil {
		return nil, e
	}
	e, err := ss.policySandbox(p.SandboxID)
	if err != nil {
		return nil, err
	}
	procs, more, err := e.sb.Processes(ctx)
	if err != nil {
		if ae := commonError(ctx, e, err); ae != nil {
			return nil, ae
		}
		return nil, rpcError(api.CodeInternal, "%v", err)
	}
	return api.ProcessesResult{Processes: procs, More: more}, nil
}
