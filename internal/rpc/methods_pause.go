package rpc

import (
	"context"
	"errors"

	"github.com/airlock-sandbox/airlock/api"
)

// pause stops every process of a running sandbox until resume.
func (ss *session) pause(ctx context.Context, j *job) (any, error) {
	return ss.pauseOrResume(ctx, j, api.MethodPause)
}

// resume lets a paused sandbox's processes run on.
func (ss *session) resume(ctx context.Context, j *job) (any, error) {
	return ss.pauseOrResume(ctx, j, api.MethodResume)
}

func (ss *session) pauseOrResume(ctx context.Context, j *job, method string) (any, error) {
	var p api.SandboxParams
	if e := decodeParams(method, j.req.params, &p); e != nil {
		return nil, e
	}
	e, err := ss.policySandbox(p.SandboxID)
	if err != nil {
		return nil, err
	}
	do := e.sb.Pause
	if method == api.MethodResume {
		do = e.sb.Resume
	}
	if err := do(ctx); err != nil {
		if ae := commonError(ctx, e, err); ae != nil {
			return nil, ae
		}
		if errors.Is(err, errors.ErrUnsupported) {
			return nil, rpcError(api.CodeUnsupported, "%v", err)
		}
		return nil, rpcError(api.CodeInternal, "%v", err)
	}
	return struct{}{}, nil
}
