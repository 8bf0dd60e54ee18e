package rpc

import (
	"context"
	"errors"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
)

// portForward publishes a TCP port of a running sandbox on the host.
func (ss *session) portForward(ctx context.Context, j *job) (any, error) {
	var p api.PortForwardParams
	if e := decodeParams(api.MethodPortForward, j.req.params, &p); e != nil {
		return nil, e
	}
	if p.SandboxPort == 0 {
		return nil, invalidParams(`%s params: "sandbox_port" is required: give the port, 1 to 65535, a server in the sandbox listens on (on 0.0.0.0, not 127.0.0.1 alone)`, api.MethodPortForward)
	}
	e, err := ss.policySandbox(p.SandboxID)
	if err != nil {
		return nil, err
	}
	pub, err := e.sb.Publish(ctx, airlock.PortMapping{SandboxPort: p.SandboxPort, HostPort: p.HostPort, HostIP: p.HostIP, Protocol: p.Protocol})
	if err != nil {
		return nil, portError(ctx, e, api.MethodPortForward, err)
	}
	return pub, nil
}

// portForwardClose stops a published port of a sandbox.
func (ss *session) portForwardClose(ctx context.Context, j *job) (any, error) {
	var p api.PortForwardCloseParams
	if e := decodeParams(api.MethodPortForwardClose, j.req.params, &p); e != nil {
		return nil, e
	}
	if p.HostPort == 0 {
		return nil, invalidParams(`%s params: "host_port" is required: give the host port that port_forward answered with`, api.MethodPortForwardClose)
	}
	e, err := ss.policySandbox(p.SandboxID)
	if err != nil {
		return nil, err
	}
	closed, err := e.sb.Unpublish(p.HostIP, p.HostPort)
	if err != nil {
		return nil, portError(ctx, e, api.MethodPortForwardClose, err)
	}
	return api.PortForwardCloseResult{Closed: closed}, nil
}

// portError maps a failed port request.
func portError(ctx context.Context, e *sandboxEntry, method string, err error) *api.Error {
	if ae := commonError(ctx, e, err); ae != nil {
		return ae
	}
	switch {
	case errors.Is(err, airlock.ErrNoNetwork):
		return rpcError(api.CodeUnsupported, "%s: sandbox %s: %v", method, e.sb.ID(), err)
	case errors.Is(err, airlock.ErrPortNotPublished):
		return rpcError(api.CodeNotFound, "%s: %v", method, err)
	case errors.Is(err, airlock.ErrTooManyPorts):
		return rpcError(api.CodeLimitExceeded, "%s: %v", method, err)
	}
	// A mapping that is not valid, or a host address that cannot be
	// listened on (in use, privileged, not this host's): the message
	// says which and what to give instead.
	return invalidParams("%s params: %v", method, err)
}
