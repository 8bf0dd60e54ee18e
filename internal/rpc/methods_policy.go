package rpc

import (
	"context"
	"errors"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policy"
)

// maxHostPattern bounds a host pattern, well above the longest host
// name, so that an error never quotes a huge one.
const maxHostPattern = 1024

// policyGet lists the host patterns in force in a sandbox's network
// policy.
func (ss *session) policyGet(ctx context.Context, j *job) (any, error) {
	var p api.SandboxParams
	if e := decodeParams(api.MethodPolicyGet, j.req.params, &p); e != nil {
		return nil, e
	}
	e, err := ss.policySandbox(p.SandboxID)
	if err != nil {
		return nil, err
	}
	return policyResult(ctx, e)
}

func (ss *session) policyAllow(ctx context.Context, j *job) (any, error) {
	return ss.policyChange(ctx, j, api.MethodPolicyAllow, (*airlock.Sandbox).AllowHost)
}

func (ss *session) policyDeny(ctx context.Context, j *job) (any, error) {
	return ss.policyChange(ctx, j, api.MethodPolicyDeny, (*airlock.Sandbox).DenyHost)
}

func (ss *session) policyRemove(ctx context.Context, j *job) (any, error) {
	return ss.policyChange(ctx, j, api.MethodPolicyRemove, (*airlock.Sandbox).RemoveHost)
}

// policyChange applies one change to the host lists of a sandbox's
// network policy and answers with the lists then in force.
func (ss *session) policyChange(ctx context.Context, j *job, method string, change func(*airlock.Sandbox, string) error) (any, error) {
	var p api.PolicyHostParams
	if e := decodeParams(method, j.req.params, &p); e != nil {
		return nil, e
	}
	if p.Host == "" {
		return nil, invalidParams(`%s params: "host" is required: give a host pattern such as "api.example.com" or "*.example.com"`, method)
	}
	if len(p.Host) > maxHostPattern {
		return nil, invalidParams(`%s params: "host" is %d bytes long: a host name has at most 253`, method, len(p.Host))
	}
	e, err := ss.policySandbox(p.SandboxID)
	if err != nil {
		return nil, err
	}
	if err := change(e.sb, p.Host); err != nil {
		return nil, policyError(ctx, e, method, p.Host, err)
	}
	return policyResult(ctx, e)
}

// policySandbox resolves the sandbox of a policy request: it must run.
func (ss *session) policySandbox(id string) (*sandboxEntry, error) {
	e, err := ss.resolve(id)
	if err != nil {
		return nil, err
	}
	if stopped(e.sb) {
		return nil, notRunning(e.sb)
	}
	return e, nil
}

func policyResult(ctx context.Context, e *sandboxEntry) (any, error) {
	allowed, denied, err := e.sb.Hosts()
	if err != nil {
		return nil, policyError(ctx, e, api.MethodPolicyGet, "", err)
	}
	if allowed == nil {
		allowed = []string{}
	}
	if denied == nil {
		denied = []string{}
	}
	return api.PolicyResult{AllowedHosts: allowed, DeniedHosts: denied}, nil
}

// policyError maps a failed policy request.
func policyError(ctx context.Context, e *sandboxEntry, method, host string, err error) *api.Error {
	switch {
	case errors.Is(err, airlock.ErrNoNetwork):
		return rpcError(api.CodeUnsupported, "sandbox %s has no network: it was created without \"network\", so it has no interface and no policy to change; create a sandbox with a network object (an empty one, {}, allows nothing, and %s then adds hosts)", e.sb.ID(), api.MethodPolicyAllow)
	case errors.Is(err, policy.ErrNotListed):
		return rpcError(api.CodeNotFound, "%s: %s is in neither allowed_hosts nor denied_hosts: %s lists them (a pattern is removed as it was added: removing api.example.com does not narrow *.example.com)", method, quote(host), api.MethodPolicyGet)
	}
	if ae := commonError(ctx, e, err); ae != nil {
		return ae
	}
	// The policy refuses only patterns it cannot parse; its message
	// quotes the pattern.
	return invalidParams("%s params: \"host\": %v: give a host name (api.example.com), *. and a domain (*.example.com), or * for any public host", method, err)
}
